//! The soak journal: `journal.jsonl` in the soak directory, one JSON record per line, appended
//! and fsynced record by record, so a harness killed at any instant loses at most the record
//! it was writing (a torn last line, dropped on resume) and the query in flight.
//!
//! Every line is `{"seq": N, "t_s": T, "type": ..., ...}`: `seq` counts records from 0 (the
//! header) without gaps; `t_s` is soak time, seconds of harness activity since the start
//! (time while the harness was not running is not counted). The first record is the header:
//! schema, provenance and the full configuration. Record types are listed in `docs/SOAK.md`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::config::SoakConfig;
use crate::serve::client::{ExitInfo, HelloInfo, LoadedInfo};

/// File name of the journal inside the soak directory.
pub const JOURNAL_FILE: &str = "journal.jsonl";
/// Schema name in the header.
pub const JOURNAL_SCHEMA: &str = "pocketperf-soak-journal";
/// Schema version in the header.
pub const JOURNAL_SCHEMA_VERSION: u32 = 1;

/// Errors reading or writing the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: line {line}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
}

/// A unit of scheduled work.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ItemKey {
    /// Turn `turn` of dialogue `dialogue` (index in the cycle) in cycle `cycle`.
    Turn {
        cycle: u64,
        dialogue: usize,
        turn: usize,
    },
    /// Item `index` of probe round `round`.
    Probe { round: u32, index: usize },
    /// A `stats` request.
    Stats,
}

impl std::fmt::Display for ItemKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ItemKey::Turn {
                cycle,
                dialogue,
                turn,
            } => write!(f, "cycle {cycle} dialogue {dialogue} turn {turn}"),
            ItemKey::Probe { round, index } => write!(f, "probe round {round} item {index}"),
            ItemKey::Stats => f.write_str("stats"),
        }
    }
}

/// A completed dialogue turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueryRecord {
    pub cycle: u64,
    /// Index of the dialogue in the cycle.
    pub dialogue: usize,
    pub dialogue_id: String,
    pub turn: usize,
    pub incarnation: u32,
    pub prompt_tokens: usize,
    pub reused_tokens: usize,
    pub generated: usize,
    /// The reply (it goes back into the conversation for the next turn, and on resume).
    pub text: String,
    /// Server side: request read → first token.
    pub ttft_ms: Option<f64>,
    /// Server side: (latency − TTFT) / (generated − 1).
    pub tpot_ms: Option<f64>,
    /// Server side: request read → last token.
    pub latency_ms: f64,
    /// Soak clock: when the request was sent, the first and the last token.
    pub t_start_s: f64,
    pub t_first_s: Option<f64>,
    pub t_end_s: f64,
}

/// What a probe is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    /// Greedy generation of a fixed prompt.
    Greedy,
    /// An MMLU question scored by the log-probabilities of " A" … " D".
    Mmlu,
}

/// A completed probe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    pub round: u32,
    pub index: usize,
    /// Stable name: `greedy/0`, `mmlu/<subject>/<row>`.
    pub probe_id: String,
    pub kind: ProbeKind,
    pub incarnation: u32,
    /// Greedy: generated token ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Vec<u32>>,
    /// Greedy: generated text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// MMLU: log-probabilities of " A" … " D".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<f64>>,
    /// MMLU: the same as IEEE-754 bit patterns (hex), compared bit for bit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprob_bits: Option<Vec<String>>,
    /// MMLU: correct answer and the model's choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice: Option<String>,
    pub latency_ms: f64,
}

impl ProbeRecord {
    /// The output compared across rounds: token ids, or the log-probability bits.
    pub fn fingerprint(&self) -> String {
        match self.kind {
            ProbeKind::Greedy => self
                .tokens
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            ProbeKind::Mmlu => self.logprob_bits.as_deref().unwrap_or_default().join(","),
        }
    }
}

