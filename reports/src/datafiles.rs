//! The CSV members of a result directory: `tokens.csv` (per-token timestamps) and
//! `telemetry.csv` (sensor samples). Both start with `#` comment lines carrying `key=value`
//! metadata. Readers are tolerant: unknown columns are kept, empty cells are missing values.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use crate::error::{ReportError, Result};

/// One generated token: which query, its index within the query, and when (ms from run start).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenEvent {
    /// Query id.
    pub query: u64,
    /// Token index within the query (0 = first token).
    pub token: u32,
    /// Milliseconds from run start.
    pub t_ms: f64,
}

/// Contents of `tokens.csv`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenLog {
    /// `key=value` metadata from the `#` lines.
    pub meta: BTreeMap<String, String>,
    /// Token events in file order.
    pub events: Vec<TokenEvent>,
}

/// Contents of `telemetry.csv`: a time column and any number of sensor columns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Telemetry {
    /// `key=value` metadata from the `#` lines.
    pub meta: BTreeMap<String, String>,
    /// Seconds from run start, one per row.
    pub t_s: Vec<f64>,
    /// Sensor columns in file order; `None` marks an empty (missing) cell.
    pub columns: Vec<(String, Vec<Option<f64>>)>,
}

impl Telemetry {
    /// The column called `name`, if present.
    pub fn column(&self, name: &str) -> Option<&[Option<f64>]> {
        self.columns
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Columns whose names match `prefix*suffix`, e.g. `("temp.", ".c")`.
    pub fn columns_matching<'a>(
        &'a self,
        prefix: &'a str,
        suffix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a [Option<f64>])> + 'a {
        self.columns
            .iter()
            .filter(move |(n, _)| {
                n.starts_with(prefix)
                    && n.ends_with(suffix)
                    && n.len() >= prefix.len() + suffix.len()
            })
            .map(|(n, v)| (n.as_str(), v.as_slice()))
    }

    /// `(t, value)` pairs of a column, skipping missing cells.
    pub fn points(&self, column: &[Option<f64>]) -> Vec<(f64, f64)> {
        self.t_s
            .iter()
            .zip(column)
            .filter_map(|(&t, v)| v.map(|v| (t, v)))
            .collect()
    }
}

/// Splits leading `#` lines (parsed as `key=value`) from the CSV body.
fn split_meta(text: &str) -> (BTreeMap<String, String>, usize, &str) {
    let mut meta = BTreeMap::new();
    let mut offset = 0;
    let mut lines = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if !trimmed.starts_with('#') {
            break;
        }
        let body = trimmed.trim_start_matches('#').trim();
        if let Some((k, v)) = body.split_once('=') {
            meta.insert(k.trim().to_string(), v.trim().to_string());
        }
        offset += line.len();
        lines += 1;
    }
    (meta, lines, &text[offset..])
}

fn parse_cell(path: &Path, line: u64, column: &str, cell: &str) -> Result<Option<f64>> {
    let cell = cell.trim();
    if cell.is_empty() {
        return Ok(None);
    }
    cell.parse::<f64>().map(Some).map_err(|_| ReportError::Csv {
        path: path.into(),
        line,
        problem: format!("column `{column}`: `{cell}` is not a number"),
    })
}

/// Metadata, header and `(line, cells)` rows of a CSV file.
type Rows = (
    BTreeMap<String, String>,
    Vec<String>,
    Vec<(u64, Vec<String>)>,
);

fn read_rows(path: &Path) -> Result<Rows> {
    let text = fs::read_to_string(path).map_err(|e| ReportError::io("reading", path, e))?;
    parse_rows(&text, path)
}

/// [`read_rows`] on text already read; `path` only names the source in errors.
fn parse_rows(text: &str, path: &Path) -> Result<Rows> {
    let (meta, meta_lines, body) = split_meta(text);
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(body.as_bytes());
    let csv_err = |e: csv::Error| {
        let line = e.position().map_or(0, |p| p.line()) + meta_lines as u64;
        ReportError::Csv {
            path: path.into(),
            line,
            problem: e.to_string(),
        }
    };
    let header: Vec<String> = rdr
        .headers()
        .map_err(csv_err)?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(csv_err)?;
        let line = rec.position().map_or(0, |p| p.line()) + meta_lines as u64;
        rows.push((line, rec.iter().map(str::to_string).collect()));
    }
    Ok((meta, header, rows))
}

