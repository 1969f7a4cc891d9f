//! The one way result files are written: [`replace_file`], a temporary file beside the
//! destination, filled, synced and renamed into place. A reader (a report, the gate, a
//! dashboard) never sees half a file, a crash mid-write leaves the old file whole, and a
//! symlink at the destination is replaced rather than followed onto the file it points at.
//! `result.json`, the data files, the HTML/Markdown reports, `mmlu.json`, the detail log's
//! appended lines, the soak's `robustness.json`/`.html`, `compare --out`, `farm run`'s files,
//! `logits --raw-out` and the governor simulation's outputs all go through it (the GGUF
//! writer has its own streaming twin, `pocketperf_runtime::gguf::replace_file`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The temporary `replace_file` fills for `path`: hidden, beside it, unique to this process
/// and call, ending in `.tmp`.
fn temporary_for(path: &Path) -> PathBuf {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{name}.{}-{}.tmp",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Writes `bytes` to `path` through a new temporary file beside it, renamed into place; the
/// temporary is removed on failure. Errors name the file that failed (the temporary or
/// `path`).
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), (PathBuf, std::io::Error)> {
    let tmp = temporary_for(path);
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .map_err(|e| (tmp.clone(), e))
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| (path.to_path_buf(), e)));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_at_the_destination_is_replaced_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "keep me\n").unwrap();
        let dest = dir.path().join("result.json");
        std::os::unix::fs::symlink(&victim, &dest).unwrap();
        replace_file(&dest, b"{}\n").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me\n");
        assert!(fs::symlink_metadata(&dest).unwrap().file_type().is_file());
        assert_eq!(fs::read_to_string(&dest).unwrap(), "{}\n");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        // A destination that is a directory cannot be replaced by a file.
        let dest = dir.path().join("d");
        fs::create_dir(&dest).unwrap();
        fs::write(dest.join("inside"), "x").unwrap();
        let (p, _) = replace_file(&dest, b"new").unwrap_err();
        assert_eq!(p, dest);
        assert!(dest.join("inside").is_file());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
