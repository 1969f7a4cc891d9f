//! Where tests find what they did not build themselves: the workspace root, the shared
//! reference material beside the checkout, and the cached reference model.

use std::path::{Path, PathBuf};

/// The workspace root (the directory holding the workspace `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    match Path::new(env!("CARGO_MANIFEST_DIR")).parent() {
        Some(p) => p.to_path_buf(),
        None => panic!("testkit has no parent directory"),
    }
}

/// The shared reference material: `$POCKETPERF_SHARED`, else `../shared` beside the
/// workspace root.
pub fn shared_dir() -> PathBuf {
    match std::env::var_os("POCKETPERF_SHARED") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => workspace_root().join("../shared"),
    }
}

/// The reference model a test runs: `$POCKETPERF_MODEL`, else `cached` (the model cache's
/// path, which the harness's `model_store` owns). Panics, saying how to fetch it, when the
/// file is missing.
pub fn reference_model(cached: impl FnOnce() -> PathBuf) -> PathBuf {
    let p = match std::env::var_os("POCKETPERF_MODEL") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => cached(),
    };
    assert!(
        p.is_file(),
        "reference model not found at {}: run `pocketperf model fetch` (or set POCKETPERF_MODEL)",
        p.display()
    );
    p
}