/// Reads a `tokens.csv` (header `query,token,t_ms`; columns may come in any order).
pub fn read_tokens(path: impl AsRef<Path>) -> Result<TokenLog> {
    let path = path.as_ref();
    let (meta, header, rows) = read_rows(path)?;
    let find = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| ReportError::Csv {
                path: path.into(),
                line: 1,
                problem: format!("missing column `{name}` (expected header query,token,t_ms)"),
            })
    };
    let (qi, ti, mi) = (find("query")?, find("token")?, find("t_ms")?);
    let mut events = Vec::with_capacity(rows.len());
    for (line, row) in rows {
        let int = |i: usize, name: &str| -> Result<u64> {
            row[i].trim().parse::<u64>().map_err(|_| ReportError::Csv {
                path: path.into(),
                line,
                problem: format!(
                    "column `{name}`: `{}` is not a non-negative integer",
                    row[i]
                ),
            })
        };
        let t_ms = parse_cell(path, line, "t_ms", &row[mi])?.ok_or_else(|| ReportError::Csv {
            path: path.into(),
            line,
            problem: "column `t_ms` is empty".into(),
        })?;
        let token = u32::try_from(int(ti, "token")?).map_err(|_| ReportError::Csv {
            path: path.into(),
            line,
            problem: "column `token` exceeds u32".into(),
        })?;
        events.push(TokenEvent {
            query: int(qi, "query")?,
            token,
            t_ms,
        });
    }
    Ok(TokenLog { meta, events })
}

/// Reads a `telemetry.csv` (first column `t_s`, then sensor columns; empty cell = missing).
pub fn read_telemetry(path: impl AsRef<Path>) -> Result<Telemetry> {
    let path = path.as_ref();
    let text = fs::read_to_string(path).map_err(|e| ReportError::io("reading", path, e))?;
    parse_telemetry(&text, path)
}

/// [`read_telemetry`] on text already read; `path` only names the source in errors.
pub fn parse_telemetry(text: &str, path: &Path) -> Result<Telemetry> {
    let (meta, header, rows) = parse_rows(text, path)?;
    if header.first().map(String::as_str) != Some("t_s") {
        return Err(ReportError::Csv {
            path: path.into(),
            line: 1,
            problem: format!(
                "first column must be `t_s`, found `{}`",
                header.first().cloned().unwrap_or_default()
            ),
        });
    }
    let mut t_s = Vec::with_capacity(rows.len());
    let mut columns: Vec<(String, Vec<Option<f64>>)> = header[1..]
        .iter()
        .map(|h| (h.clone(), Vec::with_capacity(rows.len())))
        .collect();
    for (line, row) in rows {
        let t = parse_cell(path, line, "t_s", &row[0])?.ok_or_else(|| ReportError::Csv {
            path: path.into(),
            line,
            problem: "column `t_s` is empty".into(),
        })?;
        t_s.push(t);
        for ((name, col), cell) in columns.iter_mut().zip(&row[1..]) {
            col.push(parse_cell(path, line, name, cell)?);
        }
    }
    Ok(Telemetry { meta, t_s, columns })
}

fn meta_lines(meta: &BTreeMap<String, String>) -> String {
    let mut s = String::new();
    for (k, v) in meta {
        // Newlines would end the comment line early; keep each entry on one line.
        let _ = writeln!(s, "# {}={}", k.replace('\n', " "), v.replace('\n', " "));
    }
    s
}

/// The `# key=value` lines, then the rows `csv::Writer` formats.
fn csv_text(
    meta: &BTreeMap<String, String>,
    rows: impl FnOnce(&mut csv::Writer<Vec<u8>>) -> csv::Result<()>,
    path: &Path,
) -> Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(meta_lines(meta).into_bytes());
    let bad = |e: &dyn std::fmt::Display| ReportError::Csv {
        path: path.to_path_buf(),
        line: 0,
        problem: e.to_string(),
    };
    rows(&mut w).map_err(|e| bad(&e))?;
    w.into_inner().map_err(|e| bad(e.error()))
}

/// Writes a `tokens.csv`.
pub fn write_tokens(path: impl AsRef<Path>, log: &TokenLog) -> Result<()> {
    let path = path.as_ref();
    let text = csv_text(
        &log.meta,
        |w| {
            w.write_record(["query", "token", "t_ms"])?;
            for e in &log.events {
                w.write_record([e.query.to_string(), e.token.to_string(), e.t_ms.to_string()])?;
            }
            Ok(())
        },
        path,
    )?;
    crate::files::replace_file(path, &text).map_err(|(p, e)| ReportError::io("writing", &p, e))
}

/// Writes a `telemetry.csv` (column names with commas or quotes are quoted, as CSV says).
pub fn write_telemetry(path: impl AsRef<Path>, t: &Telemetry) -> Result<()> {
    let path = path.as_ref();
    let text = csv_text(
        &t.meta,
        |w| {
            let header = std::iter::once("t_s").chain(t.columns.iter().map(|(n, _)| n.as_str()));
            w.write_record(header)?;
            for (i, time) in t.t_s.iter().enumerate() {
                let cells = t.columns.iter().map(|(_, col)| match col.get(i) {
                    Some(Some(v)) => v.to_string(),
                    _ => String::new(),
                });
                w.write_record(std::iter::once(time.to_string()).chain(cells))?;
            }
            Ok(())
        },
        path,
    )?;
    crate::files::replace_file(path, &text).map_err(|(p, e)| ReportError::io("writing", &p, e))
}
