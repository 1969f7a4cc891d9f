//! Monotonic clocks in nanoseconds: a real one for runs and a virtual one that tests and
//! simulated SUTs advance by hand, so a ten-minute scenario runs instantly and exactly.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// A monotonic nanosecond clock the engine, the SUT and telemetry share.
pub trait Clock {
    /// Nanoseconds since the clock's origin; never decreases.
    fn now_ns(&self) -> u64;
    /// Returns once `now_ns() >= t_ns` (a virtual clock jumps there).
    fn wait_until(&self, t_ns: u64);
    /// Whether waiting is free (virtual time): the engine then never polls in slices.
    fn is_virtual(&self) -> bool {
        false
    }
}

/// Wall-clock monotonic time from `std::time::Instant`.
#[derive(Debug, Clone, Copy)]
pub struct RealClock {
    origin: Instant,
}

impl RealClock {
    /// A clock whose zero is now.
    pub fn new() -> Self {
        RealClock {
            origin: Instant::now(),
        }
    }
    /// A clock whose zero is `origin` (share one origin with a telemetry sampler).
    pub fn with_origin(origin: Instant) -> Self {
        RealClock { origin }
    }
    /// The origin instant.
    pub fn origin(&self) -> Instant {
        self.origin
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RealClock {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn wait_until(&self, t_ns: u64) {
        loop {
            let now = self.now_ns();
            if now >= t_ns {
                return;
            }
            let left = t_ns - now;
            if left > 200_000 {
                // Sleep most of the way, spin the last stretch for precision.
                std::thread::sleep(Duration::from_nanos(left - 100_000));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Virtual time: starts at 0 and moves only by [`VirtualClock::advance`],
/// [`VirtualClock::set`] or [`Clock::wait_until`].
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: Cell<u64>,
}

impl VirtualClock {
    /// A virtual clock at 0 ns.
    pub fn new() -> Self {
        Self::default()
    }
    /// Moves time forward by `d_ns`.
    pub fn advance(&self, d_ns: u64) {
        self.now.set(self.now.get().saturating_add(d_ns));
    }
    /// Moves time to `t_ns` if that is later than now (time never goes back).
    pub fn set(&self, t_ns: u64) {
        if t_ns > self.now.get() {
            self.now.set(t_ns);
        }
    }
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    fn wait_until(&self, t_ns: u64) {
        self.set(t_ns);
    }
    fn is_virtual(&self) -> bool {
        true
    }
}
