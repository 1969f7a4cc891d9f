//! The runtime's one error type. Every variant carries the context a user needs to act:
//! the file, the tensor, the metadata key, the byte offset.

use std::path::PathBuf;

/// Result alias used throughout the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A malformed or hostile GGUF file: names the field and the byte offset where reading failed.
    #[error("{file}: invalid GGUF: {field} at offset {offset}: {reason}")]
    Gguf {
        file: String,
        field: String,
        offset: u64,
        reason: String,
    },
    #[error("metadata key `{key}`: {reason}")]
    Metadata { key: String, reason: String },
    #[error("tensor `{name}`: {reason}")]
    Tensor { name: String, reason: String },
    #[error("tensor `{name}`: unsupported tensor type {ty}")]
    UnsupportedType { name: String, ty: String },
    #[error("unsupported architecture `{0}` (supported: llama, qwen2, gemma3)")]
    UnsupportedArch(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("kernel: {0}")]
    Kernel(String),
    #[error("POCKETPERF_ISA={requested}: {reason}")]
    Isa { requested: String, reason: String },
    /// A tuning variable of the environment (`POCKETPERF_PREFETCH`, `POCKETPERF_REPACK`) with
    /// a value the runtime does not take.
    #[error("{var}={value}: {reason}")]
    Env {
        var: &'static str,
        value: String,
        reason: String,
    },
    #[error("prompt of {tokens} tokens does not fit the context of {ctx} tokens")]
    ContextOverflow { tokens: usize, ctx: usize },
    #[error(
        "KV cache full: {capacity} slots in use and the policy is `error` (use --kv-policy sliding)"
    )]
    KvFull { capacity: usize },
    #[error("KV cache: {0}")]
    Kv(String),
    #[error("invalid argument `{what}`: {reason}")]
    InvalidArgument { what: String, reason: String },
    #[error("governor: {0}")]
    Governor(String),
    #[error("OpenCL: {0}")]
    OpenCl(String),
    /// A residency probe, eviction or prefault of a file failed (`op` is the system call).
    #[error("{}: {op}: {source}", path.display())]
    Residency {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// `mlock` of the model's mapping failed: names the limit, its values and the bytes needed.
    #[error(
        "{}: mlock of {bytes} bytes failed ({source}): RLIMIT_MEMLOCK is {soft} bytes (soft) and \
         {hard} (hard) but {bytes} are needed; raise it (`ulimit -l`, limits.conf) or hold \
         CAP_IPC_LOCK, or load without --mlock",
        path.display()
    )]
    Mlock {
        path: PathBuf,
        bytes: u64,
        soft: String,
        hard: String,
        #[source]
        source: std::io::Error,
    },
}
