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

impl OutputHeader {
    /// The header as `key=value` pairs, for the text formats that carry it as comment lines
    /// (CSV `# …`, SQL `-- …`) or a table (Markdown); `settings` as compact JSON.
    pub fn pairs(&self) -> Vec<(String, String)> {
        vec![
            ("schema_version".into(), self.schema_version.to_string()),
            (
                "tool".into(),
                format!("{} {}", self.tool, self.tool_version),
            ),
            ("git_commit".into(), self.git_commit.to_string()),
            (
                "device".into(),
                format!(
                    "{} ({}, {})",
                    self.device.name, self.device.cpu, self.device.os
                ),
            ),
            ("model_path".into(), self.model_path.clone()),
            ("model_name".into(), self.model_name.clone()),
            ("model_sha256".into(), self.model_sha256.clone()),
            ("settings".into(), self.settings.to_string()),
            ("timestamp_utc".into(), self.timestamp_utc.clone()),
        ]
    }
}

pub fn now_utc() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The model's own name: `general.name` in its GGUF metadata, `unknown` when it has none.
/// The one rule for every output (result.json's `meta.model.name` and the CSV headers).
pub fn model_name_in(gguf: &pocketperf_runtime::gguf::GgufFile) -> String {
    gguf.get_str("general.name")
        .unwrap_or("unknown")
        .to_string()
}

/// [`model_name_in`] for a file not loaded yet (`unknown` when it cannot be read either).
pub fn model_name(path: &Path) -> String {
    pocketperf_runtime::gguf::GgufFile::open(path)
        .map(|g| model_name_in(&g))
        .unwrap_or_else(|_| "unknown".into())
}

/// SHA-256 of a model file, cached by (path, size, mtime) in memory for the process.
pub fn model_sha256(path: &Path) -> String {
    crate::model_store::sha256_file(path).unwrap_or_else(|e| format!("unavailable: {e}"))
}
