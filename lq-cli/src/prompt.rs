//! The yes/no question a destructive command asks before it acts.

use std::io::{BufRead, IsTerminal, Write};

use crate::Failure;

/// Asks `question` on the terminal; `Ok(true)` only for an explicit yes. With
/// no terminal to ask on it refuses, naming `--yes`, so a script never acts by
/// accident.
pub(crate) fn confirm(question: &str) -> Result<bool, Failure> {
    if !std::io::stdin().is_terminal() {
        return Err(format!("{question} — no terminal to ask on: pass --yes to go ahead").into());
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
