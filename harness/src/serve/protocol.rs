//! The `pocketperf serve` wire protocol, version 1 (`docs/PROTOCOL.md`): newline-delimited
//! JSON, one request per line on the server's stdin, one event per line on its stdout.
//!
//! A request is an object `{"op": ..., "id": ..., "v": 1, ...fields}`: `op` names the
//! operation, `id` (any JSON scalar, optional) is echoed in every event the request causes,
//! `v` (optional) must equal [`PROTOCOL_VERSION`]. Unknown fields are errors, never ignored,
//! and so is a key given twice.
//! Every event carries `event`, `id` and `t_ns`, the server's monotonic clock (nanoseconds
//! since the server started). The types here are shared by the server and the client, so
//! both sides agree on every field by construction, and so is the line framing
//! ([`read_line_capped`]): a line over the cap is skipped whole, never split.

use std::io::{self, BufRead};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Protocol name announced in the `hello` event.
pub const PROTOCOL: &str = "pocketperf-serve";
/// The version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Longest request line accepted (bytes, without the newline).
pub const MAX_LINE_BYTES: usize = 16 << 20;
/// Most continuations one `score` request may ask for.
pub const MAX_CONTINUATIONS: usize = 64;
/// The operations of version 1.
pub const OPS: [&str; 6] = ["hello", "load", "query", "score", "stats", "shutdown"];

fn default_ctx() -> usize {
    2048
}
fn default_batch() -> usize {
    64
}
fn default_true() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
}
fn default_top_p() -> f32 {
    1.0
}

/// `load`: map a GGUF model and start its worker threads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadRequest {
    /// Path of the GGUF file on the serving side.
    pub model: String,
    /// Worker threads; 0 = every core.
    #[serde(default)]
    pub threads: usize,
    /// Kernel tier (`scalar`, `avx2`, `avx512`, `neon`); absent or `auto` = the best this CPU
    /// runs (or `POCKETPERF_ISA` of the server's environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isa: Option<String>,
    /// KV ring size in tokens (capped by the model's context length).
    #[serde(default = "default_ctx")]
    pub ctx: usize,
    /// Largest prefill chunk in tokens.
    #[serde(default = "default_batch")]
    pub max_batch: usize,
    /// Lock the model's mapping in memory (`--mlock`; `pocketperf_runtime::residency`).
    #[serde(default)]
    pub mlock: bool,
    /// Read every page of the model in before answering (`--prefault`).
    #[serde(default)]
    pub prefault: bool,
    /// Make the CPU kernels' copies of weight matrices (the repacked layouts the kernels read
    /// fastest; `pocketperf_runtime::model::weights`). `false`: every matrix is read from the
    /// mapping in the file's layout, the same bits, so a query after the file was evicted
    /// reads its weights from the file (`run --cold-start --sut process`).
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub copies: bool,
    /// What the KV ring does when a query outgrows `ctx`: `error` (absent: the query is
    /// refused with `too_long`), `sliding` or `sliding:N` (keep N attention-sink tokens,
    /// default 4, and overwrite the oldest of the rest; the prompt itself must still fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_policy: Option<String>,
}

/// One chat turn of a `messages` prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

/// The prompt of a `query` or `score` request: raw text (`prompt`, optionally wrapped as one
/// user turn with `chat`) or a conversation (`messages`, rendered with the model's chat
/// template and its default system prompt, ending with the assistant header). Exactly one of
/// `prompt` and `messages` is given. (The fields sit in the request objects themselves; serde
/// cannot flatten into a struct that refuses unknown fields.)
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PromptSpec {
    pub prompt: Option<String>,
    pub messages: Option<Vec<Message>>,
    pub chat: bool,
}

impl PromptSpec {
    /// Raw text.
    pub fn text(text: &str) -> Self {
        PromptSpec {
            prompt: Some(text.to_string()),
            ..Default::default()
        }
    }
    /// Raw text as one user turn of the chat template.
    pub fn chat(text: &str) -> Self {
        PromptSpec {
            prompt: Some(text.to_string()),
            messages: None,
            chat: true,
        }
    }
    /// A conversation.
    pub fn messages(messages: Vec<Message>) -> Self {
        PromptSpec {
            prompt: None,
            messages: Some(messages),
            chat: false,
        }
    }
}

