//! The serving loop of `pocketperf serve`: reads request lines, runs them on the runtime and
//! writes events (`docs/PROTOCOL.md`). A malformed or failing request is answered with an
//! `error` event and the loop goes on; only end of input, `shutdown`, a closed output or an
//! injected fault end it.

use std::io::{self, BufRead, Write};
use std::path::Path;
use std::time::Instant;

use pocketperf_runtime::kv::KvPolicy;
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::quant::{self, Isa};
use pocketperf_runtime::session::{Engine, GenerateOptions, SamplingParams, Session, log_prob};
use pocketperf_runtime::tokenizer::{ChatMessage, StreamDecoder};
use serde_json::Value;

use super::fault::Faults;
use super::protocol::{
    ErrorCode, Event, LoadRequest, MAX_CONTINUATIONS, MAX_LINE_BYTES, MemoryStats, PROTOCOL,
    PROTOCOL_VERSION, PromptSpec, QueryRequest, Refusal, Request, ScoreRequest, ScoredContinuation,
    parse_request,
};
use super::protocol::{LineRead, read_line_capped};
use crate::meta;
use crate::sut::prompts::{PromptText, encode_prompt, reusable_prefix};

/// Memory of this process: `/proc/self/statm` for resident and virtual size, `/proc/self/status`
/// for the anonymous/file split and the peak, `getrusage` for page faults. Missing figures
/// are 0.
pub fn memory_stats() -> MemoryStats {
    let mut m = MemoryStats::default();
    // SAFETY: sysconf only reads a configuration value; it has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page_kib = if page > 0 { page as u64 / 1024 } else { 4 };
    if let Ok(s) = std::fs::read_to_string("/proc/self/statm") {
        let mut f = s.split_whitespace().map(|x| x.parse::<u64>().unwrap_or(0));
        m.vm_size_kib = f.next().unwrap_or(0) * page_kib;
        m.rss_kib = f.next().unwrap_or(0) * page_kib;
    }
    if let Ok(s) = std::fs::read_to_string("/proc/self/status") {
        for line in s.lines() {
            let mut it = line.split_whitespace();
            let (Some(key), Some(v)) = (it.next(), it.next()) else {
                continue;
            };
            let v = v.parse::<u64>().unwrap_or(0);
            match key {
                "RssAnon:" => m.rss_anon_kib = v,
                "RssFile:" => m.rss_file_kib = v,
                "VmHWM:" => m.vm_hwm_kib = v,
                _ => {}
            }
        }
    }
    if let Some(f) = crate::telemetry::faults::self_faults() {
        m.minor_faults = f.minor;
        m.major_faults = f.major;
    }
    m
}

/// A loaded model and its one sequence.
struct Loaded<'e> {
    engine: &'e Engine,
    session: Session<'e>,
    /// Tokens whose KV the session holds, in order (for prefix reuse).
    history: Vec<u32>,
    ctx: usize,
    /// The ring slides instead of refusing a query that outgrows `ctx`.
    sliding: bool,
}

enum Next {
    Load(Option<Value>, LoadRequest, u64),
    Stop,
}

/// The server: its clock, counters and fault state, over any input and output.
pub struct Server<R, W> {
    input: R,
    out: W,
    origin: Instant,
    faults: Faults,
    served: u64,
    tokens_generated: u64,
}

/// A request failure to report: code and message.
type Fail = (ErrorCode, String);

