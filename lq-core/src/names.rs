//! The naming rule for queues and kinds, checked at compile time and at enqueue.

use crate::Error;

/// Longest queue or kind name.
pub const MAX_NAME_LEN: usize = 128;

/// Checks a queue or kind name: 1–128 characters of `A-Z a-z 0-9 _ - . :`, not
/// only dots.
///
/// ```
/// assert!(lq_core::validate_name("queue", "emails.high").is_ok());
/// assert!(lq_core::validate_name("queue", "no spaces").is_err());
/// assert!(lq_core::validate_name("queue", "..").is_err());
/// ```
pub fn validate_name(what: &'static str, name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_NAME_LEN {
        "it is longer than 128 bytes"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b))
    {
        "use only letters, digits and _ - . :"
    } else if name.bytes().all(|b| b == b'.') {
        // `.` and `..` are path steps in a URL: the dashboard could not name it.
        "it is only dots; add a letter or digit"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        what,
        name: name.to_owned(),
        reason,
    })
}
