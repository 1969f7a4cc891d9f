//! The client side of `pocketperf serve`: [`ServeClient`] starts the server as a child process
//! and speaks the protocol of `docs/PROTOCOL.md` with timeouts on every wait, so a crashed or
//! stalled runtime becomes an error value (exit status and stderr tail included), never a hung
//! or crashed harness. [`crate::sut::process::ProcessSut`] puts it behind the scenario
//! engine's SUT trait so any scenario can measure the runtime out of process; the soak drives
//! it directly.
//! Tokens come back stamped by the server's monotonic clock (`t_ns`).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::serve::protocol::{
    ErrorCode, Event, LineRead, LoadRequest, MAX_LINE_BYTES, MemoryStats, PROTOCOL,
    PROTOCOL_VERSION, QueryRequest, Request, ScoreRequest, ScoredContinuation, parse_event,
    read_line_capped,
};

/// Lines of the server's stderr kept for error reports.
pub const STDERR_TAIL_LINES: usize = 40;
const STDERR_LINE_CHARS: usize = 400;

/// How to start the server: a program and its arguments (this binary's `serve` by default; an
/// `adb shell …` line for a device).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServeCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Extra environment for the server.
    #[serde(default)]
    pub env: Vec<(String, String)>,
}

impl ServeCommand {
    /// `<program> serve`.
    pub fn pocketperf(program: impl Into<PathBuf>) -> Self {
        ServeCommand {
            program: program.into(),
            args: vec!["serve".into()],
            env: Vec::new(),
        }
    }

    /// `serve` of the running binary.
    pub fn this_binary() -> std::io::Result<Self> {
        Ok(Self::pocketperf(std::env::current_exe()?))
    }

    /// A command line split at whitespace (no quoting): `adb -s X shell /data/local/tmp/pocketperf serve`.
    pub fn from_command_line(line: &str) -> Option<Self> {
        let mut words = line.split_whitespace().map(str::to_string);
        let program = PathBuf::from(words.next()?);
        Some(ServeCommand {
            program,
            args: words.collect(),
            env: Vec::new(),
        })
    }

    /// The command as one line, for logs.
    pub fn display(&self) -> String {
        let mut s = self.program.display().to_string();
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// How a server process ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// `exit code 2`, `signal 6 (SIGABRT)`, ...
    pub description: String,
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    }
}

impl From<ExitStatus> for ExitInfo {
    fn from(s: ExitStatus) -> Self {
        match (s.code(), s.signal()) {
            (Some(c), _) => ExitInfo {
                code: Some(c),
                signal: None,
                description: format!("exit code {c}"),
            },
            (None, Some(sig)) => ExitInfo {
                code: None,
                signal: Some(sig),
                description: format!(
                    "signal {sig} ({}){}",
                    signal_name(sig),
                    if s.core_dumped() { ", core dumped" } else { "" }
                ),
            },
            (None, None) => ExitInfo {
                code: None,
                signal: None,
                description: "unknown exit status".into(),
            },
        }
    }
}

/// What can go wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum SutError {
    /// The server could not be started.
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// The server process ended (crashed, or exited early).
    #[error("the SUT process ended during `{op}` ({}){}", exit.description, tail_hint(stderr_tail))]
    Exited {
        op: String,
        exit: ExitInfo,
        stderr_tail: Vec<String>,
    },
    /// Nothing arrived for the inactivity timeout.
    #[error("the SUT sent nothing for {waited_s:.1} s during `{op}` (stalled)")]
    Timeout { op: String, waited_s: f64 },
    /// The server refused the request with an `error` event.
    #[error("the SUT refused `{op}` ({code:?}): {message}")]
    Remote {
        op: String,
        code: ErrorCode,
        message: String,
    },
    /// The server wrote something the protocol does not allow.
    #[error("the SUT broke the protocol during `{op}`: {reason}")]
    Protocol { op: String, reason: String },
    /// The caller's abort flag was raised while waiting.
    #[error("interrupted while waiting for the SUT during `{op}`")]
    Interrupted { op: String },
}

fn tail_hint(tail: &[String]) -> String {
    match tail.last() {
        Some(l) => format!("; last stderr line: {l}"),
        None => String::new(),
    }
}

