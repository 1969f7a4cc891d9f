//! Terminal progress for long work: shown on a TTY, silent otherwise (CI logs, pipes).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// A spinner with elapsed time, for work of unknown length.
pub fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(None, target());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}]") {
        pb.set_style(style);
    }
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// A bar over `len` items.
pub fn bar(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), target());
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta})")
    {
        pb.set_style(style);
    }
    pb.set_message(msg.to_string());
    pb
}
