//! Page-fault counters of a process: minor faults (served from memory: a page-cache hit or a
//! fresh anonymous page) and major faults (the page had to be read from storage). This
//! process's come from `getrusage(RUSAGE_SELF)` (`ru_minflt`, `ru_majflt`, POSIX), another
//! process's from `/proc/<pid>/stat` fields 10 (`minflt`) and 12 (`majflt`) as proc(5)
//! numbers them. Both are cumulative since the process started, so readings never decrease.
//!
//! [`fault_gauges`] turns them into the `faults.*` columns of `telemetry.csv`: the process is
//! the system under test's ([`SutPid`], which the run keeps current), and the counts are
//! cumulative over the run's SUT processes (see `docs/TELEMETRY.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

use super::sampler::Gauge;

/// Cumulative page faults of one process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounts {
    pub minor: u64,
    pub major: u64,
}

impl FaultCounts {
    /// Faults from `earlier` to `self` (zero where a counter went backwards, which a
    /// cumulative counter of one process never does).
    pub fn since(&self, earlier: &FaultCounts) -> FaultCounts {
        FaultCounts {
            minor: self.minor.saturating_sub(earlier.minor),
            major: self.major.saturating_sub(earlier.major),
        }
    }
}

/// This process's faults (`getrusage(RUSAGE_SELF)`: every thread).
pub fn self_faults() -> Option<FaultCounts> {
    // SAFETY: rusage is plain data; an all-zero value is a valid instance.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage struct, which `ru` is.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    (rc == 0).then(|| FaultCounts {
        minor: ru.ru_minflt.max(0) as u64,
        major: ru.ru_majflt.max(0) as u64,
    })
}

/// Faults of process `pid` from `/proc/<pid>/stat`; `None` when it is gone or unreadable.
pub fn process_faults(pid: u32) -> Option<FaultCounts> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Fields 10 and 12 of a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself, so fields are counted after the
/// last `)`: field 3 (state) is the first there.
pub fn parse_stat(text: &str) -> Option<FaultCounts> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(FaultCounts {
        minor: field(10)?,
        major: field(12)?,
    })
}

/// The pid of the process doing the system under test's work, shared with the sampler
/// thread; 0 while there is none to count (an HTTP server of its own, a child being
/// restarted).
#[derive(Clone, Debug, Default)]
pub struct SutPid(Arc<AtomicU32>);

impl SutPid {
    pub fn new(pid: u32) -> Self {
        SutPid(Arc::new(AtomicU32::new(pid)))
    }

    pub fn set(&self, pid: u32) {
        self.0.store(pid, Ordering::Relaxed);
    }

    pub fn get(&self) -> Option<u32> {
        Some(self.0.load(Ordering::Relaxed)).filter(|&p| p != 0)
    }
}

/// Faults of `pid`: `getrusage` for this process, `/proc/<pid>/stat` for another.
pub fn faults_of(pid: u32) -> Option<FaultCounts> {
    if pid == std::process::id() {
        self_faults()
    } else {
        process_faults(pid)
    }
}

/// One cumulative column over the SUT processes of a run: the current process's own count
/// plus the last count read from each process before it (a restarted child's counters start
/// at zero, so the sum never decreases; faults a replaced process raised after its last
/// sample are not seen).
struct Cumulative {
    pick: fn(&FaultCounts) -> u64,
    pid: u32,
    last: u64,
    earlier: u64,
}

impl Cumulative {
    fn read(&mut self, pid: Option<u32>) -> Option<f64> {
        let pid = pid?;
        let now = (self.pick)(&faults_of(pid)?);
        if pid != self.pid {
            self.earlier += self.last;
            self.pid = pid;
            self.last = 0;
        }
        self.last = self.last.max(now);
        Some((self.earlier + self.last) as f64)
    }
}

/// The sampler gauges `faults.pid` (the process counted at each sample), `faults.minor` and
/// `faults.major` (cumulative, [`Cumulative`]); empty cells while there is no process.
pub fn fault_gauges(pid: &SutPid) -> Vec<(String, Gauge)> {
    let column = |pick: fn(&FaultCounts) -> u64| -> Gauge {
        let pid = pid.clone();
        let mut c = Cumulative {
            pick,
            pid: 0,
            last: 0,
            earlier: 0,
        };
        Box::new(move || c.read(pid.get()))
    };
    let p = pid.clone();
    vec![
        (
            "faults.pid".to_string(),
            Box::new(move || p.get().map(f64::from)) as Gauge,
        ),
        ("faults.minor".to_string(), column(|f| f.minor)),
        ("faults.major".to_string(), column(|f| f.major)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis; minflt 4321, majflt 17.
        let line = "1234 (po ck)et) S 1 1234 1234 0 -1 4194560 4321 0 17 0 5 3 0 0 20 0 3 0 100 \
                    1000000 250 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(FaultCounts {
                minor: 4321,
                major: 17
            })
        );
        assert_eq!(parse_stat("1 (x) S 1"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn this_process_read_both_ways_agrees_and_never_decreases() {
        let a = self_faults().unwrap();
        let b = process_faults(std::process::id()).unwrap();
        // Touching fresh pages raises the minor count.
        let v = vec![1u8; 8 << 20];
        std::hint::black_box(&v);
        let c = self_faults().unwrap();
        let d = process_faults(std::process::id()).unwrap();
        assert!(b.minor >= a.minor && c.minor >= b.minor && d.minor >= c.minor);
        // At least one fault (fewer than one per 4 KiB page where huge pages back the vector).
        assert!(c.minor > a.minor, "{a:?} -> {c:?}");
        assert!(d.major >= a.major);
    }

    #[test]
    fn the_gauges_count_the_sut_process_and_stay_cumulative_when_it_changes() {
        // A sleeping child raises no faults while this process touches fresh pages.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let sut = SutPid::new(child.id());
        let mut g = fault_gauges(&sut);
        let read = |g: &mut Vec<(String, Gauge)>| -> Vec<f64> {
            g.iter_mut().map(|(_, f)| f().unwrap()).collect()
        };
        let names: Vec<&str> = g.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["faults.pid", "faults.minor", "faults.major"]);
        let a = read(&mut g);
        assert_eq!(a[0], f64::from(child.id()));
        let own0 = self_faults().unwrap();
        let v = vec![1u8; 32 << 20];
        std::hint::black_box(&v);
        let own1 = self_faults().unwrap();
        assert!(own1.minor > own0.minor);
        let b = read(&mut g);
        // The child's figures, not ours: ours rose, the child's did not follow.
        let child_now = process_faults(child.id()).unwrap();
        assert_eq!(b[1], child_now.minor as f64);
        assert!(b[1] - a[1] < (own1.minor - own0.minor) as f64);
        // The SUT becomes this process: the column goes on from the child's last count.
        sut.set(std::process::id());
        let c = read(&mut g);
        assert_eq!(c[0], f64::from(std::process::id()));
        assert!(c[1] >= b[1] + own1.minor as f64, "{b:?} -> {c:?}");
        assert!(c[2] >= b[2]);
        // No process: empty cells.
        sut.set(0);
        assert!(g.iter_mut().all(|(_, f)| f().is_none()));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
