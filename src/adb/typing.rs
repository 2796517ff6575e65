//! Text as the device shell types it: `input text` takes one quoted argument of ASCII, and a newline or
//! a tab is a key event of its own.

/// The text as one literal argument of the device shell: single quotes, each `'` written `'\''`.
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The device commands that type ASCII `text` as it reads, one after the other. `input text` takes one
/// literal argument (quoted); a newline is the Enter key and a tab the Tab key; and since `input text`
/// turns `%s` into a space, a `%` followed by `s` is typed in two parts.
pub fn text_steps(text: &str) -> Vec<String> {
    let mut commands: Vec<String> = Vec::new();
    let mut segment = String::new();
    let flush = |segment: &mut String, commands: &mut Vec<String>| {
        if !segment.is_empty() {
            commands.push(format!("input text {}", quote(segment)));
            segment.clear();
        }
    };
    let mut characters = text.chars().peekable();
    while let Some(character) = characters.next() {
        match character {
            '\r' if characters.peek() == Some(&'\n') => {}
            '\n' | '\r' => {
                flush(&mut segment, &mut commands);
                commands.push("input keyevent 66".into());
            }
            '\t' => {
                flush(&mut segment, &mut commands);
                commands.push("input keyevent 61".into());
            }
            '%' if characters.peek() == Some(&'s') => {
                segment.push('%');
                flush(&mut segment, &mut commands);
            }
            other => segment.push(other),
        }
    }
    flush(&mut segment, &mut commands);
    commands
}

/// The first character `input text` cannot type (it injects key events of the device's ASCII keymap).
pub fn first_non_ascii(text: &str) -> Option<(usize, char)> {
    text.chars().enumerate().find(|(_, c)| !c.is_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_one_literal_argument() {
        let text_command = |text: &str| text_steps(text).join(" && ");
        assert_eq!(text_command("hello"), "input text 'hello'");
        assert_eq!(text_command("it's"), r"input text 'it'\''s'");
        assert_eq!(
            text_command("a\nb\tc"),
            "input text 'a' && input keyevent 66 && input text 'b' && input keyevent 61 && input text 'c'"
        );
        assert_eq!(
            text_command("100%sure"),
            "input text '100%' && input text 'sure'"
        );
        assert_eq!(text_command("x\r\n"), "input text 'x' && input keyevent 66");
    }
}
