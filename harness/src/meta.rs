//! Provenance stamped on every output file: schema version, tool version, git commit, device,
//! model name and hash, settings and UTC timestamp.

use serde::Serialize;
use std::path::Path;

pub const TOOL: &str = "pocketperf";
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");
pub const GIT_COMMIT: &str = env!("POCKETPERF_GIT_COMMIT");

/// A description of the machine the run happened on.
#[derive(Clone, Debug, Serialize)]
pub struct HostInfo {
    pub id: String,
    pub name: String,
    pub cpu: String,
    pub os: String,
}

/// Reads CPU model, host name and kernel of the local machine (best effort; unknown fields say so).
pub fn local_host() -> HostInfo {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Hardware"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let os = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_else(|_| std::env::consts::OS.to_string());
    HostInfo {
        id: "local".into(),
        name,
        cpu,
        os,
    }
}

/// The common header of JSON outputs.
#[derive(Clone, Debug, Serialize)]
pub struct OutputHeader {
    pub schema_version: u32,
    pub tool: &'static str,
    pub tool_version: &'static str,
    pub git_commit: &'static str,
    pub device: HostInfo,
    pub model_path: String,
    pub model_name: String,
    pub model_sha256: String,
    pub settings: serde_json::Value,
    pub timestamp_utc: String,
}

impl OutputHeader {
    pub fn new(
        schema_version: u32,
        model: &Path,
        model_sha256: &str,
        settings: serde_json::Value,
    ) -> Self {
        OutputHeader {
            schema_version,
            tool: TOOL,
            tool_version: TOOL_VERSION,
            git_commit: GIT_COMMIT,
            device: local_host(),
            model_path: model.display().to_string(),
            model_name: model_name(model),
            model_sha256: model_sha256.to_string(),
            settings,
            timestamp_utc: now_utc(),
        }
    }
}

pub fn now_utc() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The model's own name (`general.name` in its GGUF metadata); the file name when the file has
/// none or cannot be read, so a header is never left without one.
pub fn model_name(path: &Path) -> String {
    pocketperf_runtime::gguf::GgufFile::open(path)
        .ok()
        .and_then(|g| g.get_str("general.name").ok().map(str::to_string))
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| {
            path.file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string())
        })
}

/// SHA-256 of a model file, cached by (path, size, mtime) in memory for the process.
pub fn model_sha256(path: &Path) -> String {
    crate::model_store::sha256_file(path).unwrap_or_else(|e| format!("unavailable: {e}"))
}