/// `query`: generate tokens after a prompt, streaming a `token` event per token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    /// With `prompt`: wrap it in the chat template as a user turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chat: bool,
    /// Tokens to generate at most (at least 1).
    pub max_new_tokens: usize,
    /// Stop at an end-of-generation token (false: generate exactly `max_new_tokens`).
    #[serde(default = "default_true")]
    pub stop_at_eog: bool,
    /// 0 = greedy.
    #[serde(default)]
    pub temperature: f32,
    #[serde(default = "default_top_p")]
    pub top_p: f32,
    #[serde(default)]
    pub seed: u64,
    /// Reuse the KV of the longest common token prefix with the previous sequence (multi-turn
    /// chats); false starts from an empty cache, which makes the result independent of what
    /// ran before.
    #[serde(default = "default_true")]
    pub cache: bool,
    /// Send a `token` event per token (false: only `done`).
    #[serde(default = "default_true")]
    pub stream: bool,
}

impl QueryRequest {
    /// A greedy request for `max_new_tokens` after `prompt`, streaming, cache on.
    pub fn new(prompt: PromptSpec, max_new_tokens: usize) -> Self {
        QueryRequest {
            prompt: prompt.prompt,
            messages: prompt.messages,
            chat: prompt.chat,
            max_new_tokens,
            stop_at_eog: true,
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
            cache: true,
            stream: true,
        }
    }

    /// The prompt fields.
    pub fn prompt_spec(&self) -> PromptSpec {
        PromptSpec {
            prompt: self.prompt.clone(),
            messages: self.messages.clone(),
            chat: self.chat,
        }
    }
}

/// `score`: log-probabilities of continuations after a prompt (MMLU-style probes). Always
/// computed from an empty cache.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    /// With `prompt`: wrap it in the chat template as a user turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chat: bool,
    /// Continuation texts, tokenized on their own (no BOS) and appended to the prompt's tokens.
    pub continuations: Vec<String>,
}

impl ScoreRequest {
    /// A request for `continuations` after `prompt`.
    pub fn new(prompt: PromptSpec, continuations: Vec<String>) -> Self {
        ScoreRequest {
            prompt: prompt.prompt,
            messages: prompt.messages,
            chat: prompt.chat,
            continuations,
        }
    }

    /// The prompt fields.
    pub fn prompt_spec(&self) -> PromptSpec {
        PromptSpec {
            prompt: self.prompt.clone(),
            messages: self.messages.clone(),
            chat: self.chat,
        }
    }
}

/// Every request of version 1.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    Hello,
    Load(LoadRequest),
    Query(QueryRequest),
    Score(ScoreRequest),
    Stats,
    Shutdown,
}

impl Request {
    /// The `op` name.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Hello => "hello",
            Request::Load(_) => "load",
            Request::Query(_) => "query",
            Request::Score(_) => "score",
            Request::Stats => "stats",
            Request::Shutdown => "shutdown",
        }
    }

    /// The request as one protocol line (without the newline).
    pub fn to_line(&self, id: u64) -> String {
        let body = match self {
            Request::Load(r) => serde_json::to_value(r),
            Request::Query(r) => serde_json::to_value(r),
            Request::Score(r) => serde_json::to_value(r),
            Request::Hello | Request::Stats | Request::Shutdown => Ok(Value::Object(Map::new())),
        };
        // These types serialize to objects with string keys: infallible in practice.
        let mut map = match body {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        map.insert("op".into(), Value::from(self.op()));
        map.insert("id".into(), Value::from(id));
        map.insert("v".into(), Value::from(PROTOCOL_VERSION));
        Value::Object(map).to_string()
    }
}

/// Machine-readable cause of an `error` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The line is not JSON, or not a JSON object.
    BadJson,
    /// The line is not UTF-8.
    NotUtf8,
    /// The line is longer than [`MAX_LINE_BYTES`].
    LineTooLong,
    /// `v` names a version this server does not speak.
    UnsupportedVersion,
    /// `op` is missing or unknown.
    UnknownOp,
    /// A field is missing, unknown, of the wrong type or out of range.
    BadRequest,
    /// `query`/`score` before a successful `load`.
    NotLoaded,
    /// The model could not be loaded.
    LoadFailed,
    /// The prompt and the tokens to generate do not fit the context.
    TooLong,
    /// The runtime failed while computing.
    Runtime,
}

/// A `score` result for one continuation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoredContinuation {
    /// Its token ids.
    pub tokens: Vec<u32>,
    /// Sum of the natural-log probabilities of its tokens, computed in f64.
    pub logprob: f64,
    /// The same value's IEEE-754 bits as 16 lowercase hex digits, so bit-exact comparisons do
    /// not depend on decimal round-tripping.
    pub logprob_bits: String,
}

