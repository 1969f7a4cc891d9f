//! `pocketperf serve` as the scenario engine's system under test (`--sut process`): each
//! query goes to a child process through [`ServeClient`]; a server that crashes or stalls is
//! recorded and restarted for the next query.
//!
//! Timing: tokens are stamped by the server's monotonic clock. A query's stamps are placed on
//! the run's clock by anchoring the server's receive time of the request at the moment the
//! client issued it, so the pipe's transfer time is left out of TTFT and TPOT.

use std::path::Path;
use std::time::Duration;

use pocketperf_scenarios::{Query, Responder, SystemUnderTest};

use crate::serve::client::{ExitInfo, ServeClient, ServeCommand, SutError};
use crate::serve::protocol::{LoadRequest, PromptSpec, QueryRequest};

/// One prompt of a [`ProcessSut`]'s sample library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SutPrompt {
    pub text: String,
    /// Wrap the text in the chat template as one user turn.
    pub chat: bool,
    /// Tokens generated for it (exactly: EOS is ignored, as MLPerf's performance mode does).
    pub max_new_tokens: usize,
}

/// Settings of a [`ProcessSut`].
#[derive(Clone, Debug)]
pub struct ProcessSutConfig {
    pub command: ServeCommand,
    pub load: LoadRequest,
    /// Longest silence tolerated inside a query.
    pub stall_timeout: Duration,
    /// Longest wait for `hello` and `load`.
    pub startup_timeout: Duration,
}

impl ProcessSutConfig {
    /// This binary's `serve` on `model` with `threads` workers; 120 s timeouts.
    pub fn for_model(model: &Path, threads: usize) -> std::io::Result<Self> {
        Ok(ProcessSutConfig {
            command: ServeCommand::this_binary()?,
            load: LoadRequest {
                model: model.display().to_string(),
                threads,
                isa: None,
                ctx: 2048,
                max_batch: 128,
                mlock: false,
                prefault: false,
                copies: true,
                kv_policy: None,
            },
            stall_timeout: Duration::from_secs(120),
            startup_timeout: Duration::from_secs(120),
        })
    }
}

/// A server failure seen by a [`ProcessSut`] (the query is left incomplete; the engine's
/// query timeout then marks the run INVALID).
#[derive(Clone, Debug)]
pub struct SutFailure {
    pub query_id: u64,
    pub error: String,
    pub exit: Option<ExitInfo>,
    pub stderr_tail: Vec<String>,
}

/// `pocketperf serve` as the scenario engine's system under test: each query is a fresh
/// sequence (no cache) of its prompt followed by exactly `max_new_tokens` greedy tokens,
/// stamped by the server. A server that crashes or stalls is recorded and restarted for the
/// next query.
pub struct ProcessSut {
    cfg: ProcessSutConfig,
    prompts: Vec<SutPrompt>,
    client: Option<ServeClient>,
    name: String,
    /// Queries that could not be run, with the reason.
    pub errors: Vec<String>,
    /// Server crashes and stalls.
    pub failures: Vec<SutFailure>,
    /// Servers started (1 + restarts).
    pub starts: u32,
}

impl ProcessSut {
    /// Starts the server and loads the model (failing fast on a bad command or model).
    pub fn start(cfg: ProcessSutConfig, prompts: Vec<SutPrompt>) -> Result<Self, SutError> {
        let name = format!(
            "pocketperf serve (child process: {})",
            cfg.command.display()
        );
        let mut sut = ProcessSut {
            cfg,
            prompts,
            client: None,
            name,
            errors: Vec::new(),
            failures: Vec::new(),
            starts: 0,
        };
        sut.ensure()?;
        Ok(sut)
    }

    fn ensure(&mut self) -> Result<&mut ServeClient, SutError> {
        if self.client.is_none() {
            let mut c = ServeClient::spawn(&self.cfg.command, self.cfg.startup_timeout, None)?;
            c.load(&self.cfg.load, self.cfg.startup_timeout)?;
            self.starts += 1;
            self.client = Some(c);
        }
        // Just set above when it was empty.
        self.client.as_mut().ok_or_else(|| SutError::Protocol {
            op: "start".into(),
            reason: "no server".into(),
        })
    }

    /// The running server, if any.
    pub fn client(&mut self) -> Option<&mut ServeClient> {
        self.client.as_mut()
    }

    /// Stops the server.
    pub fn shutdown(&mut self) {
        if let Some(c) = self.client.take() {
            c.shutdown(Duration::from_secs(10));
        }
    }

    fn run_one(&mut self, q: &Query, responder: &mut Responder<'_>) -> Result<(), SutError> {
        let Some(p) = self.prompts.get(q.sample_index as usize) else {
            self.errors.push(format!(
                "query {}: sample {} is outside the prompt set of {}",
                q.id,
                q.sample_index,
                self.prompts.len()
            ));
            return Ok(());
        };
        let mut req = QueryRequest::new(
            if p.chat {
                PromptSpec::chat(&p.text)
            } else {
                PromptSpec::text(&p.text)
            },
            p.max_new_tokens,
        );
        req.stop_at_eog = false;
        req.cache = false;
        let timeout = self.cfg.stall_timeout;
        let client = self.ensure()?;
        let t_issue = responder.now_ns();
        let out = client.query(&req, timeout, |_| {})?;
        let on_run_clock = |server_ns: u64| t_issue + server_ns.saturating_sub(out.t_recv_ns);
        for &t in &out.token_ns {
            responder.token_at(q.id, on_run_clock(t));
        }
        responder.complete_at(
            q.id,
            on_run_clock(out.t_done_ns),
            out.generated as u64,
            None,
        );
        Ok(())
    }
}

impl SystemUnderTest for ProcessSut {
    fn name(&self) -> &str {
        &self.name
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        for q in queries {
            if let Err(e) = self.run_one(q, responder) {
                let restart = e.needs_restart();
                let (exit, tail) = match &e {
                    SutError::Exited {
                        exit, stderr_tail, ..
                    } => (Some(exit.clone()), stderr_tail.clone()),
                    _ => (None, Vec::new()),
                };
                self.errors.push(format!("query {}: {e}", q.id));
                // Reported failed at once: the engine does not wait out its query timeout
                // for an answer that cannot come (and the run is INVALID, `SutFailed`).
                responder.fail(q.id, &e.to_string());
                if restart {
                    if let Some(mut c) = self.client.take() {
                        c.kill();
                    }
                    self.failures.push(SutFailure {
                        query_id: q.id,
                        error: e.to_string(),
                        exit,
                        stderr_tail: tail,
                    });
                }
            }
        }
    }
}

impl Drop for ProcessSut {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The hook for `pocketperf run --sut process`: the scenario engine's SUT backed by this
/// binary's `serve` on `model`, over `prompts`.
pub fn process_sut(
    model: &Path,
    threads: usize,
    prompts: Vec<SutPrompt>,
) -> Result<ProcessSut, SutError> {
    let cfg = ProcessSutConfig::for_model(model, threads).map_err(|source| SutError::Spawn {
        program: "current executable".into(),
        source,
    })?;
    ProcessSut::start(cfg, prompts)
}
