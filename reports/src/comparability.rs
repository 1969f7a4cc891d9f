//! Whether two runs measured the same workload on the same system, checked before any
//! statistics by `gate` and `compare`: a verdict on runs that differ in model, scenario,
//! settings, threads, backend, device or system under test would compare the configurations,
//! not the builds. The build itself (tool version, git commit) is expected to differ and is
//! never compared.
//!
//! Field names (what `--allow-diff` and a rules file's `allow_diff` name):
//! - `model` — the model file's SHA-256;
//! - `scenario` — the LoadGen scenario (or `dialogue`);
//! - `settings.KEY` — each LoadGen test setting (query counts, durations, seeds, targets,
//!   mode …), `settings` names them all;
//! - `cli.KEY` — each command-line setting that changes the work (preset, token limits,
//!   governor, config file …; `cli.governor.*` for the governor's), `cli` names them all;
//!   output paths and settings compared under their own name (model, threads, backend,
//!   device, sut) are left out;
//! - `threads`, `backend`, `isa`;
//! - `device.id`, `device.name`, `device.cpu`, `device.os` (`device` names all four);
//! - `sut` — in-process, the child-process server, or another system: an HTTP server is
//!   named by its software and model id (`meta.settings.sut.system`), not its address.
//!
//! A name allows itself and every field below it (`cli` allows `cli.preset`).

use serde_json::Value;

use crate::schema::ResultFile;

/// One field in which two runs differ.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    /// Field name (see the module comment).
    pub field: String,
    /// The baseline's value, as text (`(absent)` when it has none).
    pub baseline: String,
    /// The candidate's value.
    pub candidate: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: baseline {}, candidate {}",
            self.field, self.baseline, self.candidate
        )
    }
}

/// Command-line keys that name where things go, or a setting compared under its own field
/// name; they never make two runs incomparable by themselves.
const CLI_NOT_WORK: &[&str] = &[
    "out",
    "json",
    "force",
    "dry_run",
    "mmlu_dir",
    "device",
    "sut",
    "engine.model",
    "engine.threads",
    "engine.backend.backend",
    "governor.governor_sysfs_root",
    "config",
    // How many runs one `run` command made, each judged as a run of its own.
    "repeat",
];

/// The field names a user may name: every top-level name of the module comment.
pub const FIELD_NAMES: &[&str] = &[
    "model", "scenario", "settings", "cli", "threads", "backend", "isa", "device", "sut",
];

