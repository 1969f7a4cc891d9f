//! `--output json`: the whole report (header, rows, roofline, memory, start-up, cold start)
//! as one pretty-printed JSON document.

use crate::tools::bench::rows::BenchReport;
use anyhow::Result;

pub fn render(r: &BenchReport) -> Result<String> {
    Ok(serde_json::to_string_pretty(r)? + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::bench_out::fixture;

    #[test]
    fn json_parses_back_to_the_rows_and_header() {
        let text = render(&fixture::report()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["header"]["schema_version"], 3);
        assert_eq!(v["header"]["model_name"], "Tiny");
        assert_eq!(v["header"]["git_commit"], "abc1234");
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["test"], "pp64");
        assert_eq!(rows[0]["model"], "Tiny");
        assert_eq!(rows[0]["model_params"], 134_515_008u64);
        assert_eq!(rows[0]["tokens_per_s_mean"], 1000.0);
        assert_eq!(rows[0]["tokens_per_s_stddev"], 100.0);
        assert_eq!(
            rows[0]["samples"],
            serde_json::json!([900.0, 1000.0, 1100.0])
        );
        assert_eq!(rows[1]["test"], "tg16@d256");
        assert_eq!(rows[1]["n_gen"], 16);
        assert_eq!(rows[1]["n_depth"], 256);
        assert_eq!(rows[1]["samples"], serde_json::json!([200.0, 250.0]));
        assert_eq!(v["memory"]["kv_bytes"], 1_048_576);
        assert!(v["roofline"].is_null());
        assert!(text.ends_with("}\n"));
    }
}