/// Memory figures of the serving process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// Resident set size, KiB (`/proc/self/statm` resident pages × page size).
    pub rss_kib: u64,
    /// Anonymous resident memory, KiB (`RssAnon` of `/proc/self/status`; 0 if absent).
    pub rss_anon_kib: u64,
    /// File-backed resident memory (the mapped model), KiB (`RssFile`).
    pub rss_file_kib: u64,
    /// Peak resident set size, KiB (`VmHWM`).
    pub vm_hwm_kib: u64,
    /// Virtual size, KiB (`/proc/self/statm` size).
    pub vm_size_kib: u64,
    /// Page faults since the server started (`getrusage(RUSAGE_SELF)`): served from memory.
    #[serde(default)]
    pub minor_faults: u64,
    /// Page faults that read from storage.
    #[serde(default)]
    pub major_faults: u64,
}

/// Everything the server writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Sent once at start (id null), and in answer to `hello`.
    Hello {
        #[serde(default)]
        id: Option<Value>,
        protocol: String,
        version: u32,
        tool_version: String,
        git_commit: String,
        pid: u32,
        /// Active fault injection (tests only), if any.
        #[serde(default)]
        fault: Option<String>,
        t_ns: u64,
    },
    /// The model is loaded.
    Loaded {
        #[serde(default)]
        id: Option<Value>,
        model: String,
        /// `general.name` of the model.
        name: String,
        vocab: usize,
        ctx: usize,
        threads: usize,
        isa: String,
        load_ms: f64,
        t_ns: u64,
    },
    /// One generated token of a `query`.
    Token {
        #[serde(default)]
        id: Option<Value>,
        /// 0 = the first generated token.
        index: usize,
        token: u32,
        /// The text that became complete with this token (may be empty inside a multi-byte
        /// character).
        text: String,
        t_ns: u64,
    },
    /// A `query` finished.
    Done {
        #[serde(default)]
        id: Option<Value>,
        prompt_tokens: usize,
        /// Prompt tokens whose KV was reused from the previous sequence.
        reused_tokens: usize,
        generated: usize,
        stopped_at_eog: bool,
        tokens: Vec<u32>,
        text: String,
        /// When the request line was read.
        t_recv_ns: u64,
        /// When the first token was chosen.
        t_first_ns: Option<u64>,
        /// When the last token was chosen.
        t_end_ns: u64,
        t_ns: u64,
    },
    /// A `score` finished.
    Scored {
        #[serde(default)]
        id: Option<Value>,
        prompt_tokens: usize,
        continuations: Vec<ScoredContinuation>,
        t_recv_ns: u64,
        t_end_ns: u64,
        t_ns: u64,
    },
    /// Answer to `stats`.
    Stats {
        #[serde(default)]
        id: Option<Value>,
        pid: u32,
        loaded: bool,
        /// `query` and `score` requests completed by this process.
        queries: u64,
        tokens_generated: u64,
        #[serde(flatten)]
        memory: MemoryStats,
        /// Where `rss_kib` was read.
        rss_source: String,
        uptime_ns: u64,
        t_ns: u64,
    },
    /// Answer to `shutdown`; the process exits 0 right after.
    Bye {
        #[serde(default)]
        id: Option<Value>,
        t_ns: u64,
    },
    /// A request failed; the server goes on reading.
    Error {
        #[serde(default)]
        id: Option<Value>,
        code: ErrorCode,
        message: String,
        t_ns: u64,
    },
}

impl Event {
    /// The request id the event answers (`None` for unsolicited events).
    pub fn id(&self) -> Option<&Value> {
        match self {
            Event::Hello { id, .. }
            | Event::Loaded { id, .. }
            | Event::Token { id, .. }
            | Event::Done { id, .. }
            | Event::Scored { id, .. }
            | Event::Stats { id, .. }
            | Event::Bye { id, .. }
            | Event::Error { id, .. } => id.as_ref(),
        }
    }

    /// The server's clock when the event was written.
    pub fn t_ns(&self) -> u64 {
        match self {
            Event::Hello { t_ns, .. }
            | Event::Loaded { t_ns, .. }
            | Event::Token { t_ns, .. }
            | Event::Done { t_ns, .. }
            | Event::Scored { t_ns, .. }
            | Event::Stats { t_ns, .. }
            | Event::Bye { t_ns, .. }
            | Event::Error { t_ns, .. } => *t_ns,
        }
    }
}

