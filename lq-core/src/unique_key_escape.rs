//! Field values in a rendered `unique_key`, escaped so distinct values never share a key.
//!
//! The derive passes the characters to escape, computed from the template at compile
//! time: empty when the template has at most one placeholder (a lone value cannot be
//! confused with anything, so it is written as is), otherwise `\` plus the first
//! character of each literal text between two placeholders. Every placeholder pair is
//! separated by such text (the derive rejects `{a}{b}`), and that text never starts
//! with `\`, so reading a key left to right, `\x` is an escaped `x` and an unescaped
//! separator character ends a value: the key decodes back into its values.

use core::fmt::{self, Display, Write as _};

/// Appends `value` to `out`, with a backslash before each of its characters found in
/// `escape`.
///
/// ```
/// # use lq_core::__private::push_key_value;
/// let mut key = String::from("k:");
/// push_key_value(&mut key, &"1:2\\", "\\:");
/// assert_eq!(key, r"k:1\:2\\");
/// push_key_value(&mut key, &42, "\\:");
/// assert_eq!(key, r"k:1\:2\\42");
/// ```
///
/// # Panics
///
/// When `value`'s `Display` returns an error, as `format!` does.
pub fn push_key_value(out: &mut String, value: &dyn Display, escape: &str) {
    let written = if escape.is_empty() {
        write!(out, "{value}")
    } else {
        write!(Escaper { out, escape }, "{value}")
    };
    written.expect("a Display implementation returned an error unexpectedly");
}

/// Writes into `out`, escaping as it goes: no buffer per value.
struct Escaper<'a> {
    out: &'a mut String,
    escape: &'a str,
}

impl fmt::Write for Escaper<'_> {
    fn write_str(&mut self, mut s: &str) -> fmt::Result {
        while let Some((at, c)) = s.char_indices().find(|&(_, c)| self.escape.contains(c)) {
            self.out.push_str(&s[..at]);
            self.out.push('\\');
            self.out.push(c);
            s = &s[at + c.len_utf8()..];
        }
        self.out.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// The derive's rendering of `k:{a}:{b}`.
    fn key(a: &str, b: &str) -> String {
        let mut out = String::from("k:");
        push_key_value(&mut out, &a, "\\:");
        out.push(':');
        push_key_value(&mut out, &b, "\\:");
        out
    }

    #[test]
    fn plain_values_render_as_before() {
        assert_eq!(key("42", "7"), "k:42:7");
        let mut out = String::from("welcome:");
        push_key_value(&mut out, &42_i64, "");
        assert_eq!(out, "welcome:42");
        let id = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        assert_eq!(key(id, "x"), format!("k:{id}:x"));
    }

    #[test]
    fn separators_inside_values_no_longer_collide() {
        assert_eq!(key("1:2", "3"), r"k:1\:2:3");
        assert_eq!(key("1", "2:3"), r"k:1:2\:3");
        assert_ne!(key("1:2", "3"), key("1", "2:3"));
    }

    #[test]
    fn backslashes_are_escaped_too() {
        assert_eq!(key("x\\", "y"), r"k:x\\:y");
        assert_ne!(key("x\\", ":y"), key("x", "\\:y"));
        assert_ne!(key("x\\:", "y"), key("x\\", ":y"));
    }

    #[test]
    fn escapes_any_character_in_the_set() {
        let mut out = String::new();
        push_key_value(&mut out, &"é-ü/ß", "\\é/");
        assert_eq!(out, r"\é-ü\/ß");
        let mut out = String::new();
        push_key_value(&mut out, &"a\\b:c", "");
        assert_eq!(out, "a\\b:c", "nothing to escape: verbatim");
    }

    /// Every string of up to `len` characters from `alphabet`.
    fn strings(alphabet: &[char], len: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..len {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn no_two_value_pairs_share_a_key() {
        let values = strings(&['1', ':', '\\'], 4);
        assert_eq!(values.len(), 1 + 3 + 9 + 27 + 81);
        let mut seen: HashMap<String, (&str, &str)> = HashMap::new();
        for a in &values {
            for b in &values {
                if let Some(other) = seen.insert(key(a, b), (a, b)) {
                    panic!("{other:?} and {:?} both render {:?}", (a, b), key(a, b));
                }
            }
        }
        assert_eq!(seen.len(), values.len() * values.len());
    }
}
