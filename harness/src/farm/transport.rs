//! How the farm reaches a device: push files, run the binary, pull results, remove files.
//!
//! - [`LocalTransport`] (`local` and `sim:<profile>`): a directory on this host; files are
//!   hard-linked or copied, the binary is started directly with its arguments (no shell).
//! - [`AdbTransport`] (`adb:<serial>`): the real `adb` client, started as a process with its
//!   arguments as separate words (never a host shell string); the one command line
//!   `adb shell` needs is built by [`super::shell`], so serials and paths with spaces or
//!   quotes work and nothing in them is interpreted. Remote commands end by echoing a marker
//!   with their exit status, so a connection lost mid-command (no marker) is told apart from
//!   a command that failed.
//!
//! Every external command runs under a timeout; a hung `adb` is killed, never waited on.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::FarmError;
use super::shell;

/// Marker the remote command line prints last, followed by its exit status.
pub const EXIT_MARKER: &str = "pocketperf-exit:";

/// A device the farm can drive.
pub trait Transport: Send + Sync {
    /// `local`, `sim:<profile>` or `adb:<serial>`.
    fn name(&self) -> String;
    /// Fails when the device is not reachable and ready.
    fn check(&self) -> Result<(), FarmError>;
    /// Creates directories (and their parents).
    fn mkdirs(&self, dirs: &[String]) -> Result<(), FarmError>;
    /// Copies a host file to the device; `executable` sets mode 755.
    fn push(&self, local: &Path, remote: &str, executable: bool) -> Result<(), FarmError>;
    /// Runs `program args…` in `cwd` with stdout and stderr to the file `log`; returns the
    /// program's exit status (128 + signal when killed by a signal).
    fn run(
        &self,
        cwd: &str,
        program: &str,
        args: &[String],
        log: &str,
        timeout: Duration,
    ) -> Result<i32, FarmError>;
    /// Copies a device file or directory to `local` (which must not exist yet).
    fn pull(&self, remote: &str, local: &Path) -> Result<(), FarmError>;
    /// Removes a device file or directory tree; absent is fine.
    fn remove(&self, remote: &str) -> Result<(), FarmError>;
}

