//! One warning of `config check`, as each family of checks (advice, advice_timing, advice_reach)
//! makes it: a file of its own, so those families need not import one another.

/// One warning: the keys it is about, and what they do together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    pub keys: &'static str,
    pub text: String,
}

/// The warnings one family of checks (`advice(config, &mut out)`) finds in the file `text`.
#[cfg(test)]
pub(super) fn found_by(family: fn(&super::Config, &mut Vec<Advice>), text: &str) -> Vec<Advice> {
    let config = super::Config::parse(text, std::path::Path::new("t.toml")).unwrap();
    let mut out = Vec::new();
    family(&config, &mut out);
    out
}
