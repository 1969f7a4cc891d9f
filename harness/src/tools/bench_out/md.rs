//! `--output md`: the output header as a two-column table, the rows as a Markdown table
//! (model, size, parameters, type mix, ISA, backend, threads, test, tokens/s mean ± stddev,
//! median, min–max, GB/s; the OpenCL counters when a row has them), then the summary lines.

use super::summary;
use crate::tools::bench::rows::{BenchReport, BenchRow};
use std::fmt::Write;

/// `|` escaped, line breaks flattened: a value that cannot break the table.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// File size as llama-bench shows it: MiB below a GiB, else GiB.
pub fn size(bytes: u64) -> String {
    let mib = bytes as f64 / 1048576.0;
    if mib < 1024.0 {
        format!("{mib:.2} MiB")
    } else {
        format!("{:.2} GiB", mib / 1024.0)
    }
}

/// Parameter count in millions below a billion, else billions.
pub fn params(n: u64) -> String {
    if n < 1_000_000_000 {
        format!("{:.2} M", n as f64 / 1e6)
    } else {
        format!("{:.2} B", n as f64 / 1e9)
    }
}

fn counters(r: &BenchRow) -> String {
    match r.counters.as_ref().and_then(|c| c.decode.or(c.prefill)) {
        Some(p) => format!(
            " {:.1} | {:.0} | {:.0} | {} |",
            p.launches,
            p.h2d_bytes,
            p.d2h_bytes,
            p.kernel_ms.map_or("-".into(), |k| format!("{k:.3}"))
        ),
        None => " - | - | - | - |".into(),
    }
}

pub fn render(r: &BenchReport) -> String {
    let mut s = String::from("| | |\n|---|---|\n");
    for (k, v) in r.header.pairs() {
        let _ = writeln!(s, "| {k} | {} |", cell(&v));
    }
    let with_counters = r.rows.iter().any(|x| x.counters.is_some());
    s += "\n| model | size | params | types | isa | backend | threads | test | t/s mean ± sd | median | min–max | GB/s |";
    if with_counters {
        s += " launches/token | H2D B/token | D2H B/token | kernel ms/token |";
    }
    s += "\n|---|--:|--:|---|---|---|--:|---|--:|--:|--:|--:|";
    if with_counters {
        s += "--:|--:|--:|--:|";
    }
    s.push('\n');
    for x in &r.rows {
        let _ = write!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} ± {:.2} | {:.2} | {:.2}–{:.2} | {} |",
            cell(&x.model.model),
            size(x.model.model_size_bytes),
            params(x.model.model_params),
            cell(&x.model.type_mix),
            x.isa,
            x.backend,
            x.threads,
            x.test,
            x.tokens_per_s_mean,
            x.tokens_per_s_stddev,
            x.tokens_per_s_median,
            x.tokens_per_s_min,
            x.tokens_per_s_max,
            if x.gb_per_s_median > 0.0 {
                format!("{:.2}", x.gb_per_s_median)
            } else {
                "-".into()
            }
        );
        if with_counters {
            s += &counters(x);
        }
        s.push('\n');
    }
    let lines = summary::lines(r);
    if !lines.is_empty() {
        s.push('\n');
        for l in lines {
            s += &l;
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::bench_out::fixture;

    #[test]
    fn markdown_snapshot() {
        let want = "\
| | |
|---|---|
| schema_version | 3 |
| tool | pocketperf 0.0.0 |
| git_commit | abc1234 |
| device | host (cpu X, Linux 6) |
| model_path | /m/tiny.gguf |
| model_name | Tiny |
| model_sha256 | 00ff |
| settings | {\"threads\":[2]} |
| timestamp_utc | 2026-01-01T00:00:00.000Z |

| model | size | params | types | isa | backend | threads | test | t/s mean ± sd | median | min–max | GB/s |
|---|--:|--:|---|---|---|--:|---|--:|--:|--:|--:|
| Tiny | 85.83 MiB | 134.52 M | Q4_1 96% F32 3% | avx2 | cpu | 2 | pp64 | 1000.00 ± 100.00 | 1000.00 | 900.00–1100.00 | - |
| Tiny | 85.83 MiB | 134.52 M | Q4_1 96% F32 3% | avx2 | cpu | 2 | tg16@d256 | 225.00 ± 35.36 | 225.00 | 200.00–250.00 | 11.47 |

peak RSS 76.3 MiB; budget (largest model + KV + 64 MiB) 90.6 MiB
";
        assert_eq!(render(&fixture::report()), want);
    }

    #[test]
    fn sizes_and_parameter_counts_read_as_llama_bench_prints_them() {
        assert_eq!(size(1 << 30), "1.00 GiB");
        assert_eq!(size(3 << 19), "1.50 MiB");
        assert_eq!(params(1_500_000_000), "1.50 B");
        assert_eq!(params(999_990), "1.00 M");
    }
}
