//! Quoting for the commands the journal check prints: an admin pastes them into a shell, so a
//! reason or a user name must reach accountd as one argument, whatever it holds.

/// `text` as one POSIX shell word: as is when it holds only characters no shell treats specially,
/// else in single quotes (a quote inside as `'\''`).
pub fn quote(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn only_plain_words_go_unquoted() {
        assert_eq!(quote("alice"), "alice");
        assert_eq!(quote("j.doe@example.org"), "j.doe@example.org");
        assert_eq!(quote("-2.5"), "-2.5");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}
