//! The reason stored when a payload does not decode into its job type, without
//! the values serde quotes.
//!
//! serde quotes the value it could not use (`invalid type: string "4111 1111
//! 1111 1111", expected u64`), and the reason is shown to every reader of the
//! dashboard and `lq`, with or without a redaction hook. The stored reason keeps
//! what an operator needs (the kind of value found, what was expected, the
//! field names, the line and column) and drops the value serde quotes. Field
//! names (an unknown field's included) are kept, and a type's own
//! `Deserialize` that writes payload values into its errors is the type's to
//! mind.

/// `message` (a serde error's text) with the values it quotes removed: the
/// value after `invalid type:` / `invalid value:` and the name after
/// `unknown variant`.
pub(crate) fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    loop {
        let next = ["invalid type: ", "invalid value: ", "unknown variant "]
            .iter()
            .filter_map(|m| rest.find(m).map(|i| (i + m.len(), *m)))
            .min_by_key(|(i, _)| *i);
        let Some((after, marker)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..after]);
        rest = &rest[after..];
        // The quoted value starts at the first quote of this clause, if any.
        let clause_end = rest.find(", expected").unwrap_or(rest.len());
        let Some(start) = rest[..clause_end].find(['`', '"']) else {
            continue;
        };
        let Some(len) = quoted_len(&rest[start..]) else {
            // Unterminated: drop the rest of the message rather than guess.
            out.push_str(rest[..start].trim_end());
            out.push_str(" (value hidden)");
            return out;
        };
        let kept = rest[..start].trim_end();
        out.push_str(kept);
        if marker == "unknown variant " || kept.is_empty() {
            out.push_str("(value hidden)");
        } else {
            out.push_str(" (value hidden)");
        }
        rest = &rest[start + len..];
    }
}

/// Length in bytes of the quoted value at the start of `s`: `` `…` `` (numbers,
/// booleans, a character, which may itself be a backtick) or `"…"` with
/// backslash escapes (a string, as `Debug` writes it).
fn quoted_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices();
    let (_, open) = chars.next()?;
    if open == '`' {
        let (_, first) = chars.next()?;
        let from = 1 + first.len_utf8();
        return s[from..].find('`').map(|i| from + i + 1);
    }
    let mut escaped = false;
    for (i, c) in chars {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(i + 1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Payment {
        card: u64,
        note: String,
        method: Method,
        initial: char,
    }

    #[derive(Debug, serde::Deserialize)]
    enum Method {
        Card,
    }

    fn reason(json: &str) -> String {
        let e = serde_json::from_str::<Payment>(json).unwrap_err();
        without_values(&e.to_string())
    }

    #[test]
    fn a_string_where_a_number_belongs_is_named_but_not_shown() {
        let r = reason(
            r#"{"card": "4111 1111 1111 1111", "note": "x", "method": "Card", "initial": "a"}"#,
        );
        assert!(!r.contains("4111"), "{r}");
        assert!(
            r.starts_with("invalid type: string (value hidden), expected u64"),
            "{r}"
        );
        assert!(r.contains("line 1 column"), "{r}");
    }

    #[test]
    fn numbers_booleans_and_characters_are_hidden_too() {
        for (json, secret) in [
            (
                r#"{"card": 1, "note": 4242424242, "method": "Card", "initial": "a"}"#,
                "4242424242",
            ),
            (
                r#"{"card": 1, "note": true, "method": "Card", "initial": "a"}"#,
                "true",
            ),
            (
                r#"{"card": -99887766, "note": "", "method": "Card", "initial": "a"}"#,
                "99887766",
            ),
            (
                r#"{"card": 1.5e300, "note": "", "method": "Card", "initial": "a"}"#,
                "1.5e300",
            ),
        ] {
            let r = reason(json);
            assert!(!r.contains(secret), "{r}");
            assert!(r.contains("(value hidden)"), "{r}");
        }
    }

    #[test]
    fn quotes_and_separators_inside_the_value_do_not_end_it_early() {
        let r = without_values(
            r#"invalid type: string "a \"b\", expected secret", expected u64 at line 1 column 9"#,
        );
        assert_eq!(
            r,
            "invalid type: string (value hidden), expected u64 at line 1 column 9"
        );
        let r = without_values("invalid value: character ```, expected a digit");
        assert_eq!(
            r,
            "invalid value: character (value hidden), expected a digit"
        );
    }

    #[test]
    fn an_unknown_variant_is_hidden_and_the_expected_ones_kept() {
        let r =
            reason(r#"{"card": 1, "note": "", "method": "Bitcoin-wallet-9f8e", "initial": "a"}"#);
        assert!(!r.contains("Bitcoin"), "{r}");
        assert!(
            r.contains("unknown variant (value hidden), expected `Card`"),
            "{r}"
        );
    }

    #[test]
    fn field_names_and_messages_without_values_are_kept() {
        let r = reason(r#"{"note": "secret", "method": "Card", "initial": "a"}"#);
        assert!(r.starts_with("missing field `card`"), "{r}");
        assert_eq!(
            without_values("expected value at line 1 column 1"),
            "expected value at line 1 column 1"
        );
        let r = without_values("invalid type: map, expected u64");
        assert_eq!(r, "invalid type: map, expected u64");
    }

    #[test]
    fn an_unterminated_value_drops_the_rest() {
        assert_eq!(
            without_values(r#"invalid type: string "4111 1111"#),
            "invalid type: string (value hidden)"
        );
    }
}
