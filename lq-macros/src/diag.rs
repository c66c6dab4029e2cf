//! Diagnostics helpers: collecting several spanned errors and "did you mean" hints.

use std::fmt::Display;

use proc_macro2::Span;

/// Collects spanned errors so one pass reports every mistake it finds.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Records `error`.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Records an error with `message` at `span`.
    pub(crate) fn at(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Keeps the value of `result`, recording its error.
    pub(crate) fn ok<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }

    /// `Ok(value)` when nothing was recorded, else every recorded error.
    pub(crate) fn finish<T>(self, value: T) -> syn::Result<T> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(value),
        }
    }
}

/// The candidate closest to `word`, when it is close enough to be a typo.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    let word = word.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (distance(&word, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `"did you mean `x`? "` for the closest candidate, or an empty string.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    closest(word, candidates)
        .map(|c| format!("did you mean `{c}`? "))
        .unwrap_or_default()
}

/// `` `a`, `b`, `c` ``.
pub(crate) fn backticked<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    items
        .into_iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Levenshtein distance between two strings, by characters.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_words_only() {
        assert_eq!(
            did_you_mean("queu", ["kind", "queue"]),
            "did you mean `queue`? "
        );
        assert_eq!(did_you_mean("prio", ["kind", "queue"]), "");
        assert_eq!(
            closest("europe/pari", ["Europe/Paris", "UTC"]),
            Some("Europe/Paris")
        );
    }

    #[test]
    fn collects_every_error() {
        let mut errors = Errors::default();
        assert!(errors
            .ok::<()>(Err(syn::Error::new(Span::call_site(), "a")))
            .is_none());
        errors.at(Span::call_site(), "b");
        let all = errors.finish(()).unwrap_err();
        assert_eq!(
            all.into_iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
