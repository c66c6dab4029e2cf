//! Secrets: random tokens, their comparison in constant time, and cookies.

use axum::http::HeaderMap;

/// A fresh random token: 244 bits from the operating system's generator
/// (two v4 UUIDs), as 64 hex digits.
pub(crate) fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// True for a token [`new_token`] could have made (what a cookie must hold to
/// be used rather than replaced).
pub(crate) fn is_token(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `a == b`, taking the same time wherever they differ (only their lengths,
/// which are not secret, may end it early).
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
}

/// A `Set-Cookie` value: `HttpOnly; SameSite=Strict` on the dashboard's path.
pub(crate) fn set_cookie(name: &str, value: &str, path: &str, max_age: Option<u64>) -> String {
    let path = if path.is_empty() { "/" } else { path };
    let age = max_age.map_or(String::new(), |s| format!("; Max-Age={s}"));
    format!("{name}={value}; Path={path}; HttpOnly; SameSite=Strict{age}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex() {
        let (a, b) = (new_token(), new_token());
        assert!(is_token(&a) && is_token(&b));
        assert_ne!(a, b);
        assert!(!is_token("xyz"));
    }

    #[test]
    fn comparison_is_exact() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret!"));
        assert!(same(b"", b""));
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.append("cookie", "a=1; lq_csrf=abc".parse().unwrap());
        h.append("cookie", "b=2".parse().unwrap());
        assert_eq!(cookie(&h, "lq_csrf"), Some("abc"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "c"), None);
        assert_eq!(
            set_cookie("x", "v", "", None),
            "x=v; Path=/; HttpOnly; SameSite=Strict"
        );
    }
}
