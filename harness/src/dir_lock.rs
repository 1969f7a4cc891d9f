//! One writer per result directory: an exclusive advisory lock, `flock(2)` with `LOCK_EX |
//! LOCK_NB`, on [`LOCK_FILE`] inside the directory, held for as long as a [`DirLock`] lives.
//! `run`, `mmlu run`, `soak`, `soak --resume` and `farm run` take it before they write
//! anything; a second writer is refused at once (no waiting) with an error naming the
//! directory and the holder's pid (`docs/RELIABILITY.md`).
//!
//! The lock file holds the holder's pid for that message only: the kernel lock is the truth,
//! so a file left behind by a killed writer locks nothing (the kernel released its lock with
//! its last descriptor). The holder removes the file when it is done; a writer that opened it
//! just before that removal notices the file it locked is no longer the one at the path and
//! starts over on a fresh one, so two writers never hold locks on two different files.
//!
//! [`DirLock::claim`] is how a command starts a new result directory: a directory that holds
//! anything is refused unless `--force`, which removes what it holds (after taking the lock),
//! so no stale file of an earlier run stays beside the new one. `--force` clears only a
//! directory that holds at least one file pocketperf writes ([`RESULT_NAMES`]), never an
//! arbitrary one given by mistake (a home directory, a source tree).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file's name inside a locked directory.
pub const LOCK_FILE: &str = ".pocketperf.lock";

/// Names pocketperf writes at the top of a result directory; `--force` clears a directory
/// only when one of them is there.
pub const RESULT_NAMES: &[&str] = &[
    pocketperf_reports::schema::RESULT_FILE,
    pocketperf_reports::schema::TOKENS_FILE,
    pocketperf_reports::schema::TELEMETRY_FILE,
    pocketperf_reports::schema::REPORT_HTML,
    pocketperf_reports::schema::REPORT_MD,
    crate::telemetry::recorder::TELEMETRY_JSON,
    crate::trace::TRACE_FILE,
    "mlperf_log_summary.txt",
    "mlperf_log_detail.txt",
    "mlperf_log_accuracy.json",
    crate::mmlu::MMLU_JSON,
    crate::soak::journal::JOURNAL_FILE,
    crate::soak::report::ROBUSTNESS_JSON,
    "run-1",
];

#[derive(Debug, thiserror::Error)]
pub enum DirLockError {
    #[error(
        "{dir}: not empty ({entries} entries, e.g. `{example}`); give --force to replace its contents, or choose another directory"
    )]
    NotEmpty {
        dir: PathBuf,
        entries: usize,
        example: String,
    },
    #[error(
        "{dir}: --force clears only a pocketperf result directory, and this one holds none of its files (result.json, journal.jsonl, …); nothing removed"
    )]
    NotResultDir { dir: PathBuf },
    #[error(
        "{dir}: another pocketperf process ({holder}) is writing to this directory; wait for it to end or choose another directory"
    )]
    Held { dir: PathBuf, holder: String },
    #[error("{path}: cannot {action}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// An exclusive lock on a directory, released (and its lock file removed) on drop.
#[derive(Debug)]
pub struct DirLock {
    file: File,
    path: PathBuf,
}

fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> DirLockError + 'a {
    move |source| DirLockError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn same_inode(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

impl DirLock {
    /// Creates `dir` (and its parents) when missing, then locks it.
    pub fn create_and_lock(dir: &Path) -> Result<DirLock, DirLockError> {
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        DirLock::acquire(dir)
    }

    /// Claims `dir` for a new result: creates it when missing, refuses it when it holds
    /// anything but a lock file unless `force` (then nothing is written there), and with
    /// `force` locks it and removes everything in it but the lock. See the module docs.
    pub fn claim(dir: &Path, force: bool) -> Result<DirLock, DirLockError> {
        let entries = |dir: &Path| -> Result<Vec<std::ffi::OsString>, DirLockError> {
            let mut names = Vec::new();
            for e in std::fs::read_dir(dir).map_err(io("list", dir))? {
                let name = e.map_err(io("list", dir))?.file_name();
                if name != LOCK_FILE {
                    names.push(name);
                }
            }
            names.sort();
            Ok(names)
        };
        // A writer at work in the directory is named first (its lock file alone makes the
        // directory look empty).
        let mut held = None;
        if dir.join(LOCK_FILE).exists() {
            held = Some(DirLock::acquire(dir)?);
        }
        if dir.exists() {
            let names = entries(dir)?;
            if !names.is_empty() {
                if !force {
                    return Err(DirLockError::NotEmpty {
                        dir: dir.to_path_buf(),
                        entries: names.len(),
                        example: names[0].to_string_lossy().into_owned(),
                    });
                }
                if !names.iter().any(|n| RESULT_NAMES.iter().any(|r| n == *r)) {
                    return Err(DirLockError::NotResultDir {
                        dir: dir.to_path_buf(),
                    });
                }
            }
        }
        let lock = match held {
            Some(l) => l,
            None => DirLock::create_and_lock(dir)?,
        };
        if force {
            for name in entries(dir)? {
                let p = dir.join(&name);
                let meta = std::fs::symlink_metadata(&p).map_err(io("stat", &p))?;
                // A link is removed itself, never followed.
                if meta.is_dir() {
                    std::fs::remove_dir_all(&p).map_err(io("remove", &p))?;
                } else {
                    std::fs::remove_file(&p).map_err(io("remove", &p))?;
                }
            }
        }
        Ok(lock)
    }

    /// Locks the existing directory `dir`, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock, DirLockError> {
        let path = dir.join(LOCK_FILE);
        // A holder can remove the file between our open and our lock; each such race costs
        // one more round, and a holder ends only once, so a few rounds always suffice.
        for _ in 0..64 {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                // A symlink planted at the lock file's name is not followed onto its target.
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(io("open the lock file", &path))?;
            // SAFETY: flock on a descriptor this function owns, with valid flags.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    let mut text = String::new();
                    let _ = file.read_to_string(&mut text);
                    let holder = match text.trim().parse::<u32>() {
                        Ok(pid) => format!("pid {pid}"),
                        Err(_) => "pid not yet recorded".to_string(),
                    };
                    return Err(DirLockError::Held {
                        dir: dir.to_path_buf(),
                        holder,
                    });
                }
                return Err(io("lock", &path)(err));
            }
            let ours = file.metadata().map_err(io("stat", &path))?;
            match std::fs::symlink_metadata(&path) {
                Ok(now) if same_inode(&ours, &now) => {}
                // The previous holder removed the file we locked: lock the one at the path.
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io("stat", &path)(e)),
            }
            file.set_len(0)
                .and_then(|()| writeln!(file, "{}", std::process::id()))
                .and_then(|()| file.flush())
                .map_err(io("write", &path))?;
            return Ok(DirLock { file, path });
        }
        Err(io("lock", &path)(std::io::Error::other(
            "the lock file kept being replaced",
        )))
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Removed while still locked, and only when it is still ours; the descriptor's close
        // (after this) releases the lock.
        if let (Ok(ours), Ok(now)) = (self.file.metadata(), std::fs::symlink_metadata(&self.path))
            && same_inode(&ours, &now)
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_a_directory_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        let pid = std::fs::read_to_string(first.path()).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
        // flock locks belong to the open file description: a second open in this process
        // conflicts just as another process's would.
        let e = DirLock::acquire(dir.path()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        drop(first);
        assert!(!dir.path().join(LOCK_FILE).exists());
        let again = DirLock::acquire(dir.path()).unwrap();
        drop(again);
    }

    #[test]
    fn a_stale_lock_file_of_a_dead_writer_locks_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), "999999999\n").unwrap();
        let l = DirLock::acquire(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(l.path()).unwrap().trim(),
            std::process::id().to_string()
        );
    }

    #[test]
    fn a_non_empty_directory_is_refused_untouched_and_cleared_with_force() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        // Missing or empty: claimed.
        drop(DirLock::claim(&out, false).unwrap());
        drop(DirLock::claim(&out, false).unwrap());
        std::fs::write(out.join("report.md"), "stale\n").unwrap();
        std::fs::write(out.join("result.json"), "{}\n").unwrap();
        std::fs::create_dir(out.join("run-1")).unwrap();
        std::fs::write(out.join("run-1/result.json"), "{}\n").unwrap();
        let e = DirLock::claim(&out, false).unwrap_err();
        assert!(e.to_string().contains(&out.display().to_string()), "{e}");
        assert!(e.to_string().contains("--force"), "{e}");
        let mut left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["report.md", "result.json", "run-1"]);
        let lock = DirLock::claim(&out, true).unwrap();
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [LOCK_FILE]);
        drop(lock);
    }

    #[test]
    fn force_never_clears_a_directory_pocketperf_did_not_write() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("src");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("main.rs"), "fn main() {}\n").unwrap();
        let e = DirLock::claim(&victim, true).unwrap_err();
        assert!(e.to_string().contains("nothing removed"), "{e}");
        assert!(victim.join("main.rs").exists());
        assert!(!victim.join(LOCK_FILE).exists());
    }

    #[test]
    fn a_symlinked_lock_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me\n").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join(LOCK_FILE)).unwrap();
        assert!(DirLock::acquire(dir.path()).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    }
}
