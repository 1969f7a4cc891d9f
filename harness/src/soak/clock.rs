//! The soak's own clock, shared by the runner and the telemetry thread.

use std::time::Instant;

/// Soak time: seconds of harness activity, continued across resumes from the journal's last
/// record.
#[derive(Clone, Copy, Debug)]
pub struct SoakClock {
    offset_s: f64,
    start: Instant,
}

impl SoakClock {
    pub fn new(offset_s: f64) -> Self {
        SoakClock {
            offset_s,
            start: Instant::now(),
        }
    }
    pub fn now_s(&self) -> f64 {
        self.offset_s + self.start.elapsed().as_secs_f64()
    }
}
