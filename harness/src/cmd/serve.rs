//! `pocketperf serve`: serves the runtime over stdin/stdout with the protocol of
//! `docs/PROTOCOL.md` until end of input or `shutdown`; with `--http ADDR`, over an
//! OpenAI-compatible HTTP API (`docs/HTTP.md`, [`crate::http::server`]) until SIGTERM.

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
    /// Serve an OpenAI-compatible HTTP API on this address instead of stdin/stdout
    /// (e.g. 127.0.0.1:8080; port 0 picks a free one, printed on stdout).
    #[arg(long)]
    pub http: Option<std::net::SocketAddr>,
    /// With --http: allow an address other than loopback (the API has no authentication).
    #[arg(long, requires = "http")]
    pub allow_remote: bool,
    /// With --http: sequences decoded together (continuous batching).
    #[arg(long, default_value_t = 8, requires = "http")]
    pub slots: usize,
    /// With --http: tokens per sequence (prompt plus output).
    #[arg(long, default_value_t = 2048, requires = "http")]
    pub ctx: usize,
    /// With --http: largest max_tokens a request may ask for (and its default).
    #[arg(long, default_value_t = 1024, requires = "http")]
    pub max_tokens: usize,
    /// With --http: largest request body, bytes.
    #[arg(long, default_value_t = 1 << 20, requires = "http")]
    pub max_body_bytes: usize,
    /// With --http: seconds a request may take from arrival to its last token.
    #[arg(long, default_value_t = 300, requires = "http")]
    pub request_timeout_s: u64,
    /// With --http: requests waiting for a slot beyond which new ones get 503.
    #[arg(long, default_value_t = 256, requires = "http")]
    pub max_queue: usize,
    /// With --http: seconds requests in flight may run on after SIGTERM before they are
    /// cancelled.
    #[arg(long, default_value_t = 5, requires = "http")]
    pub drain_s: u64,
    /// With --http: keep each slot's KV cache between requests and reuse the longest prefix
    /// a new prompt shares with it (llama-server's prompt cache); off prefills every prompt
    /// whole.
    #[arg(long, value_enum, default_value = "on", requires = "http")]
    pub prefix_reuse: crate::cmd::OnOff,
    #[command(flatten)]
    pub engine: crate::cmd::runtime::EngineArgs,
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

/// `serve --http`: loads the model, binds, prints `listening on http://ADDR` and serves until
/// SIGINT/SIGTERM.
fn serve_http(a: &ServeArgs, addr: std::net::SocketAddr) -> Result<i32> {
    use crate::http::server::{HttpServeConfig, ServedModel, serve};
    if !addr.ip().is_loopback() && !a.allow_remote {
        anyhow::bail!(
            "--http {addr}: not a loopback address; the API has no authentication, so serving \
             beyond this machine needs --allow-remote"
        );
    }
    if a.slots == 0 || a.ctx == 0 || a.max_tokens == 0 || a.max_queue == 0 {
        anyhow::bail!("--slots, --ctx, --max-tokens and --max-queue must be at least 1");
    }
    crate::soak::signal::install().context("installing the SIGTERM handler")?;
    let (engine, path) = a.engine.load()?;
    let model = ServedModel {
        id: crate::meta::model_name_in(engine.model.gguf()),
        sha256: crate::meta::model_sha256(&path),
        file_type: engine
            .model
            .gguf()
            .get_u32("general.file_type")
            .map(|t| t.to_string())
            .unwrap_or_default(),
        path: path.display().to_string(),
    };
    let listener =
        std::net::TcpListener::bind(addr).with_context(|| format!("--http {addr}: cannot bind"))?;
    let local = listener.local_addr()?;
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "pocketperf serve: listening on http://{local}")?;
        out.flush()?;
    }
    eprintln!(
        "serving {} ({} slots of {} tokens, max_tokens {}, prefix reuse {}) on http://{local}",
        model.id,
        a.slots,
        a.ctx,
        a.max_tokens,
        if a.prefix_reuse == crate::cmd::OnOff::On {
            "on"
        } else {
            "off"
        }
    );
    let cfg = HttpServeConfig {
        addr: local,
        slots: a.slots,
        ctx: a.ctx,
        max_tokens_limit: a.max_tokens,
        max_body_bytes: a.max_body_bytes,
        request_timeout: std::time::Duration::from_secs(a.request_timeout_s.max(1)),
        max_queue: a.max_queue,
        drain: std::time::Duration::from_secs(a.drain_s),
        prefix_reuse: a.prefix_reuse == crate::cmd::OnOff::On,
    };
    serve(&engine, listener, cfg, model, || {
        crate::soak::signal::count() > 0
    })?;
    eprintln!("pocketperf serve: stopped");
    Ok(0)
}

pub fn serve(a: &ServeArgs) -> Result<i32> {
    if let Some(addr) = a.http {
        if !a.outlive_parent {
            exit_with_parent();
        }
        return serve_http(a, addr);
    }
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