/// Joins a device path and a name with `/`.
pub fn remote_join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// What a finished external command left.
#[derive(Debug)]
pub struct Captured {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Waits for `child` at most `timeout`; kills it (and reaps it) when time runs out.
fn wait_timeout(
    child: &mut std::process::Child,
    timeout: Duration,
) -> std::io::Result<Option<ExitStatus>> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if start.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

fn read_all(mut f: File) -> String {
    let mut buf = Vec::new();
    let _ = f.seek(SeekFrom::Start(0));
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Runs `cmd` with stdin closed and stdout/stderr captured in anonymous files (no pipe can
/// fill up and stall it), under `timeout`.
pub fn run_captured(
    cmd: &mut Command,
    timeout: Duration,
    device: &str,
    action: &str,
) -> Result<Captured, FarmError> {
    let io_err = |e: std::io::Error| FarmError::Transport {
        device: device.to_string(),
        action: action.to_string(),
        detail: format!("cannot capture output: {e}"),
    };
    let out = tempfile::tempfile().map_err(io_err)?;
    let err = tempfile::tempfile().map_err(io_err)?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(io_err)?)
        .stderr(err.try_clone().map_err(io_err)?)
        .spawn()
        .map_err(|e| {
            let program = cmd.get_program().to_string_lossy().into_owned();
            let hint = if e.kind() == std::io::ErrorKind::NotFound {
                " (not on PATH: install it, e.g. Debian's `adb` package, or name its path as \
                 `adb` in the inventory's [defaults])"
            } else {
                ""
            };
            FarmError::Transport {
                device: device.to_string(),
                action: action.to_string(),
                detail: format!("cannot start `{program}`: {e}{hint}"),
            }
        })?;
    match wait_timeout(&mut child, timeout).map_err(io_err)? {
        Some(status) => Ok(Captured {
            status,
            stdout: read_all(out),
            stderr: read_all(err),
        }),
        None => Err(FarmError::Timeout {
            device: device.to_string(),
            action: action.to_string(),
            secs: timeout.as_secs_f64(),
        }),
    }
}

/// The last `n` lines of a text, for error reports.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A directory on this host standing in for a device (`local`, `sim:<profile>`).
#[derive(Debug, Clone)]
pub struct LocalTransport {
    name: String,
}

impl LocalTransport {
    /// A local transport reported as `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }

    fn io(&self, action: &str, path: &Path, e: std::io::Error) -> FarmError {
        FarmError::Transport {
            device: self.name.clone(),
            action: format!("{action} {}", path.display()),
            detail: e.to_string(),
        }
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}

impl Transport for LocalTransport {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn check(&self) -> Result<(), FarmError> {
        Ok(())
    }

    fn mkdirs(&self, dirs: &[String]) -> Result<(), FarmError> {
        for d in dirs {
            std::fs::create_dir_all(d).map_err(|e| self.io("creating", Path::new(d), e))?;
        }
        Ok(())
    }

    fn push(&self, local: &Path, remote: &str, executable: bool) -> Result<(), FarmError> {
        let to = Path::new(remote);
        if to.exists() {
            std::fs::remove_file(to).map_err(|e| self.io("replacing", to, e))?;
        }
        // A hard link shares the bytes; a rebuild replaces the source file rather than
        // rewriting it, so the linked copy stays what was pushed.
        if std::fs::hard_link(local, to).is_err() {
            std::fs::copy(local, to).map_err(|e| self.io("copying to", to, e))?;
        }
        if executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| self.io("chmod", to, e))?;
        }
        Ok(())
    }

    fn run(
        &self,
        cwd: &str,
        program: &str,
        args: &[String],
        log: &str,
        timeout: Duration,
    ) -> Result<i32, FarmError> {
        let log_path = Path::new(log);
        // A new file in place of whatever is there: a symlink at `log` is removed, not
        // followed (`create_new` never opens through one).
        match std::fs::remove_file(log_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(self.io("replacing", log_path, e));
            }
            _ => {}
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(log_path)
            .map_err(|e| self.io("creating", log_path, e))?;
        let f2 = f.try_clone().map_err(|e| self.io("opening", log_path, e))?;
        let mut child = Command::new(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2)
            .spawn()
            .map_err(|e| self.io("starting", Path::new(program), e))?;
        match wait_timeout(&mut child, timeout)
            .map_err(|e| self.io("waiting for", Path::new(program), e))?
        {
            Some(status) => Ok(exit_code(status)),
            None => Err(FarmError::Timeout {
                device: self.name.clone(),
                action: format!("running {program}"),
                secs: timeout.as_secs_f64(),
            }),
        }
    }

    fn pull(&self, remote: &str, local: &Path) -> Result<(), FarmError> {
        let from = Path::new(remote);
        if !from.exists() {
            return Err(self.io(
                "pulling",
                from,
                std::io::Error::new(std::io::ErrorKind::NotFound, "not found"),
            ));
        }
        copy_tree(from, local).map_err(|e| self.io("pulling", from, e))
    }

    fn remove(&self, remote: &str) -> Result<(), FarmError> {
        let p = Path::new(remote);
        let r = if p.is_dir() {
            std::fs::remove_dir_all(p)
        } else if p.exists() {
            std::fs::remove_file(p)
        } else {
            Ok(())
        };
        r.map_err(|e| self.io("removing", p, e))
    }
}

/// An Android device through the `adb` client.
#[derive(Debug, Clone)]
pub struct AdbTransport {
    adb: PathBuf,
    serial: String,
    transfer_timeout: Duration,
}

impl AdbTransport {
    /// A device reached by `adb -s <serial>`; `adb` is a program name or path.
    pub fn new(
        adb: impl Into<PathBuf>,
        serial: impl Into<String>,
        transfer_timeout: Duration,
    ) -> Self {
        Self {
            adb: adb.into(),
            serial: serial.into(),
            transfer_timeout,
        }
    }

    /// `adb -s SERIAL args…` as a process (arguments passed as separate words).
    pub fn command(&self, args: &[&std::ffi::OsStr]) -> Command {
        let mut c = Command::new(&self.adb);
        c.arg("-s").arg(&self.serial).args(args);
        c
    }

    fn adb(
        &self,
        args: &[&std::ffi::OsStr],
        action: &str,
        timeout: Duration,
    ) -> Result<Captured, FarmError> {
        let out = run_captured(&mut self.command(args), timeout, &self.name(), action)?;
        if !out.status.success() {
            return Err(self.failure(action, &out));
        }
        Ok(out)
    }

    fn failure(&self, action: &str, out: &Captured) -> FarmError {
        let mut detail = format!("adb exited with {}", exit_code(out.status));
        let text = format!("{}\n{}", out.stderr.trim(), out.stdout.trim());
        let text = tail(text.trim(), 6);
        if !text.is_empty() {
            detail.push_str(": ");
            detail.push_str(&text);
        }
        FarmError::Transport {
            device: self.name(),
            action: action.to_string(),
            detail,
        }
    }