impl SutError {
    /// Whether the process must be restarted before it can serve again (it ended, stalled or
    /// broke the protocol); a refused request leaves it healthy.
    pub fn needs_restart(&self) -> bool {
        !matches!(self, SutError::Remote { .. })
    }
}

/// The `hello` the server sent at start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HelloInfo {
    pub pid: u32,
    pub version: u32,
    pub tool_version: String,
    pub git_commit: String,
    pub fault: Option<String>,
}

/// What `load` reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadedInfo {
    pub name: String,
    pub vocab: usize,
    pub ctx: usize,
    pub threads: usize,
    pub isa: String,
    pub load_ms: f64,
}

/// One streamed token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenInfo {
    pub index: usize,
    pub token: u32,
    pub text: String,
    /// Server clock.
    pub t_ns: u64,
}

/// A finished `query`. Times are on the server's clock.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryOutcome {
    pub prompt_tokens: usize,
    pub reused_tokens: usize,
    pub generated: usize,
    pub stopped_at_eog: bool,
    pub tokens: Vec<u32>,
    pub text: String,
    /// Server stamp of each streamed token (empty without streaming).
    pub token_ns: Vec<u64>,
    pub t_recv_ns: u64,
    pub t_first_ns: Option<u64>,
    pub t_end_ns: u64,
    /// When the `done` event was written.
    pub t_done_ns: u64,
}

impl QueryOutcome {
    /// Time to first token, ns (server side).
    pub fn ttft_ns(&self) -> Option<u64> {
        self.t_first_ns.map(|t| t.saturating_sub(self.t_recv_ns))
    }
    /// Receipt of the request to the last token, ns (server side).
    pub fn latency_ns(&self) -> u64 {
        self.t_end_ns.saturating_sub(self.t_recv_ns)
    }
    /// (latency − TTFT) / (tokens − 1), ns; `None` below two tokens.
    pub fn tpot_ns(&self) -> Option<f64> {
        let ttft = self.ttft_ns()?;
        (self.generated >= 2)
            .then(|| self.latency_ns().saturating_sub(ttft) as f64 / (self.generated - 1) as f64)
    }
}

/// A finished `score`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScoreOutcome {
    pub prompt_tokens: usize,
    pub continuations: Vec<ScoredContinuation>,
    pub t_recv_ns: u64,
    pub t_end_ns: u64,
}

/// What `stats` reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsInfo {
    pub pid: u32,
    pub loaded: bool,
    pub queries: u64,
    pub tokens_generated: u64,
    pub memory: MemoryStats,
    pub uptime_ns: u64,
}

enum Msg {
    Line(String),
    TooLong(usize),
    Eof,
    ReadError(String),
}

#[derive(Default)]
struct StderrState {
    tail: VecDeque<String>,
    done: bool,
}

/// A caller-supplied check, polled while waiting, that aborts the wait when it returns true.
pub type AbortFlag = Arc<dyn Fn() -> bool + Send + Sync>;

/// A running `pocketperf serve` child and the protocol over its pipes.
pub struct ServeClient {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Msg>,
    stderr: Arc<Mutex<StderrState>>,
    next_id: u64,
    hello: HelloInfo,
    exited: Option<ExitInfo>,
    abort: Option<AbortFlag>,
}

impl ServeClient {
    /// Starts the server and waits (at most `startup_timeout`) for its `hello`. Its stderr is
    /// kept as a tail and, when `stderr_log` is given, appended there line by line.
    pub fn spawn(
        cmd: &ServeCommand,
        startup_timeout: Duration,
        stderr_log: Option<Arc<Mutex<File>>>,
    ) -> Result<Self, SutError> {
        ServeClient::spawn_abortable(cmd, startup_timeout, stderr_log, None)
    }

