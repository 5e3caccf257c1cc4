//! Quoting for the commands the journal check prints: an admin pastes them into a shell, so a
//! reason or a user name must reach accountd as one argument, whatever it holds.

/// `text` as one shell word on one line: as is when it holds only characters no shell treats
/// specially; in single quotes (a quote inside as `'\''`) when it holds nothing a terminal would
/// act on; else (control characters, direction marks: text entered before they were refused) in
/// `$'...'` with those characters escaped, so the command shown is exactly the command pasted.
pub fn quote(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_string()
    } else if !text.chars().any(gputokens::free_text::hidden_meaning) {
        format!("'{}'", text.replace('\'', r"'\''"))
    } else {
        let mut word = String::from("$'");
        for c in text.chars() {
            match c {
                '\\' => word.push_str(r"\\"),
                '\'' => word.push_str(r"\'"),
                c if gputokens::free_text::hidden_meaning(c) && (c as u32) < 0x100 => {
                    word.push_str(&format!("\\x{:02x}", c as u32))
                }
                c if gputokens::free_text::hidden_meaning(c) => word.push_str(&format!("\\u{:04x}", c as u32)),
                c => word.push(c),
            }
        }
        word.push('\'');
        word
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
        // One line, whatever the text: control characters escaped in $'...'.
        assert_eq!(quote("a\n  accountd admin grant carol 1; sh"), r"$'a\x0a  accountd admin grant carol 1; sh'");
        assert_eq!(quote("x\u{1b}[2K'\\"), r"$'x\x1b[2K\'\\'");
        assert_eq!(quote("\u{202e}"), r"$'\u202e'");
    }
}
