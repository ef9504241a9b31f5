//! Text that crosses a trust boundary in a message: a server quoting a client's input, a client
//! showing a server's error. Both are cut to a bounded prefix, and control and bidirectional
//! formatting characters are dropped so a quoted string cannot drive a terminal (escape
//! sequences) or reorder what the reader sees.

/// At most `max_chars` characters of `s`, without control or bidi-formatting characters; `…`
/// marks a cut.
pub fn excerpt(s: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(s.len().min(4 * max_chars + 3));
    for (kept, c) in s.chars().filter(|&c| !hidden(c)).enumerate() {
        if kept == max_chars {
            out.push('…');
            return out;
        }
        out.push(c);
    }
    out
}

/// Control characters (C0, DEL, C1: ESC starts terminal sequences) and the Unicode formatting
/// characters that reorder or hide text.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_and_drops_what_could_drive_a_terminal() {
        assert_eq!(excerpt("plain", 10), "plain");
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("a\u{1b}[2Jb\r\nc\u{202E}d", 10), "a[2Jbcd");
        assert_eq!(excerpt("ééé", 2), "éé…");
        assert_eq!(excerpt(&"x".repeat(10_000_000), 300).chars().count(), 301);
    }
}