    /// [`ServeClient::spawn`] with `abort` polled while waiting for the `hello` (and kept):
    /// a silent server's wait ends ([`SutError::Interrupted`]) as soon as it returns true.
    pub fn spawn_abortable(
        cmd: &ServeCommand,
        startup_timeout: Duration,
        stderr_log: Option<Arc<Mutex<File>>>,
        abort: Option<AbortFlag>,
    ) -> Result<Self, SutError> {
        let mut c = Command::new(&cmd.program);
        c.args(&cmd.args)
            .envs(cmd.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C at the terminal reaches the harness only, which
            // then ends the server in order.
            .process_group(0);
        let mut child = c.spawn().map_err(|source| SutError::Spawn {
            program: cmd.display(),
            source,
        })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr_pipe = child.stderr.take();
        let (tx, rx) = channel();
        if let Some(out) = stdout {
            let spawned = std::thread::Builder::new()
                .name("pocketperf-sut-stdout".into())
                .spawn(move || {
                    let mut r = BufReader::new(out);
                    loop {
                        let msg = match read_line_capped(&mut r, MAX_LINE_BYTES) {
                            Ok(LineRead::Line(l)) => {
                                Msg::Line(String::from_utf8_lossy(&l).into_owned())
                            }
                            Ok(LineRead::TooLong(n)) => Msg::TooLong(n),
                            Ok(LineRead::Eof) => Msg::Eof,
                            Err(e) => Msg::ReadError(e.to_string()),
                        };
                        let end = matches!(msg, Msg::Eof | Msg::ReadError(_));
                        if tx.send(msg).is_err() || end {
                            return;
                        }
                    }
                });
            if let Err(source) = spawned {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SutError::Spawn {
                    program: cmd.display(),
                    source,
                });
            }
        }
        let stderr = Arc::new(Mutex::new(StderrState::default()));
        if let Some(err) = stderr_pipe {
            let state = stderr.clone();
            let _ = std::thread::Builder::new()
                .name("pocketperf-sut-stderr".into())
                .spawn(move || {
                    let mut r = BufReader::new(err);
                    loop {
                        let line = match read_line_capped(&mut r, MAX_LINE_BYTES) {
                            Ok(LineRead::Line(l)) => String::from_utf8_lossy(&l).into_owned(),
                            Ok(LineRead::TooLong(n)) => format!("<a stderr line of {n} bytes>"),
                            Ok(LineRead::Eof) | Err(_) => break,
                        };
                        if let Some(log) = &stderr_log
                            && let Ok(mut f) = log.lock()
                        {
                            let _ = writeln!(f, "{line}");
                        }
                        let clipped: String = line.chars().take(STDERR_LINE_CHARS).collect();
                        if let Ok(mut s) = state.lock() {
                            if s.tail.len() == STDERR_TAIL_LINES {
                                s.tail.pop_front();
                            }
                            s.tail.push_back(clipped);
                        }
                    }
                    if let Ok(mut s) = state.lock() {
                        s.done = true;
                    }
                });
        }
        let mut client = ServeClient {
            child,
            stdin,
            rx,
            stderr,
            next_id: 1,
            hello: HelloInfo {
                pid: 0,
                version: 0,
                tool_version: String::new(),
                git_commit: String::new(),
                fault: None,
            },
            exited: None,
            abort,
        };
        let hello = client.next_event("hello", startup_timeout);
        match hello.inspect_err(|_| {
            client.kill();
        })? {
            Event::Hello {
                protocol,
                version,
                tool_version,
                git_commit,
                pid,
                fault,
                ..
            } => {
                if protocol != PROTOCOL || version != PROTOCOL_VERSION {
                    client.kill();
                    return Err(SutError::Protocol {
                        op: "hello".into(),
                        reason: format!(
                            "the server speaks {protocol} v{version}; this client speaks {PROTOCOL} v{PROTOCOL_VERSION}"
                        ),
                    });
                }
                client.hello = HelloInfo {
                    pid,
                    version,
                    tool_version,
                    git_commit,
                    fault,
                };
                Ok(client)
            }
            other => {
                client.kill();
                Err(unexpected("hello", &other))
            }
        }
    }

    /// Installs a check polled while waiting; when it returns true the wait ends with
    /// [`SutError::Interrupted`].
    pub fn set_abort(&mut self, abort: AbortFlag) {
        self.abort = Some(abort);
    }

    /// The server's `hello`.
    pub fn hello(&self) -> &HelloInfo {
        &self.hello
    }