/// Why a request line was refused: the code, a message naming the field or value, and the
/// request id when it could be read.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub id: Option<Value>,
    pub code: ErrorCode,
    pub message: String,
}

fn refuse(id: &Option<Value>, code: ErrorCode, message: impl Into<String>) -> Refusal {
    Refusal {
        id: id.clone(),
        code,
        message: message.into(),
    }
}

fn typed<T: serde::de::DeserializeOwned>(
    op: &str,
    id: &Option<Value>,
    map: Map<String, Value>,
) -> Result<T, Refusal> {
    serde_json::from_value(Value::Object(map))
        .map_err(|e| refuse(id, ErrorCode::BadRequest, format!("{op}: {e}")))
}

fn no_fields(op: &str, id: &Option<Value>, map: &Map<String, Value>) -> Result<(), Refusal> {
    match map.keys().next() {
        None => Ok(()),
        Some(k) => Err(refuse(
            id,
            ErrorCode::BadRequest,
            format!("{op}: unknown field `{k}` ({op} takes no fields besides op, id and v)"),
        )),
    }
}

/// Parses one request line (without its newline). Returns the request and its id, or the
/// refusal to send back.
pub fn parse_request(line: &[u8]) -> Result<(Option<Value>, Request), Refusal> {
    let none = None;
    let text = std::str::from_utf8(line).map_err(|e| {
        refuse(
            &none,
            ErrorCode::NotUtf8,
            format!(
                "request is not UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )
    })?;
    // A key given twice is refused, not resolved to either of its values.
    let value: Value = super::strict_json::from_str(text).map_err(|e| {
        refuse(
            &none,
            ErrorCode::BadJson,
            format!("request is not JSON: {e}"),
        )
    })?;
    let Value::Object(mut map) = value else {
        return Err(refuse(
            &none,
            ErrorCode::BadJson,
            "request must be a JSON object",
        ));
    };
    let id = map.remove("id");
    if let Some(v) = &id
        && !(v.is_number() || v.is_string() || v.is_null())
    {
        return Err(refuse(
            &None,
            ErrorCode::BadRequest,
            "`id` must be a number or a string",
        ));
    }
    let id = id.filter(|v| !v.is_null());
    if let Some(v) = map.remove("v") {
        match v.as_u64() {
            Some(n) if n == u64::from(PROTOCOL_VERSION) => {}
            _ => {
                return Err(refuse(
                    &id,
                    ErrorCode::UnsupportedVersion,
                    format!(
                        "protocol version {v} is not supported (this server speaks {PROTOCOL} v{PROTOCOL_VERSION})"
                    ),
                ));
            }
        }
    }
    let op = match map.remove("op") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(refuse(
                &id,
                ErrorCode::UnknownOp,
                format!("`op` must be a string, got {other}"),
            ));
        }
        None => {
            return Err(refuse(
                &id,
                ErrorCode::UnknownOp,
                format!("missing `op` (one of {})", OPS.join(", ")),
            ));
        }
    };
    let req = match op.as_str() {
        "hello" => no_fields(&op, &id, &map).map(|_| Request::Hello)?,
        "stats" => no_fields(&op, &id, &map).map(|_| Request::Stats)?,
        "shutdown" => no_fields(&op, &id, &map).map(|_| Request::Shutdown)?,
        "load" => Request::Load(typed(&op, &id, map)?),
        "query" => Request::Query(typed(&op, &id, map)?),
        "score" => Request::Score(typed(&op, &id, map)?),
        other => {
            return Err(refuse(
                &id,
                ErrorCode::UnknownOp,
                format!("unknown op `{other}` (one of {})", OPS.join(", ")),
            ));
        }
    };
    Ok((id, req))
}

// ---- Line framing (both ends: the server reads requests, the client reads events) ----

/// One line of input.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A line without its newline (and without a trailing `\r`).
    Line(Vec<u8>),
    /// A line longer than the cap; its bytes were skipped up to the newline.
    TooLong(usize),
    /// End of input.
    Eof,
}

