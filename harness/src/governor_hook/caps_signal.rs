//! [`CapsSignalGuard`]: while a governor holds frequency caps, SIGINT and SIGTERM write the
//! original caps back before the process ends as the signal would have ended it.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, Ordering};

use anyhow::{Context, Result, bail};

/// What the signal handler writes back: (path, original value) pairs, prepared before the
/// handler is installed so that the handler only makes async-signal-safe system calls.
struct RestoreList {
    files: Vec<(CString, Vec<u8>)>,
}

static RESTORE: AtomicPtr<RestoreList> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn restore_and_reraise(sig: libc::c_int) {
    let list = RESTORE.load(Ordering::SeqCst);
    if !list.is_null() {
        // SAFETY: the pointer came from `Box::into_raw` in `install` and is never freed (a
        // handler may still be reading it after `uninstall`), so it is valid here.
        let list = unsafe { &*list };
        for (path, value) in &list.files {
            // SAFETY: open/write/close are async-signal-safe; `path` is NUL-terminated and
            // `value` is a live buffer of the given length.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_TRUNC);
                if fd >= 0 {
                    let _ = libc::write(fd, value.as_ptr().cast(), value.len());
                    libc::close(fd);
                }
            }
        }
    }
    // SAFETY: signal/raise are async-signal-safe; the default action then ends the process
    // with the signal, as if no handler had been installed.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// While alive, SIGINT and SIGTERM first write the original frequency caps back, then end the
/// process as the signal would have. Normal exit and errors restore through
/// `SysfsFreqCap`'s drop; this covers Ctrl-C.
pub struct CapsSignalGuard {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl CapsSignalGuard {
    /// Installs the handler for `plan` (from [`SysfsFreqCap::restore_plan`]).
    pub fn install(plan: &[(PathBuf, String)]) -> Result<Self> {
        use std::os::unix::ffi::OsStrExt;
        let files = plan
            .iter()
            .map(|(p, v)| {
                CString::new(p.as_os_str().as_bytes())
                    .map(|c| (c, v.as_bytes().to_vec()))
                    .with_context(|| format!("{}: path contains a NUL byte", p.display()))
            })
            .collect::<Result<Vec<_>>>()?;
        let list = Box::into_raw(Box::new(RestoreList { files }));
        // Older lists are leaked on purpose (see `restore_and_reraise`).
        RESTORE.store(list, Ordering::SeqCst);
        let mut old = Vec::new();
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler
            // is an `extern "C" fn(c_int)` as `sa_sigaction` expects without SA_SIGINFO.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction =
                    restore_and_reraise as extern "C" fn(libc::c_int) as *const () as usize;
                libc::sigemptyset(&mut act.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &act, &mut prev) != 0 {
                    bail!(
                        "cannot install the signal handler that restores frequency caps: {}",
                        std::io::Error::last_os_error()
                    );
                }
                old.push((sig, prev));
            }
        }
        Ok(Self { old })
    }
}

impl Drop for CapsSignalGuard {
    fn drop(&mut self) {
        RESTORE.store(std::ptr::null_mut(), Ordering::SeqCst);
        for (sig, prev) in &self.old {
            // SAFETY: `prev` is the action `sigaction` returned for this signal.
            unsafe {
                libc::sigaction(*sig, prev, std::ptr::null_mut());
            }
        }
    }
}
