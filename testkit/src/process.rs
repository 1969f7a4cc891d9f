//! Describing a finished child process in a test failure: its exit status, standard output
//! and standard error, in one string for an assertion message.

use std::process::Output;

/// The status, stdout and stderr of `o`, for an assertion message.
pub fn output_text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