impl<R: BufRead, W: Write> Server<R, W> {
    pub fn new(input: R, out: W, faults: Faults) -> Self {
        Server {
            input,
            out,
            origin: Instant::now(),
            faults,
            served: 0,
            tokens_generated: 0,
        }
    }

    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn emit(&mut self, e: &Event) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, e).map_err(io::Error::other)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    fn error(&mut self, id: Option<Value>, code: ErrorCode, message: String) -> io::Result<()> {
        let t_ns = self.now_ns();
        self.emit(&Event::Error {
            id,
            code,
            message,
            t_ns,
        })
    }

    fn hello(&mut self, id: Option<Value>) -> io::Result<()> {
        let t_ns = self.now_ns();
        let fault = self.faults.announce();
        self.emit(&Event::Hello {
            id,
            protocol: PROTOCOL.into(),
            version: PROTOCOL_VERSION,
            tool_version: meta::TOOL_VERSION.into(),
            git_commit: meta::GIT_COMMIT.into(),
            pid: std::process::id(),
            fault,
            t_ns,
        })
    }

    /// Runs until end of input or `shutdown`. Errors only when the output cannot be written
    /// or the input cannot be read.
    pub fn run(mut self) -> io::Result<()> {
        self.hello(None)?;
        let mut pending: Option<(Option<Value>, LoadRequest, u64)> = None;
        loop {
            let next = match pending.take() {
                None => self.serve(None)?,
                Some((id, req, t_recv)) => match load_engine(&req) {
                    Err((code, msg)) => {
                        self.error(id, code, msg)?;
                        self.serve(None)?
                    }
                    Ok(engine) => {
                        let load_ms = self.now_ns().saturating_sub(t_recv) as f64 / 1e6;
                        match self.start_loaded(&engine, id, &req, load_ms)? {
                            None => self.serve(None)?,
                            Some(mut loaded) => self.serve(Some(&mut loaded))?,
                        }
                    }
                },
            };
            match next {
                Next::Stop => return Ok(()),
                Next::Load(id, req, t) => pending = Some((id, req, t)),
            }
        }
    }

    fn start_loaded<'e>(
        &mut self,
        engine: &'e Engine,
        id: Option<Value>,
        req: &LoadRequest,
        load_ms: f64,
    ) -> io::Result<Option<Loaded<'e>>> {
        let model_ctx = engine.model.config().context_length;
        let ctx = req.ctx.min(model_ctx);
        let kv_policy = match req
            .kv_policy
            .as_deref()
            .map(str::parse::<KvPolicy>)
            .transpose()
        {
            Ok(p) => p.unwrap_or(KvPolicy::Error),
            Err(e) => {
                self.error(id, ErrorCode::BadRequest, format!("load: kv_policy: {e}"))?;
                return Ok(None);
            }
        };
        let session = match engine.session(SessionOptions {
            max_seq_len: ctx,
            max_batch: req.max_batch.clamp(1, ctx),
            kv_policy,
            ..Default::default()
        }) {
            Ok(s) => s,
            Err(e) => {
                self.error(id, ErrorCode::LoadFailed, format!("{}: {e}", req.model))?;
                return Ok(None);
            }
        };
        let t_ns = self.now_ns();
        self.emit(&Event::Loaded {
            id,
            model: req.model.clone(),
            name: engine
                .model
                .gguf()
                .get_str("general.name")
                .unwrap_or("unknown")
                .to_string(),
            vocab: engine.tokenizer.vocab_size(),
            ctx,
            threads: engine.threads(),
            isa: engine.isa().name().into(),
            load_ms,
            t_ns,
        })?;
        Ok(Some(Loaded {
            engine,
            session,
            history: Vec::new(),
            ctx,
            sliding: matches!(kv_policy, KvPolicy::Sliding { .. }),
        }))
    }

    /// Reads and answers requests until one needs a (re)load or the stream ends.
    fn serve(&mut self, mut loaded: Option<&mut Loaded<'_>>) -> io::Result<Next> {
        loop {
            let line = match read_line_capped(&mut self.input, MAX_LINE_BYTES)? {
                LineRead::Eof => return Ok(Next::Stop),
                LineRead::TooLong(n) => {
                    self.error(
                        None,
                        ErrorCode::LineTooLong,
                        format!("request line of {n} bytes exceeds the limit of {MAX_LINE_BYTES}"),
                    )?;
                    continue;
                }
                LineRead::Line(l) => l,
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let t_recv = self.now_ns();
            let (id, req) = match parse_request(&line) {
                Ok(x) => x,
                Err(Refusal { id, code, message }) => {
                    self.error(id, code, message)?;
                    continue;
                }
            };
            match req {
                Request::Hello => self.hello(id)?,
                Request::Load(r) => return Ok(Next::Load(id, r, t_recv)),
                Request::Shutdown => {
                    let t_ns = self.now_ns();
                    self.emit(&Event::Bye { id, t_ns })?;
                    return Ok(Next::Stop);
                }
                Request::Stats if self.faults.refuse_stats_now(self.served) => {
                    self.error(
                        id,
                        ErrorCode::Runtime,
                        "fault injection: stats refused (refuse_stats_after)".into(),
                    )?;
                }
                Request::Stats => {
                    let t_ns = self.now_ns();
                    let ev = Event::Stats {
                        id,
                        pid: std::process::id(),
                        loaded: loaded.is_some(),
                        queries: self.served,
                        tokens_generated: self.tokens_generated,
                        memory: memory_stats(),
                        rss_source: "/proc/self/statm".into(),
                        uptime_ns: t_ns,
                        t_ns,
                    };
                    self.emit(&ev)?;
                }
                Request::Query(q) => match loaded.as_deref_mut() {
                    None => self.not_loaded(id, "query")?,
                    Some(l) => {
                        if let Err((code, msg)) = self.query(l, &id, &q, t_recv)? {
                            self.error(id, code, msg)?;
                        }
                    }
                },
                Request::Score(s) => match loaded.as_deref_mut() {
                    None => self.not_loaded(id, "score")?,
                    Some(l) => {
                        if let Err((code, msg)) = self.score(l, &id, &s, t_recv)? {
                            self.error(id, code, msg)?;
                        }
                    }
                },
            }
        }
    }

    fn not_loaded(&mut self, id: Option<Value>, op: &str) -> io::Result<()> {
        self.error(
            id,
            ErrorCode::NotLoaded,
            format!("{op} before a model is loaded: send {{\"op\":\"load\",\"model\":PATH}} first"),
        )
    }

    fn query(
        &mut self,
        l: &mut Loaded<'_>,
        id: &Option<Value>,
        q: &QueryRequest,
        t_recv: u64,
    ) -> io::Result<Result<(), Fail>> {
        if q.max_new_tokens == 0 {
            return Ok(Err(bad("query: max_new_tokens must be at least 1")));
        }
        if !(q.temperature.is_finite() && q.temperature >= 0.0) {
            return Ok(Err(bad(&format!(
                "query: temperature {} must be a finite number ≥ 0",
                q.temperature
            ))));
        }
        if !(q.top_p > 0.0 && q.top_p <= 1.0) {
            return Ok(Err(bad(&format!(
                "query: top_p {} must be in (0, 1]",
                q.top_p
            ))));
        }
        let tokens = match prompt_tokens(l, &q.prompt_spec(), "query") {
            Ok(t) => t,
            Err(f) => return Ok(Err(f)),
        };
        if l.sliding && tokens.len() >= l.ctx {
            return Ok(Err((
                ErrorCode::TooLong,
                format!(
                    "query: prompt of {} tokens does not fit the context of {} (a sliding ring still needs the whole prompt)",
                    tokens.len(),
                    l.ctx
                ),
            )));
        }
        if !l.sliding && tokens.len().saturating_add(q.max_new_tokens) > l.ctx {
            return Ok(Err((
                ErrorCode::TooLong,
                format!(
                    "query: prompt of {} tokens plus {} new tokens exceeds the context of {}",
                    tokens.len(),
                    q.max_new_tokens,
                    l.ctx
                ),
            )));
        }
        let served = self.served;
        self.faults.maybe_stall(served);
        let crash = self.faults.crash_now(served);
        let flip = self.faults.flip_now(served);
        let reuse = if q.cache {
            reusable_prefix(&l.history, &tokens)
        } else {
            0
        };
        let reset = if reuse == 0 {
            l.session.reset();
            Ok(())
        } else {
            l.session.truncate(reuse)
        };
        l.history.clear();
        if let Err(e) = reset {
            l.session.reset();
            return Ok(Err((ErrorCode::Runtime, format!("query: {e}"))));
        }
        let opts = GenerateOptions {
            max_new_tokens: q.max_new_tokens,
            stop_at_eog: q.stop_at_eog,
            sampling: SamplingParams {
                temperature: q.temperature,
                top_p: q.top_p,
                seed: q.seed,
            },
        };
        let engine = l.engine;
        let vocab = engine.tokenizer.vocab_size().max(1) as u32;
        let mut dec = StreamDecoder::new();
        let mut text = String::new();
        let mut shown: Vec<u32> = Vec::with_capacity(q.max_new_tokens);
        let mut real: Vec<u32> = Vec::with_capacity(q.max_new_tokens);
        let mut t_first = None;
        let mut t_last = t_recv;
        let mut write_err: Option<io::Error> = None;
        let origin = self.origin;
        let out = &mut self.out;
        let faults = &self.faults;
        let result = l.session.generate(&tokens[reuse..], &opts, |i, tok| {
            let t_ns = origin.elapsed().as_nanos() as u64;
            t_first.get_or_insert(t_ns);
            t_last = t_ns;
            let tok_out = if flip && i == 0 {
                (tok + 1) % vocab
            } else {
                tok
            };
            real.push(tok);
            shown.push(tok_out);
            let piece = dec.push(&engine.tokenizer, tok_out);
            text.push_str(&piece);
            if q.stream && write_err.is_none() {
                let ev = Event::Token {
                    id: id.clone(),
                    index: i,
                    token: tok_out,
                    text: piece,
                    t_ns,
                };
                let r = serde_json::to_writer(&mut *out, &ev)
                    .map_err(io::Error::other)
                    .and_then(|_| out.write_all(b"\n"))
                    .and_then(|_| out.flush());
                if let Err(e) = r {
                    write_err = Some(e);
                }
            }
            if crash {
                let _ = out.flush();
                faults.crash(served);
            }
        });
        if let Some(e) = write_err {
            return Err(e);
        }
        let stats = match result {
            Ok(s) => s,
            Err(e) => {
                l.session.reset();
                let code = match e {
                    pocketperf_runtime::Error::ContextOverflow { .. } => ErrorCode::TooLong,
                    _ => ErrorCode::Runtime,
                };
                return Ok(Err((code, format!("query: {e}"))));
            }
        };
        text.push_str(&dec.finish());
        // The session holds the prompt and every generated token but the last, unless the
        // ring slid over some of them: then no prefix of it is a prefix of the history, and
        // the next query starts afresh.
        let held = tokens.len() + real.len().saturating_sub(1);
        if held <= l.ctx {
            l.history = tokens.clone();
            l.history
                .extend_from_slice(&real[..real.len().saturating_sub(1)]);
        }
        self.served += 1;
        self.tokens_generated += stats.generated as u64;
        self.faults.leak();
        let t_ns = self.now_ns();
        self.emit(&Event::Done {
            id: id.clone(),
            prompt_tokens: tokens.len(),
            reused_tokens: reuse,
            generated: stats.generated,
            stopped_at_eog: stats.stopped_at_eog,
            tokens: shown,
            text,
            t_recv_ns: t_recv,
            t_first_ns: t_first,
            t_end_ns: t_last,
            t_ns,
        })?;
        Ok(Ok(()))
    }

    fn score(
        &mut self,
        l: &mut Loaded<'_>,
        id: &Option<Value>,
        s: &ScoreRequest,
        t_recv: u64,
    ) -> io::Result<Result<(), Fail>> {
        if s.continuations.is_empty() || s.continuations.len() > MAX_CONTINUATIONS {
            return Ok(Err(bad(&format!(
                "score: continuations must hold 1 to {MAX_CONTINUATIONS} strings, got {}",
                s.continuations.len()
            ))));
        }
        let tokens = match prompt_tokens(l, &s.prompt_spec(), "score") {
            Ok(t) => t,
            Err(f) => return Ok(Err(f)),
        };
        let mut conts = Vec::with_capacity(s.continuations.len());
        for (i, c) in s.continuations.iter().enumerate() {
            match l.engine.tokenizer.encode(c, false) {
                Ok(ids) if !ids.is_empty() => conts.push(ids),
                Ok(_) => {
                    return Ok(Err(bad(&format!(
                        "score: continuation {i} ({c:?}) has no tokens"
                    ))));
                }
                Err(e) => return Ok(Err((ErrorCode::Runtime, format!("score: {e}")))),
            }
        }
        let longest = conts.iter().map(Vec::len).max().unwrap_or(0);
        if tokens.len() + longest > l.ctx {
            return Ok(Err((
                ErrorCode::TooLong,
                format!(
                    "score: prompt of {} tokens plus a continuation of {longest} exceeds the context of {}",
                    tokens.len(),
                    l.ctx
                ),
            )));
        }
        let served = self.served;
        self.faults.maybe_stall(served);
        if self.faults.crash_now(served) {
            self.faults.crash(served);
        }
        l.session.reset();
        l.history.clear();
        let scored = match score_continuations(&mut l.session, &tokens, &conts) {
            Ok(x) => x,
            Err(e) => {
                l.session.reset();
                return Ok(Err((ErrorCode::Runtime, format!("score: {e}"))));
            }
        };
        l.history = tokens.clone();
        let mut out: Vec<ScoredContinuation> = conts
            .into_iter()
            .zip(scored)
            .map(|(tokens, lp)| ScoredContinuation {
                tokens,
                logprob: lp,
                logprob_bits: format!("{:016x}", lp.to_bits()),
            })
            .collect();
        if self.faults.flip_now(served)
            && let Some(first) = out.first_mut()
        {
            // One unit in the last place: invisible to the eye, not to a bit-exact check.
            let v = f64::from_bits(first.logprob.to_bits() ^ 1);
            first.logprob = v;
            first.logprob_bits = format!("{:016x}", v.to_bits());
        }
        self.served += 1;
        self.faults.leak();
        let t_end = self.now_ns();
        self.emit(&Event::Scored {
            id: id.clone(),
            prompt_tokens: tokens.len(),
            continuations: out,
            t_recv_ns: t_recv,
            t_end_ns: t_end,
            t_ns: t_end,
        })?;
        Ok(Ok(()))
    }
}

