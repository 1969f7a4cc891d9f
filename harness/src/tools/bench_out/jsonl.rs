//! `--output jsonl`: JSON lines. The first line is the header with the run's sections
//! (`{"header": …, "roofline": …, "memory": …, "startup": …, "cold_start": …}`), then one
//! line per row with the same fields as the JSON output's rows.

use crate::tools::bench::rows::BenchReport;
use anyhow::Result;

pub fn render(r: &BenchReport) -> Result<String> {
    let first = serde_json::json!({
        "header": r.header, "roofline": r.roofline, "memory": r.memory, "startup": r.startup,
        "cold_start": r.cold_start,
    });
    let mut s = serde_json::to_string(&first)? + "\n";
    for row in &r.rows {
        s += &serde_json::to_string(row)?;
        s.push('\n');
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::bench_out::fixture;

    #[test]
    fn jsonl_is_a_header_line_then_one_parsed_row_per_line() {
        let text = render(&fixture::report()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["header"]["schema_version"], 3);
        assert_eq!(lines[0]["header"]["model_sha256"], "00ff");
        assert_eq!(lines[0]["memory"]["budget_bytes"], 95_000_000);
        assert_eq!(lines[1]["test"], "pp64");
        assert_eq!(lines[1]["n_prompt"], 64);
        assert_eq!(lines[2]["test"], "tg16@d256");
        assert_eq!(lines[2]["tokens_per_s_median"], 225.0);
        // Every row line has the same keys.
        let keys =
            |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&lines[1]), keys(&lines[2]));
        assert!(keys(&lines[1]).contains(&"type_mix".to_string()));
    }
}