    /// Runs a remote command line (already quoted) and returns its exit status, read from
    /// the marker it prints last; no marker means the connection was lost.
    pub fn shell_status(
        &self,
        line: &str,
        action: &str,
        timeout: Duration,
    ) -> Result<(i32, Captured), FarmError> {
        let full = format!("{line}; echo {EXIT_MARKER}$?");
        let out = run_captured(
            &mut self.command(&["shell".as_ref(), full.as_ref()]),
            timeout,
            &self.name(),
            action,
        )?;
        let code = out
            .stdout
            .lines()
            .rev()
            .find_map(|l| l.trim().strip_prefix(EXIT_MARKER))
            .and_then(|c| c.trim().parse::<i32>().ok());
        match code {
            Some(c) => Ok((c, out)),
            None => {
                let mut e = self.failure(action, &out);
                if let FarmError::Transport { detail, .. } = &mut e {
                    detail.push_str(" (no exit marker: connection lost mid-command)");
                }
                Err(e)
            }
        }
    }

    fn shell_ok(&self, line: &str, action: &str) -> Result<(), FarmError> {
        let (code, out) = self.shell_status(line, action, self.transfer_timeout)?;
        if code != 0 {
            return Err(FarmError::Transport {
                device: self.name(),
                action: action.to_string(),
                detail: format!(
                    "remote command exited with {code}: {}",
                    tail(out.stdout.trim(), 4)
                ),
            });
        }
        Ok(())
    }
}

impl Transport for AdbTransport {
    fn name(&self) -> String {
        format!("adb:{}", self.serial)
    }

    fn check(&self) -> Result<(), FarmError> {
        let out = self.adb(&["get-state".as_ref()], "get-state", self.transfer_timeout)?;
        let state = out.stdout.trim();
        if state == "device" {
            Ok(())
        } else {
            Err(FarmError::Transport {
                device: self.name(),
                action: "get-state".into(),
                detail: format!(
                    "device is `{state}`, not `device` (unplugged, offline or unauthorized?)"
                ),
            })
        }
    }

    fn mkdirs(&self, dirs: &[String]) -> Result<(), FarmError> {
        let mut words = vec!["mkdir".to_string(), "-p".to_string()];
        words.extend(dirs.iter().cloned());
        self.shell_ok(&shell::join(&words)?, "mkdir")
    }

    fn push(&self, local: &Path, remote: &str, executable: bool) -> Result<(), FarmError> {
        self.adb(
            &["push".as_ref(), local.as_os_str(), remote.as_ref()],
            &format!("push {}", local.display()),
            self.transfer_timeout,
        )?;
        if executable {
            self.shell_ok(&shell::join(&["chmod", "755", remote])?, "chmod")?;
        }
        Ok(())
    }

    fn run(
        &self,
        cwd: &str,
        program: &str,
        args: &[String],
        log: &str,
        timeout: Duration,
    ) -> Result<i32, FarmError> {
        let mut words = vec![program.to_string()];
        words.extend(args.iter().cloned());
        let line = format!(
            "cd {} && {} > {} 2>&1",
            shell::quote(cwd)?,
            shell::join(&words)?,
            shell::quote(log)?
        );
        self.shell_status(&line, &format!("running {program}"), timeout)
            .map(|(code, _)| code)
    }

    fn pull(&self, remote: &str, local: &Path) -> Result<(), FarmError> {
        self.adb(
            &["pull".as_ref(), remote.as_ref(), local.as_os_str()],
            &format!("pull {remote}"),
            self.transfer_timeout,
        )
        .map(|_| ())
    }

    fn remove(&self, remote: &str) -> Result<(), FarmError> {
        self.shell_ok(&shell::join(&["rm", "-rf", remote])?, "rm")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_step_log_replaces_a_symlink_instead_of_writing_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("notes.txt");
        std::fs::write(&victim, "keep me\n").unwrap();
        let log = dir.path().join("step.log");
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        let t = LocalTransport::new("local");
        let cwd = dir.path().display().to_string();
        let code = t
            .run(
                &cwd,
                "/bin/sh",
                &["-c".into(), "echo from-the-step".into()],
                &log.display().to_string(),
                Duration::from_secs(30),
            )
            .unwrap();
        assert_eq!(code, 0);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
        let meta = std::fs::symlink_metadata(&log).unwrap();
        assert!(meta.file_type().is_file(), "the symlink was followed");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "from-the-step\n");
    }
}