fn bad(msg: &str) -> Fail {
    (ErrorCode::BadRequest, msg.to_string())
}

/// Log-probability (natural log, f64) of each continuation after `prompt`, from an empty
/// session: the prompt is prefilled once; a continuation of several tokens is fed token by
/// token and the cache is rewound to the prompt after it.
pub fn score_continuations(
    session: &mut Session<'_>,
    prompt: &[u32],
    conts: &[Vec<u32>],
) -> pocketperf_runtime::Result<Vec<f64>> {
    let after_prompt = session.prefill(prompt)?.to_vec();
    let mut out = Vec::with_capacity(conts.len());
    for c in conts {
        let mut lp = 0.0f64;
        for (j, &tok) in c.iter().enumerate() {
            lp += if j == 0 {
                log_prob(&after_prompt, tok)
            } else {
                log_prob(session.decode(c[j - 1])?, tok)
            };
        }
        if c.len() > 1 {
            session.truncate(prompt.len())?;
        }
        out.push(lp);
    }
    Ok(out)
}

/// Token ids of a prompt: raw text gets the model's BOS (when it adds one) and special-token
/// parsing, like `pocketperf generate`; chat prompts are rendered in the model's template with
/// its default system prompt and end with the assistant header.
fn prompt_tokens(l: &Loaded<'_>, p: &PromptSpec, op: &str) -> Result<Vec<u32>, Fail> {
    let tk = &l.engine.tokenizer;
    let text = match (&p.prompt, &p.messages) {
        (Some(_), Some(_)) => {
            return Err(bad(&format!("{op}: give `prompt` or `messages`, not both")));
        }
        (None, None) => return Err(bad(&format!("{op}: give `prompt` or `messages`"))),
        (None, Some(_)) if p.chat => {
            return Err(bad(&format!(
                "{op}: `chat` applies to `prompt`; `messages` are always rendered as a chat"
            )));
        }
        (Some(text), None) if !p.chat => {
            let ids = encode_prompt(
                tk,
                PromptText::Raw {
                    text,
                    special: true,
                },
            )
            .map_err(|e| (ErrorCode::Runtime, format!("{op}: {e}")))?;
            return non_empty(ids, op);
        }
        (Some(text), None) => vec![ChatMessage::new("user", text)],
        (None, Some(msgs)) => {
            if msgs.is_empty() {
                return Err(bad(&format!("{op}: `messages` is empty")));
            }
            let mut v = Vec::with_capacity(msgs.len());
            for (i, m) in msgs.iter().enumerate() {
                if !matches!(m.role.as_str(), "system" | "user" | "assistant") {
                    return Err(bad(&format!(
                        "{op}: messages[{i}].role `{}` is not system, user or assistant",
                        m.role
                    )));
                }
                v.push(ChatMessage::new(&m.role, &m.content));
            }
            v
        }
    };
    let ids = encode_prompt(tk, PromptText::Chat { messages: &text })
        .map_err(|e| (ErrorCode::Runtime, format!("{op}: {e}")))?;
    non_empty(ids, op)
}

