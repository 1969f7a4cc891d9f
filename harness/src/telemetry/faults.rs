//! Page-fault counters of a process: minor faults (served from memory: a page-cache hit or a
//! fresh anonymous page) and major faults (the page had to be read from storage). This
//! process's come from `getrusage(RUSAGE_SELF)` (`ru_minflt`, `ru_majflt`, POSIX), another
//! process's from `/proc/<pid>/stat` fields 10 (`minflt`) and 12 (`majflt`) as proc(5)
//! numbers them. Both are cumulative since the process started, so readings never decrease.

use serde::{Deserialize, Serialize};

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
}
