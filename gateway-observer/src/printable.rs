//! Text a target controls, made safe to print: a process sets its own thread names
//! (`prctl(PR_SET_NAME)`, `/proc/self/task/N/comm`), and its file and symbol names are its own,
//! so any of them may hold escape sequences that would drive the reader's terminal. Control
//! characters (C0, DEL, C1) are shown as escapes instead; everything else is kept as it is.

use std::borrow::Cow;

fn is_control(c: char) -> bool {
    c.is_control() // Cc: U+0000..U+001F, U+007F..U+009F
}

/// `text` with each control character as `\xNN` (C0, DEL) or `\u{NN}` (C1).
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match u32::from(c) {
            n @ (0..=0x1f | 0x7f) => out.push_str(&format!("\\x{n:02x}")),
            n @ 0x80..=0x9f => out.push_str(&format!("\\u{{{n:x}}}")),
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Escapes every string and key in `value`, for views that print them.
pub fn escape_json(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => {
            if let Cow::Owned(escaped) = escape(s) {
                *s = escaped;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(escape_json),
        serde_json::Value::Object(map) => {
            if map.keys().any(|k| k.chars().any(is_control)) {
                *map = std::mem::take(map).into_iter().map(|(k, v)| (escape(&k).into_owned(), v)).collect();
            }
            map.values_mut().for_each(escape_json);
        }
        _ => {}
    }
}

/// JSON text with DEL and C1 characters written as `\u00NN`. serde_json escapes C0 only; the
/// result is the same JSON, and safe on a terminal.
pub fn json_text(json: String) -> String {
    if !json.chars().any(is_control) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        // Outside strings JSON has only ASCII punctuation and whitespace (\n, \t, \r stay).
        if is_control(c) && !matches!(c, '\n' | '\t' | '\r') {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(escape("gw-worker-1"), "gw-worker-1");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(escape("\x1b]0;pwned\x07x"), "\\x1b]0;pwned\\x07x");
        assert_eq!(escape("a\u{9b}2Jb\x7f"), "a\\u{9b}2Jb\\x7f");
        assert_eq!(escape("résumé-線程"), "résumé-線程");
    }

    #[test]
    fn json_values_and_text_are_escaped_and_stay_json() {
        let mut v = serde_json::json!({"comm": "\x1b[2J", "list": ["ok", "\u{9b}1m"], "k\x1b": 1});
        escape_json(&mut v);
        assert_eq!(v, serde_json::json!({"comm": "\\x1b[2J", "list": ["ok", "\\u{9b}1m"], "k\\x1b": 1}));
        let raw = serde_json::json!({"thread": "a\u{9b}b\x1bc\x7f"});
        let text = json_text(serde_json::to_string_pretty(&raw).expect("json"));
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).expect("still JSON"), raw);
    }
}
