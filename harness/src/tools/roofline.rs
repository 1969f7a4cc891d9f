//! The memory roof of `pocketperf bench`: a STREAM-like read-bandwidth probe (each thread
//! sums its share of a buffer far larger than the last-level cache), the same probe over a
//! buffer the size of the model (is the model served from the LLC?), the LLC size from sysfs,
//! and the process's peak resident set.

use serde::Serialize;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

/// One probe measurement.
#[derive(Clone, Debug, Serialize)]
pub struct ReadProbe {
    pub threads: usize,
    pub buffer_bytes: usize,
    pub reps: usize,
    /// Best repetition (the roof), GB/s (10^9 bytes).
    pub gb_per_s_best: f64,
    pub gb_per_s_median: f64,
}

/// Sums `chunk` with eight independent accumulators (enough loads in flight to saturate the
/// memory system from one core).
fn sum_chunk(chunk: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut it = chunk.chunks_exact(8);
    for c in &mut it {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(v);
        }
    }
    for &v in it.remainder() {
        acc[0] = acc[0].wrapping_add(v);
    }
    acc.iter().fold(0, |s, &a| s.wrapping_add(a))
}

/// Seconds from the first worker's start to the last worker's end: the window that holds all
/// of the work, whatever the order the workers (and the thread that waits for them) ran in.
fn span_secs(spans: &[(Instant, Instant)]) -> f64 {
    let (Some(first), Some(last)) = (
        spans.iter().map(|s| s.0).min(),
        spans.iter().map(|s| s.1).max(),
    ) else {
        return 0.0;
    };
    last.saturating_duration_since(first).as_secs_f64()
}

/// Reads all of `buf` with `threads` threads `reps` times (after one untimed pass) and returns
/// the best and median bandwidth.
///
/// Each worker stamps its own start and end: a clock read by the waiting thread after the
/// start barrier could run after a fast worker had already finished (it is one thread more
/// than the cores being measured, and may be descheduled there), which once reported
/// 7,643 GB/s.
pub fn read_bandwidth(buf: &[u64], threads: usize, reps: usize) -> ReadProbe {
    let threads = threads.max(1);
    let chunks: Vec<&[u64]> = buf.chunks(buf.len().div_ceil(threads).max(1)).collect();
    let mut samples = Vec::with_capacity(reps);
    for rep in 0..=reps {
        let start = Barrier::new(chunks.len());
        let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
            let workers: Vec<_> = chunks
                .iter()
                .map(|&chunk| {
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        let t0 = Instant::now();
                        black_box(sum_chunk(black_box(chunk)));
                        (t0, Instant::now())
                    })
                })
                .collect();
            workers.into_iter().filter_map(|w| w.join().ok()).collect()
        });
        let secs = span_secs(&spans);
        if rep > 0 && secs > 0.0 {
            samples.push(std::mem::size_of_val(buf) as f64 / secs / 1e9);
        }
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    ReadProbe {
        threads,
        buffer_bytes: std::mem::size_of_val(buf),
        reps,
        gb_per_s_best: samples.last().copied().unwrap_or(0.0),
        gb_per_s_median: samples.get(samples.len() / 2).copied().unwrap_or(0.0),
    }
}

/// A buffer of `bytes` (rounded to 8) with every page written, so that reads hit memory.
pub fn probe_buffer(bytes: usize) -> Vec<u64> {
    (0..bytes.div_ceil(8) as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect()
}

/// Size of the last-level (highest-level) CPU cache in bytes, from sysfs; `None` if unknown.
pub fn llc_bytes() -> Option<u64> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut best: Option<(u32, u64)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let level = std::fs::read_to_string(p.join("level"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        let size = std::fs::read_to_string(p.join("size"))
            .ok()
            .and_then(|s| parse_cache_size(s.trim()));
        if let (Some(l), Some(sz)) = (level, size)
            && best.is_none_or(|(bl, _)| l > bl)
        {
            best = Some((l, sz));
        }
    }
    best.map(|(_, s)| s)
}

/// Parses sysfs cache sizes such as `107520K` or `2048K` or `32M`.
pub fn parse_cache_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1024),
        b'M' => (&s[..s.len() - 1], 1024 * 1024),
        b'G' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// Peak resident set size of this process in bytes (`VmHWM`), if the kernel reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse() {
        assert_eq!(parse_cache_size("107520K"), Some(107520 * 1024));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("x"), None);
    }

    #[test]
    fn the_timed_window_spans_every_worker() {
        let t = Instant::now();
        let at = |ms: u64| t + std::time::Duration::from_millis(ms);
        // The second worker started late and ended last; the first ended early.
        let spans = [(at(0), at(100)), (at(30), at(250)), (at(10), at(120))];
        assert!((span_secs(&spans) - 0.250).abs() < 1e-9);
        assert_eq!(span_secs(&[]), 0.0);
    }

    #[test]
    fn probe_reads_every_element() {
        let buf: Vec<u64> = (1..=1000).collect();
        assert_eq!(sum_chunk(&buf), 500_500);
        let p = read_bandwidth(&buf, 3, 2);
        assert_eq!(p.buffer_bytes, 8000);
        assert!(p.gb_per_s_best >= p.gb_per_s_median && p.gb_per_s_median > 0.0);
    }
}