    /// The server's process id (as the OS sees it from here).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines the server wrote to stderr.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr
            .lock()
            .map(|s| s.tail.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How the process ended, once it has.
    pub fn exit_info(&self) -> Option<&ExitInfo> {
        self.exited.as_ref()
    }

    fn send(&mut self, op: &str, req: &Request) -> Result<u64, SutError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = req.to_line(id);
        line.push('\n');
        let ok = match self.stdin.as_mut() {
            Some(w) => w.write_all(line.as_bytes()).and_then(|_| w.flush()).is_ok(),
            None => false,
        };
        if !ok {
            return Err(self.ended(op));
        }
        Ok(id)
    }

    /// The process ended (or its stdout closed): waits for its status and stderr, then
    /// builds the error.
    fn ended(&mut self, op: &str) -> SutError {
        let exit = self.reap(Duration::from_secs(2));
        // Let the stderr reader drain what the process wrote last.
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            if self.stderr.lock().map(|s| s.done).unwrap_or(true) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        SutError::Exited {
            op: op.into(),
            exit,
            stderr_tail: self.stderr_tail(),
        }
    }

    /// Waits up to `grace` for the process to exit, then kills it; returns how it ended.
    fn reap(&mut self, grace: Duration) -> ExitInfo {
        if let Some(e) = &self.exited {
            return e.clone();
        }
        self.stdin = None;
        let deadline = Instant::now() + grace;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) | Err(_) => {
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        let info = status.map_or(
            ExitInfo {
                code: None,
                signal: None,
                description: "exit status unavailable".into(),
            },
            ExitInfo::from,
        );
        self.exited = Some(info.clone());
        info
    }

    /// Kills the process (SIGKILL) and returns how it ended.
    pub fn kill(&mut self) -> ExitInfo {
        if self.exited.is_none() {
            let _ = self.child.kill();
        }
        self.reap(Duration::from_secs(5))
    }