/// A memory sample of the server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RssRecord {
    pub incarnation: u32,
    pub pid: u32,
    /// Requests the server process had completed.
    pub served: u64,
    pub rss_kib: u64,
    pub rss_anon_kib: u64,
    pub rss_file_kib: u64,
    pub vm_hwm_kib: u64,
    /// The server's major page faults so far (absent in journals of older versions).
    #[serde(default)]
    pub major_faults: Option<u64>,
}

/// A telemetry sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThermalRecord {
    pub soc_c: Option<f64>,
    pub skin_c: Option<f64>,
    /// Hottest zone and its temperature.
    pub max_c: Option<f64>,
    pub max_zone: Option<String>,
    pub power_mw: Option<f64>,
}

/// A server that crashed or stalled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    pub incarnation: u32,
    pub pid: u32,
    /// The work item in flight and a description of the request.
    pub item: ItemKey,
    pub last_query: String,
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitInfo>,
    pub stderr_tail: Vec<String>,
    /// Timeouts: the silence waited, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_s: Option<f64>,
}

/// Why the soak ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The duration was reached.
    Completed,
    /// SIGINT or SIGTERM.
    Interrupted,
    /// The SUT could not be kept running.
    Aborted,
}

/// One journal record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Header {
        schema: String,
        schema_version: u32,
        /// `meta::OutputHeader` of the run's start.
        provenance: serde_json::Value,
        config: Box<SoakConfig>,
    },
    /// A harness process started on this journal (0 = the first; more after each resume).
    Segment {
        segment: u32,
        resumed: bool,
        utc: String,
        harness_pid: u32,
        /// Bytes of a torn last line dropped before appending.
        dropped_tail_bytes: u64,
        /// Planned soak time from this segment on (a resume may extend it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_s: Option<f64>,
    },
    /// What the device offered the telemetry sampler when a segment started: with a
    /// temperature sensor the soak plans the thermal check, without one it cannot.
    Sensors {
        thermal_zones: usize,
        energy_meter: bool,
    },
    /// A server process started and loaded the model.
    SutStart {
        incarnation: u32,
        pid: u32,
        hello: HelloInfo,
        loaded: LoadedInfo,
        startup_s: f64,
    },
    /// A server could not be started.
    SutStartFailed {
        error: String,
        stderr_tail: Vec<String>,
    },
    Query(QueryRecord),
    /// A probe round began.
    ProbeRound {
        round: u32,
        items: usize,
    },
    Probe(ProbeRecord),
    Rss(RssRecord),
    Thermal(ThermalRecord),
    Crash(FailureRecord),
    Timeout(FailureRecord),
    /// The server refused a request (it stays up; the item is not retried).
    Refused {
        item: ItemKey,
        code: String,
        message: String,
    },
    /// An item given up after failing twice.
    Skipped {
        item: ItemKey,
        reason: String,
    },
    Checkpoint {
        queries: u64,
        probes: u64,
        crashes: u64,
        timeouts: u64,
    },
    End {
        reason: EndReason,
        detail: String,
    },
}

/// A record with its sequence number and soak time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub seq: u64,
    pub t_s: f64,
    #[serde(flatten)]
    pub record: Record,
}