fn non_empty(ids: Vec<u32>, op: &str) -> Result<Vec<u32>, Fail> {
    if ids.is_empty() {
        Err(bad(&format!("{op}: the prompt has no tokens")))
    } else {
        Ok(ids)
    }
}

fn load_engine(req: &LoadRequest) -> Result<Engine, Fail> {
    if req.ctx == 0 {
        return Err(bad("load: ctx must be at least 1"));
    }
    if req.threads > 1024 {
        return Err(bad(&format!(
            "load: threads {} is more than 1024",
            req.threads
        )));
    }
    let isa = match req.isa.as_deref() {
        None | Some("auto") => quant::isa_from_env(),
        Some(name) => name.parse::<Isa>().and_then(|i| {
            if quant::supported(i) {
                Ok(i)
            } else {
                Err(pocketperf_runtime::Error::Isa {
                    requested: name.into(),
                    reason: "not supported by this CPU".into(),
                })
            }
        }),
    }
    .map_err(|e| (ErrorCode::BadRequest, format!("load: isa: {e}")))?;
    let path = Path::new(&req.model);
    let opts = pocketperf_runtime::residency::LoadOptions {
        mlock: req.mlock,
        prefault: req.prefault,
    };
    let engine = Engine::load_with(path, req.threads, isa, &opts).map_err(|e| {
        let msg = e.to_string();
        let msg = if msg.contains(&req.model) {
            msg
        } else {
            format!("{}: {msg}", req.model)
        };
        (ErrorCode::LoadFailed, format!("load: {msg}"))
    })?;
    Ok(if req.copies {
        engine
    } else {
        engine.without_copies()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_without_a_model_get_errors_and_the_loop_goes_on() {
        let input = b"not json\n{\"op\":\"query\",\"id\":1,\"prompt\":\"x\",\"max_new_tokens\":1}\n\n{\"op\":\"stats\",\"id\":2}\n{\"op\":\"load\",\"id\":3,\"model\":\"/nonexistent.gguf\"}\n{\"op\":\"shutdown\",\"id\":4}\n{\"op\":\"stats\"}\n";
        let mut out = Vec::new();
        Server::new(&input[..], &mut out, Faults::default())
            .run()
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let events: Vec<Event> = text
            .lines()
            .map(|l| super::super::protocol::parse_event(l).unwrap())
            .collect();
        assert!(matches!(events[0], Event::Hello { version: 1, .. }));
        assert!(matches!(
            events[1],
            Event::Error {
                code: ErrorCode::BadJson,
                id: None,
                ..
            }
        ));
        assert!(matches!(
            &events[2],
            Event::Error { code: ErrorCode::NotLoaded, id: Some(v), .. } if v == 1
        ));
        assert!(matches!(
            &events[3],
            Event::Stats { loaded: false, queries: 0, memory, .. } if memory.rss_kib > 0
        ));
        match &events[4] {
            Event::Error { code, message, .. } => {
                assert_eq!(*code, ErrorCode::LoadFailed);
                assert!(message.contains("/nonexistent.gguf"), "{message}");
            }
            e => panic!("{e:?}"),
        }
        assert!(matches!(&events[5], Event::Bye { id: Some(v), .. } if v == 4));
        // Nothing is read after shutdown.
        assert_eq!(events.len(), 6);
        let t: Vec<u64> = events.iter().map(Event::t_ns).collect();
        assert!(t.windows(2).all(|w| w[0] <= w[1]), "{t:?}");
    }

    #[test]
    fn memory_stats_read_this_process() {
        let m = memory_stats();
        assert!(m.rss_kib > 0 && m.vm_size_kib >= m.rss_kib, "{m:?}");
        assert!(m.vm_hwm_kib >= m.rss_anon_kib);
    }
}
