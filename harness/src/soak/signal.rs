//! SIGINT/SIGTERM as a counter the soak polls: the first signal ends the soak after the
//! request in flight (then the report is written), a second one abandons that request too.

use std::sync::atomic::{AtomicUsize, Ordering};

static SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(_sig: libc::c_int) {
    // Only an atomic add: async-signal-safe.
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Installs the handler for SIGINT and SIGTERM.
pub fn install() -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid starting value; we set the handler (an
        // `extern "C"` function that only touches an atomic) and an empty mask, and pass
        // valid pointers to sigaction.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Signals received since start.
pub fn count() -> usize {
    SIGNALS.load(Ordering::SeqCst)
}