    /// The next event, waiting at most `timeout` of silence.
    fn next_event(&mut self, op: &str, timeout: Duration) -> Result<Event, SutError> {
        let started = Instant::now();
        loop {
            if let Some(a) = &self.abort
                && a()
            {
                return Err(SutError::Interrupted { op: op.into() });
            }
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(SutError::Timeout {
                    op: op.into(),
                    waited_s: started.elapsed().as_secs_f64(),
                });
            }
            match self.rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(Msg::Line(l)) => {
                    if l.trim().is_empty() {
                        continue;
                    }
                    return parse_event(&l).map_err(|e| SutError::Protocol {
                        op: op.into(),
                        reason: format!("unreadable event ({e}): {}", clip(&l)),
                    });
                }
                Ok(Msg::TooLong(n)) => {
                    return Err(SutError::Protocol {
                        op: op.into(),
                        reason: format!("an event line of {n} bytes"),
                    });
                }
                Ok(Msg::Eof) | Err(RecvTimeoutError::Disconnected) => return Err(self.ended(op)),
                Ok(Msg::ReadError(e)) => {
                    let _ = self.kill();
                    return Err(SutError::Protocol {
                        op: op.into(),
                        reason: format!("cannot read the server's stdout: {e}"),
                    });
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// The next event answering request `id`.
    fn reply(&mut self, op: &str, id: u64, timeout: Duration) -> Result<Event, SutError> {
        let ev = self.next_event(op, timeout)?;
        if ev.id() != Some(&Value::from(id)) {
            return Err(SutError::Protocol {
                op: op.into(),
                reason: format!(
                    "expected an answer to request {id}, got {}",
                    clip(&serde_json::to_string(&ev).unwrap_or_default())
                ),
            });
        }
        if let Event::Error { code, message, .. } = ev {
            return Err(SutError::Remote {
                op: op.into(),
                code,
                message,
            });
        }
        Ok(ev)
    }

    /// Loads a model.
    pub fn load(&mut self, req: &LoadRequest, timeout: Duration) -> Result<LoadedInfo, SutError> {
        let id = self.send("load", &Request::Load(req.clone()))?;
        match self.reply("load", id, timeout)? {
            Event::Loaded {
                name,
                vocab,
                ctx,
                threads,
                isa,
                load_ms,
                ..
            } => Ok(LoadedInfo {
                name,
                vocab,
                ctx,
                threads,
                isa,
                load_ms,
            }),
            other => Err(unexpected("load", &other)),
        }
    }

    /// Runs a query; `on_token` sees every streamed token as it arrives. `timeout` bounds
    /// each silence (between request and first event, between two events), not the query.
    pub fn query(
        &mut self,
        req: &QueryRequest,
        timeout: Duration,
        mut on_token: impl FnMut(&TokenInfo),
    ) -> Result<QueryOutcome, SutError> {
        let id = self.send("query", &Request::Query(req.clone()))?;
        let mut token_ns = Vec::new();
        loop {
            match self.reply("query", id, timeout)? {
                Event::Token {
                    index,
                    token,
                    text,
                    t_ns,
                    ..
                } => {
                    token_ns.push(t_ns);
                    on_token(&TokenInfo {
                        index,
                        token,
                        text,
                        t_ns,
                    });
                }
                Event::Done {
                    prompt_tokens,
                    reused_tokens,
                    generated,
                    stopped_at_eog,
                    tokens,
                    text,
                    t_recv_ns,
                    t_first_ns,
                    t_end_ns,
                    t_ns,
                    ..
                } => {
                    return Ok(QueryOutcome {
                        prompt_tokens,
                        reused_tokens,
                        generated,
                        stopped_at_eog,
                        tokens,
                        text,
                        token_ns,
                        t_recv_ns,
                        t_first_ns,
                        t_end_ns,
                        t_done_ns: t_ns,
                    });
                }
                other => return Err(unexpected("query", &other)),
            }
        }
    }

    /// Scores continuations after a prompt.
    pub fn score(
        &mut self,
        req: &ScoreRequest,
        timeout: Duration,
    ) -> Result<ScoreOutcome, SutError> {
        let id = self.send("score", &Request::Score(req.clone()))?;
        match self.reply("score", id, timeout)? {
            Event::Scored {
                prompt_tokens,
                mut continuations,
                t_recv_ns,
                t_end_ns,
                ..
            } => {
                // Decimal JSON numbers may parse one unit in the last place off; the bit
                // pattern is exact.
                for c in &mut continuations {
                    match u64::from_str_radix(&c.logprob_bits, 16) {
                        Ok(bits) if c.logprob_bits.len() == 16 => c.logprob = f64::from_bits(bits),
                        _ => {
                            return Err(SutError::Protocol {
                                op: "score".into(),
                                reason: format!(
                                    "logprob_bits `{}` is not 16 hex digits",
                                    clip(&c.logprob_bits)
                                ),
                            });
                        }
                    }
                }
                Ok(ScoreOutcome {
                    prompt_tokens,
                    continuations,
                    t_recv_ns,
                    t_end_ns,
                })
            }
            other => Err(unexpected("score", &other)),
        }
    }

    /// The server's counters and memory.
    pub fn stats(&mut self, timeout: Duration) -> Result<StatsInfo, SutError> {
        let id = self.send("stats", &Request::Stats)?;
        match self.reply("stats", id, timeout)? {
            Event::Stats {
                pid,
                loaded,
                queries,
                tokens_generated,
                memory,
                uptime_ns,
                ..
            } => Ok(StatsInfo {
                pid,
                loaded,
                queries,
                tokens_generated,
                memory,
                uptime_ns,
            }),
            other => Err(unexpected("stats", &other)),
        }
    }

    /// Asks the server to exit and waits for it (killing it after `timeout`).
    pub fn shutdown(mut self, timeout: Duration) -> ExitInfo {
        if let Ok(id) = self.send("shutdown", &Request::Shutdown) {
            let _ = self.reply("shutdown", id, timeout);
        }
        self.reap(timeout)
    }
}

impl Drop for ServeClient {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn clip(s: &str) -> String {
    let c: String = s.chars().take(200).collect();
    if c.len() < s.len() { c + "…" } else { c }
}

fn unexpected(op: &str, ev: &Event) -> SutError {
    SutError::Protocol {
        op: op.into(),
        reason: format!(
            "unexpected event {}",
            clip(&serde_json::to_string(ev).unwrap_or_default())
        ),
    }
}

/// Signal-safe flag helper: an [`AbortFlag`] over an `AtomicBool`.
pub fn abort_on(flag: Arc<AtomicBool>) -> AbortFlag {
    Arc::new(move || flag.load(Ordering::SeqCst))
}