/// Reads one line of at most `cap` bytes. A longer line is consumed and reported as
/// [`LineRead::TooLong`] with its length, so one bad line never desynchronizes the stream.
pub fn read_line_capped<R: BufRead>(r: &mut R, cap: usize) -> io::Result<LineRead> {
    let mut buf = Vec::new();
    let mut len = 0usize;
    let mut any = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (any, len > cap) {
                (false, _) => LineRead::Eof,
                (true, true) => LineRead::TooLong(len),
                (true, false) => LineRead::Line(trim_cr(buf)),
            });
        }
        any = true;
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if len + take <= cap {
            buf.extend_from_slice(&chunk[..take]);
        } else {
            buf = Vec::new();
        }
        len += take;
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(if len > cap {
                LineRead::TooLong(len)
            } else {
                LineRead::Line(trim_cr(buf))
            });
        }
    }
}

fn trim_cr(mut b: Vec<u8>) -> Vec<u8> {
    if b.last() == Some(&b'\r') {
        b.pop();
    }
    b
}

/// Parses one event line.
pub fn parse_event(line: &str) -> Result<Event, serde_json::Error> {
    serde_json::from_str(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], cap: usize) -> Vec<LineRead> {
        let mut r = io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        loop {
            let l = read_line_capped(&mut r, cap).unwrap();
            let eof = l == LineRead::Eof;
            out.push(l);
            if eof {
                return out;
            }
        }
    }

    #[test]
    fn capped_lines_skip_overlong_ones_and_keep_sync() {
        let got = lines(b"ab\r\n0123456789\ncd\nlast", 5);
        assert_eq!(
            got,
            vec![
                LineRead::Line(b"ab".to_vec()),
                LineRead::TooLong(10),
                LineRead::Line(b"cd".to_vec()),
                LineRead::Line(b"last".to_vec()),
                LineRead::Eof,
            ]
        );
        assert_eq!(lines(b"", 5), vec![LineRead::Eof]);
        assert_eq!(
            lines(b"0123456", 5),
            vec![LineRead::TooLong(7), LineRead::Eof]
        );
    }

    #[test]
    fn requests_round_trip_through_their_line() {
        let q = QueryRequest::new(PromptSpec::chat("hi"), 7);
        let line = Request::Query(q.clone()).to_line(42);
        let (id, back) = parse_request(line.as_bytes()).unwrap();
        assert_eq!(id, Some(Value::from(42)));
        assert_eq!(back, Request::Query(q));
        let (_, s) = parse_request(Request::Stats.to_line(1).as_bytes()).unwrap();
        assert_eq!(s, Request::Stats);
    }

    #[test]
    fn refusals_name_the_cause() {
        let r = |s: &str| parse_request(s.as_bytes()).unwrap_err();
        assert_eq!(r("{").code, ErrorCode::BadJson);
        assert_eq!(r("[1]").code, ErrorCode::BadJson);
        assert_eq!(r(r#"{"id":3}"#).code, ErrorCode::UnknownOp);
        let e = r(r#"{"id":3,"op":"fly"}"#);
        assert_eq!((e.code, e.id), (ErrorCode::UnknownOp, Some(Value::from(3))));
        assert!(e.message.contains("fly"));
        let e = r(r#"{"op":"stats","v":2}"#);
        assert_eq!(e.code, ErrorCode::UnsupportedVersion);
        let e = r(r#"{"op":"query","prompt":"x","max_new_tokens":2,"temprature":1}"#);
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("temprature"), "{}", e.message);
        let e = r(r#"{"op":"query","prompt":"x"}"#);
        assert!(e.message.contains("max_new_tokens"), "{}", e.message);
        let e = r(r#"{"op":"stats","verbose":true}"#);
        assert!(e.message.contains("verbose"));
        assert_eq!(
            parse_request(&[b'{', 0xff, b'}']).unwrap_err().code,
            ErrorCode::NotUtf8
        );
        assert_eq!(r(r#"{"op":"stats","id":[1]}"#).code, ErrorCode::BadRequest);
    }

    #[test]
    fn events_round_trip() {
        let e = Event::Stats {
            id: Some(Value::from(5)),
            pid: 9,
            loaded: true,
            queries: 3,
            tokens_generated: 30,
            memory: MemoryStats {
                rss_kib: 100,
                rss_anon_kib: 40,
                rss_file_kib: 60,
                vm_hwm_kib: 120,
                vm_size_kib: 1000,
                minor_faults: 7,
                major_faults: 1,
            },
            rss_source: "statm".into(),
            uptime_ns: 1,
            t_ns: 2,
        };
        let line = serde_json::to_string(&e).unwrap();
        assert!(line.contains(r#""event":"stats""#) && line.contains(r#""rss_kib":100"#));
        assert_eq!(parse_event(&line).unwrap(), e);
    }
}
