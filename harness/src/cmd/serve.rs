//! `pocketperf serve`: serves the runtime over stdin/stdout with the protocol of
//! `docs/PROTOCOL.md` until end of input or `shutdown`.

use crate::serve::{FAULT_ENV, FaultSpec, Faults, Server};
use anyhow::{Context, Result};
use clap::Args;
use std::io::{BufReader, BufWriter};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Fault injection for robustness tests (same syntax as POCKETPERF_FAULT; overrides it).
    #[arg(long, hide = true)]
    pub fault: Option<String>,
    /// Keep running when the parent process exits (by default the server dies with it, so a
    /// harness killed with SIGKILL leaves no orphan).
    #[arg(long)]
    pub outlive_parent: bool,
}

/// Dies with the parent process (Linux/Android), unless it is already gone.
fn exit_with_parent() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integer arguments and only changes this
        // process's own death-signal setting.
        let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
        // SAFETY: getppid has no preconditions.
        if rc == 0 && unsafe { libc::getppid() } != parent {
            // The parent died before the setting took effect.
            std::process::exit(0);
        }
    }
}

pub fn serve(a: &ServeArgs) -> Result<i32> {
    let spec = match &a.fault {
        Some(s) => s.clone(),
        None => std::env::var(FAULT_ENV).unwrap_or_default(),
    };
    let spec = FaultSpec::parse(&spec)?;
    if spec.is_active() {
        eprintln!("pocketperf serve: fault injection active: {spec}");
    }
    if !a.outlive_parent {
        exit_with_parent();
    }
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let server = Server::new(
        BufReader::new(stdin.lock()),
        BufWriter::new(stdout.lock()),
        Faults::new(spec),
    );
    server
        .run()
        .context("serve: the client closed the connection")?;
    Ok(0)
}
