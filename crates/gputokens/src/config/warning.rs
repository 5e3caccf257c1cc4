//! One warning of `config check`, as each family of checks (advice, advice_timing, advice_reach)
//! makes it: a file of its own, so those families need not import one another.

/// One warning: the keys it is about, and what they do together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    pub keys: &'static str,
    pub text: String,
}