/// The append side.
pub struct Journal {
    path: PathBuf,
    file: File,
    next_seq: u64,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Makes a new directory entry durable.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

impl Journal {
    /// Creates `dir/journal.jsonl`; an existing journal is an error (use `--resume`).
    pub fn create(dir: &Path) -> Result<Self, JournalError> {
        let path = dir.join(JOURNAL_FILE);
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::AlreadyExists {
                    JournalError::Invalid {
                        path: path.clone(),
                        reason: "a soak journal already exists here: continue it with \
                                 `pocketperf soak --resume DIR` or choose another --out"
                            .into(),
                    }
                } else {
                    JournalError::Io {
                        path: path.clone(),
                        source,
                    }
                }
            })?;
        sync_dir(dir);
        Ok(Journal {
            path,
            file,
            next_seq: 0,
        })
    }

    /// Opens an existing journal for appending after `read` (dropping its torn tail, if any).
    pub fn reopen(dir: &Path, read: &JournalContents) -> Result<Self, JournalError> {
        let path = dir.join(JOURNAL_FILE);
        if read.torn_tail_bytes > 0 {
            let f = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(io_err(&path))?;
            f.set_len(read.valid_bytes).map_err(io_err(&path))?;
            f.sync_all().map_err(io_err(&path))?;
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        Ok(Journal {
            path,
            file,
            next_seq: read.entries.last().map_or(0, |e| e.seq + 1),
        })
    }

    /// Appends one record and fsyncs it. Returns its sequence number.
    pub fn append(&mut self, t_s: f64, record: Record) -> Result<u64, JournalError> {
        let seq = self.next_seq;
        let entry = Entry { seq, t_s, record };
        let mut line = serde_json::to_string(&entry).map_err(|e| JournalError::Invalid {
            path: self.path.clone(),
            reason: format!("cannot encode record {seq}: {e}"),
        })?;
        line.push('\n');
        // One write per record: a kill leaves whole lines and at most one torn tail.
        self.file
            .write_all(line.as_bytes())
            .map_err(io_err(&self.path))?;
        self.file.sync_data().map_err(io_err(&self.path))?;
        self.next_seq += 1;
        Ok(seq)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A journal read back.
#[derive(Clone, Debug)]
pub struct JournalContents {
    pub entries: Vec<Entry>,
    /// Bytes of whole lines.
    pub valid_bytes: u64,
    /// Bytes after the last newline (a record torn by a kill).
    pub torn_tail_bytes: u64,
}

impl JournalContents {
    /// The configuration in the header, with the planned duration of the latest segment
    /// that changed it.
    pub fn config(&self) -> Option<SoakConfig> {
        let mut cfg = match self.entries.first().map(|e| &e.record) {
            Some(Record::Header { config, .. }) => (**config).clone(),
            _ => return None,
        };
        for e in &self.entries {
            if let Record::Segment {
                duration_s: Some(d),
                ..
            } = &e.record
            {
                cfg.duration_s = *d;
            }
        }
        Some(cfg)
    }

    /// The last record.
    pub fn last(&self) -> Option<&Record> {
        self.entries.last().map(|e| &e.record)
    }

    /// The provenance in the header.
    pub fn provenance(&self) -> Option<&serde_json::Value> {
        match self.entries.first().map(|e| &e.record) {
            Some(Record::Header { provenance, .. }) => Some(provenance),
            _ => None,
        }
    }

    /// Soak time of the last record.
    pub fn last_t_s(&self) -> f64 {
        self.entries.last().map_or(0.0, |e| e.t_s)
    }
}

/// Reads a journal. Whole lines must parse, follow each other in `seq` and start with the
/// header; bytes after the last newline are reported as a torn tail, not an error.
pub fn read_journal(path: &Path) -> Result<JournalContents, JournalError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    let valid = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut entries = Vec::new();
    for (i, line) in bytes[..valid].split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let corrupt = |reason: String| JournalError::Corrupt {
            path: path.to_path_buf(),
            line: i + 1,
            reason,
        };
        let text = std::str::from_utf8(line).map_err(|e| corrupt(format!("not UTF-8: {e}")))?;
        let e: Entry = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
        let expect = entries.len() as u64;
        if e.seq != expect {
            return Err(corrupt(format!(
                "seq {} where {expect} was expected",
                e.seq
            )));
        }
        if (e.seq == 0) != matches!(e.record, Record::Header { .. }) {
            return Err(corrupt(
                "the header must be the first record, and only it".into(),
            ));
        }
        entries.push(e);
    }
    if entries.is_empty() {
        return Err(JournalError::Invalid {
            path: path.to_path_buf(),
            reason: "the journal holds no complete record (not even its header)".into(),
        });
    }
    if let Some(Record::Header {
        schema,
        schema_version,
        ..
    }) = entries.first().map(|e| &e.record)
        && (schema != JOURNAL_SCHEMA || *schema_version != JOURNAL_SCHEMA_VERSION)
    {
        return Err(JournalError::Invalid {
            path: path.to_path_buf(),
            reason: format!(
                "schema {schema} v{schema_version}; this build reads {JOURNAL_SCHEMA} v{JOURNAL_SCHEMA_VERSION}"
            ),
        });
    }
    Ok(JournalContents {
        entries,
        valid_bytes: valid as u64,
        torn_tail_bytes: (bytes.len() - valid) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Record {
        let cfg: SoakConfig = serde_json::from_value(serde_json::json!({
            "duration_s": 10.0, "checkpoint_every_s": 5.0, "probe_every_s": 5.0,
            "rss_every_s": 1.0, "telemetry_every_s": 1.0, "query_timeout_s": 5.0,
            "model": "m.gguf", "threads": 1, "isa": null, "ctx": 64, "dialogues": 1,
            "max_turn_tokens": null, "probe_prompts": 1, "probe_tokens": 1, "probe_mmlu": 0,
            "mmlu_dir": null, "device": "local", "sysfs_root": "/", "serve_cmd": null,
            "fault": null,
            "thresholds": serde_json::to_value(super::super::config::Thresholds::default()).unwrap(),
            "windows": {"latency_s": null, "warmup_s": null, "stability_s": null}
        }))
        .unwrap();
        Record::Header {
            schema: JOURNAL_SCHEMA.into(),
            schema_version: JOURNAL_SCHEMA_VERSION,
            provenance: serde_json::json!({}),
            config: Box::new(cfg),
        }
    }

    #[test]
    fn appended_records_read_back_and_a_torn_tail_is_dropped_on_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::create(dir.path()).unwrap();
        j.append(0.0, header()).unwrap();
        j.append(1.5, Record::ProbeRound { round: 0, items: 1 })
            .unwrap();
        assert!(
            Journal::create(dir.path()).is_err(),
            "a second soak in the same directory"
        );
        drop(j);
        let path = dir.path().join(JOURNAL_FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"seq":2,"t_s":2.0,"type":"pro"#).unwrap();
        drop(f);
        let r = read_journal(&path).unwrap();
        assert_eq!(r.entries.len(), 2);
        assert_eq!(r.torn_tail_bytes, 30);
        assert_eq!(r.last_t_s(), 1.5);
        assert_eq!(r.config().unwrap().duration_s, 10.0);
        let mut j = Journal::reopen(dir.path(), &r).unwrap();
        assert_eq!(
            j.append(
                3.0,
                Record::Checkpoint {
                    queries: 1,
                    probes: 2,
                    crashes: 0,
                    timeouts: 0
                }
            )
            .unwrap(),
            2
        );
        let r = read_journal(&path).unwrap();
        assert_eq!((r.entries.len(), r.torn_tail_bytes), (3, 0));
        assert_eq!(r.entries[2].seq, 2);
    }

    #[test]
    fn a_gap_or_a_bad_line_is_corruption_with_its_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let mut j = Journal::create(dir.path()).unwrap();
        j.append(0.0, header()).unwrap();
        drop(j);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"seq\":5,\"t_s\":1.0,\"type\":\"probe_round\",\"round\":0,\"items\":1}\n")
            .unwrap();
        drop(f);
        let e = read_journal(&path).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("seq 5"), "{e}");
        std::fs::write(
            &path,
            "{\"seq\":0,\"t_s\":0.0,\"type\":\"end\",\"reason\":\"completed\",\"detail\":\"\"}\n",
        )
        .unwrap();
        let e = read_journal(&path).unwrap_err().to_string();
        assert!(e.contains("header"), "{e}");
        std::fs::write(&path, "").unwrap();
        assert!(
            read_journal(&path)
                .unwrap_err()
                .to_string()
                .contains("no complete record")
        );
    }
}
