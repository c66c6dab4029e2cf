//! Error text as it is stored: every outcome write must land, so the text a
//! handler, a panic or a decoder produced is made storable first.
//!
//! PostgreSQL refuses a NUL in `text` and `jsonb` (SQLSTATE 22021 / 22P05), and an
//! error can be as large as the payload it quotes. Each stored entry is therefore
//! NUL-free and at most [`MAX_ERROR_BYTES`] long, with a marker saying how much was
//! cut; each job keeps its newest [`MAX_ERRORS_KEPT`] entries.

use std::borrow::Cow;

/// Longest error text stored per attempt, in bytes (the marker included).
pub const MAX_ERROR_BYTES: usize = 8 * 1024;

/// How many attempts' errors a job keeps (the newest).
pub const MAX_ERRORS_KEPT: usize = 20;

/// What a NUL in error text is stored as.
const NUL_REPLACEMENT: &str = "\\0";

/// `text` with every NUL replaced by `\0` and cut to [`MAX_ERROR_BYTES`] at a
/// character boundary, ending in `… [N bytes cut]` when it was cut.
///
/// ```
/// use lq_core::storable_error;
/// assert_eq!(storable_error("a\0b"), "a\\0b");
/// let long = "x".repeat(100_000);
/// let stored = storable_error(&long);
/// assert!(stored.len() <= lq_core::MAX_ERROR_BYTES);
/// assert!(stored.ends_with("bytes cut]"));
/// ```
pub fn storable_error(text: &str) -> Cow<'_, str> {
    let text: Cow<'_, str> = if text.contains('\0') {
        Cow::Owned(text.replace('\0', NUL_REPLACEMENT))
    } else {
        Cow::Borrowed(text)
    };
    if text.len() <= MAX_ERROR_BYTES {
        return text;
    }
    // The marker is at most 32 bytes; keep the rest of the budget for the text.
    let mut keep = MAX_ERROR_BYTES - 32;
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    let cut = text.len() - keep;
    Cow::Owned(format!("{}… [{cut} bytes cut]", &text[..keep]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_without_nul_is_borrowed_unchanged() {
        assert!(matches!(storable_error("boom"), Cow::Borrowed("boom")));
    }

    #[test]
    fn nul_is_replaced_visibly() {
        assert_eq!(storable_error("x\0y\0"), "x\\0y\\0");
    }

    #[test]
    fn long_text_is_cut_at_a_char_boundary_with_a_marker() {
        let text = "é".repeat(MAX_ERROR_BYTES); // two bytes each
        let stored = storable_error(&text);
        assert!(stored.len() <= MAX_ERROR_BYTES, "{}", stored.len());
        let kept = stored.split('…').next().unwrap().len();
        assert!(stored.ends_with(&format!("[{} bytes cut]", text.len() - kept)));
    }

    #[test]
    fn text_of_exactly_the_limit_is_kept_whole() {
        let text = "a".repeat(MAX_ERROR_BYTES);
        assert_eq!(storable_error(&text), text);
    }
}