/// Whether `field` is covered by one of the `allowed` names.
pub fn allowed(field: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| {
        field == a
            || field
                .strip_prefix(a.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// The first name in `names` that is neither a field name nor below one (`settings.KEY`,
/// `cli.KEY`, `device.id`, `device.name`, `device.cpu`, `device.os`).
pub fn unknown_name(names: &[String]) -> Option<&String> {
    names.iter().find(|n| match n.split_once('.') {
        None => !FIELD_NAMES.contains(&n.as_str()),
        Some(("settings" | "cli", rest)) => rest.is_empty(),
        Some(("device", rest)) => !matches!(rest, "id" | "name" | "cpu" | "os"),
        Some(_) => true,
    })
}

fn text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "(absent)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

/// Flattens a JSON object into `prefix.key` → value pairs (nested objects recursively).
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                flatten(&format!("{prefix}.{k}"), x, out);
            }
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

/// The scenario of a run: LoadGen's test settings, else the command line's.
fn scenario_of(r: &ResultFile) -> Option<&Value> {
    let s = &r.meta.settings;
    s.pointer("/test_settings/scenario")
        .or_else(|| s.pointer("/cli/scenario"))
}

/// The system under test of a run: an HTTP server's identity (`sut.system`: `http`, its
/// software and model id), else the `--sut` kind (`in-process` when the run names none: the
/// runtime in the measuring process is what every run measured before the choice existed).
fn sut_of(r: &ResultFile) -> Value {
    let s = &r.meta.settings;
    s.pointer("/sut/system")
        .or_else(|| s.pointer("/cli/sut"))
        .cloned()
        .unwrap_or_else(|| Value::String("in-process".into()))
}

/// Every field in which `b` and `c` differ, in the order of the module comment.
pub fn differences(b: &ResultFile, c: &ResultFile) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut push = |field: &str, x: String, y: String| {
        if x != y {
            out.push(Difference {
                field: field.to_string(),
                baseline: x,
                candidate: y,
            });
        }
    };
    push(
        "model",
        b.meta.model.sha256.clone(),
        c.meta.model.sha256.clone(),
    );
    push("scenario", text(scenario_of(b)), text(scenario_of(c)));
    for (section, prefix, skip) in [
        ("/test_settings", "settings", &[][..]),
        ("/cli", "cli", CLI_NOT_WORK),
    ] {
        let (mut fb, mut fc) = (Vec::new(), Vec::new());
        if let Some(v) = b.meta.settings.pointer(section) {
            flatten(prefix, v, &mut fb);
        }
        if let Some(v) = c.meta.settings.pointer(section) {
            flatten(prefix, v, &mut fc);
        }
        let mut keys: Vec<&String> = fb.iter().chain(&fc).map(|(k, _)| k).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let rel = &k[prefix.len() + 1..];
            if rel == "scenario"
                || skip
                    .iter()
                    .any(|s| rel == *s || rel.starts_with(&format!("{s}.")))
            {
                continue;
            }
            let vb = fb.iter().find(|(x, _)| x == k).map(|(_, v)| v);
            let vc = fc.iter().find(|(x, _)| x == k).map(|(_, v)| v);
            push(k, text(vb), text(vc));
        }
    }
    push(
        "threads",
        b.meta.threads.to_string(),
        c.meta.threads.to_string(),
    );
    push("backend", b.meta.backend.clone(), c.meta.backend.clone());
    push("isa", b.meta.isa.clone(), c.meta.isa.clone());
    let (db, dc) = (&b.meta.device, &c.meta.device);
    push("device.id", db.id.clone(), dc.id.clone());
    push("device.name", db.name.clone(), dc.name.clone());
    push("device.cpu", db.cpu.clone(), dc.cpu.clone());
    push("device.os", db.os.clone(), dc.os.clone());
    push("sut", text(Some(&sut_of(b))), text(Some(&sut_of(c))));
    out
}

/// The differences not covered by `allow`.
pub fn disallowed(b: &ResultFile, c: &ResultFile, allow: &[String]) -> Vec<Difference> {
    differences(b, c)
        .into_iter()
        .filter(|d| !allowed(&d.field, allow))
        .collect()
}

/// Checks every run against the baseline `runs[baseline]` (label, result); an error lists,
/// per run, each field that differs and is not allowed.
pub fn check_all(
    runs: &[(&str, &ResultFile)],
    baseline: usize,
    allow: &[String],
) -> crate::error::Result<()> {
    if let Some(n) = unknown_name(allow) {
        return Err(crate::error::ReportError::Compare(format!(
            "--allow-diff {n:?}: not a field name (one of {}, or settings.KEY, cli.KEY, \
             device.id|name|cpu|os)",
            FIELD_NAMES.join(", ")
        )));
    }
    let Some((base_label, base)) = runs.get(baseline) else {
        return Ok(());
    };
    let mut problems = Vec::new();
    for (i, (label, r)) in runs.iter().enumerate() {
        if i == baseline {
            continue;
        }
        let d = disallowed(base, r, allow);
        if !d.is_empty() {
            let list: Vec<String> = d.iter().map(|d| d.to_string()).collect();
            problems.push(format!(
                "`{label}` vs baseline `{base_label}`: {}",
                list.join("; ")
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(crate::error::ReportError::Compare(format!(
            "the runs are not comparable — {}. If the difference is what you are comparing \
             (handsets side by side: --allow-diff device), name each field with --allow-diff",
            problems.join(" | ")
        )))
    }
}
