//! `--output sql`: the output header and summary lines as `-- ` comments, `CREATE TABLE IF
//! NOT EXISTS bench` with the [`super::COLUMNS`] (TEXT, INTEGER, REAL), and one `INSERT` per
//! row (strings quoted with `'`, quotes doubled) — loadable with `sqlite3 db < out.sql`.

use super::{COLUMNS, Cell, cells, summary};
use crate::tools::bench::rows::BenchReport;

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn sql_type(c: &Cell) -> &'static str {
    match c {
        Cell::Text(_) => "TEXT",
        Cell::Int(_) => "INTEGER",
        Cell::Real(_) => "REAL",
    }
}

fn value(c: &Cell) -> String {
    match c {
        Cell::Text(t) => quote(t),
        Cell::Int(n) => n.to_string(),
        Cell::Real(x) if x.is_finite() => format!("{x:?}"),
        Cell::Real(_) => "NULL".into(),
    }
}

pub fn render(r: &BenchReport) -> String {
    let mut s = String::new();
    for (k, v) in r.header.pairs() {
        s += &format!("-- {k}={}\n", v.replace('\n', " "));
    }
    for l in summary::lines(r) {
        s += &format!("-- {l}\n");
    }
    // Column types from the cells of any row (fixed per column).
    let types: Vec<&str> = r.rows.first().map_or_else(
        || vec!["TEXT"; COLUMNS.len()],
        |row| cells(row).iter().map(sql_type).collect(),
    );
    s += "CREATE TABLE IF NOT EXISTS bench (\n";
    let defs: Vec<String> = COLUMNS
        .iter()
        .zip(&types)
        .map(|(c, t)| format!("  {c} {t}"))
        .collect();
    s += &defs.join(",\n");
    s += "\n);\n";
    for row in &r.rows {
        let vals: Vec<String> = cells(row).iter().map(value).collect();
        s += &format!(
            "INSERT INTO bench ({}) VALUES ({});\n",
            COLUMNS.join(", "),
            vals.join(", ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::bench_out::fixture;

    #[test]
    fn sql_snapshot() {
        let text = render(&fixture::report());
        let cols = COLUMNS.join(", ");
        let want = format!(
            "\
-- schema_version=3
-- tool=pocketperf 0.0.0
-- git_commit=abc1234
-- device=host (cpu X, Linux 6)
-- model_path=/m/tiny.gguf
-- model_name=Tiny
-- model_sha256=00ff
-- settings={{\"threads\":[2]}}
-- timestamp_utc=2026-01-01T00:00:00.000Z
-- peak RSS 76.3 MiB; budget (largest model + KV + 64 MiB) 90.6 MiB
CREATE TABLE IF NOT EXISTS bench (
  model TEXT,
  model_path TEXT,
  model_size_bytes INTEGER,
  model_params INTEGER,
  type_mix TEXT,
  isa TEXT,
  backend TEXT,
  threads INTEGER,
  test TEXT,
  n_prompt INTEGER,
  n_gen INTEGER,
  n_depth INTEGER,
  batch INTEGER,
  reps INTEGER,
  tokens_per_s_mean REAL,
  tokens_per_s_stddev REAL,
  tokens_per_s_median REAL,
  tokens_per_s_min REAL,
  tokens_per_s_max REAL,
  gb_per_s_median REAL
);
INSERT INTO bench ({cols}) VALUES ('Tiny', '/m/tiny.gguf', 90000000, 134515008, 'Q4_1 96% F32 3%', 'avx2', 'cpu', 2, 'pp64', 64, 0, 0, 1, 3, 1000.0, 100.0, 1000.0, 900.0, 1100.0, 0.0);
INSERT INTO bench ({cols}) VALUES ('Tiny', '/m/tiny.gguf', 90000000, 134515008, 'Q4_1 96% F32 3%', 'avx2', 'cpu', 2, 'tg16@d256', 0, 16, 256, 1, 2, 225.0, 35.35533905932738, 225.0, 200.0, 250.0, 11.475);
"
        );
        assert_eq!(text, want);
    }

    #[test]
    fn quotes_are_doubled() {
        assert_eq!(quote("it's"), "'it''s'");
    }
}
