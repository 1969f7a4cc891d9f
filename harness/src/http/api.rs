//! The OpenAI-compatible request and response shapes of `serve --http` (OpenAI API reference:
//! "Completions" and "Chat Completions", with their streaming chunk objects), plus the
//! extensions llama.cpp's server also accepts (`ignore_eos`, `prompt` as token ids) and a
//! `timings` object in the last chunk (llama.cpp's names: `prompt_n`, `prompt_ms`,
//! `predicted_n`, `predicted_ms`).
//!
//! Requests are parsed into [`ParsedRequest`] with every bad field refused by name
//! ([`ApiError`], answered as HTTP 400 with an OpenAI-style error body). Unknown fields are
//! ignored, as OpenAI's clients send many optional ones; fields we cannot honour
//! (`n` > 1, `stop`, `best_of`, `echo`, `suffix`, tools) are refused rather than ignored.

use pocketperf_runtime::session::SamplingParams;
use pocketperf_runtime::tokenizer::ChatMessage;
use serde_json::{Value, json};

use super::worker::{Finish, PromptInput, TokenOut};

/// Most alternatives `logprobs`/`top_logprobs` may ask for (OpenAI's chat limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Completions,
    Chat,
}

/// A refused request: HTTP status, OpenAI error `type`, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn bad(message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            kind: "invalid_request_error",
            message: message.into(),
        }
    }

    pub fn new(status: u16, message: impl Into<String>) -> Self {
        let kind = match status {
            400..=499 => "invalid_request_error",
            503 => "overloaded_error",
            504 => "timeout_error",
            _ => "server_error",
        };
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }

    /// The body: `{"error": {"message", "type", "code"}}`.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "code": self.status}})
    }
}

/// A validated request.
#[derive(Debug, Clone)]
pub struct ParsedRequest {
    pub api: Api,
    pub prompt: PromptInput,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    pub sampling: SamplingParams,
    pub top_logprobs: Option<usize>,
    /// `logprob_token_ids` (our extension): log-probabilities of these tokens as well.
    pub logprob_ids: Vec<u32>,
    pub stream: bool,
    pub include_usage: bool,
}

fn opt_u64(v: &Value, key: &str) -> Result<Option<u64>, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .map(Some)
            .ok_or_else(|| ApiError::bad(format!("`{key}` must be a non-negative integer"))),
    }
}

fn opt_f32(v: &Value, key: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_f64() {
            Some(f) if (lo..=hi).contains(&f) => Ok(Some(f as f32)),
            _ => Err(ApiError::bad(format!(
                "`{key}` must be a number in [{lo}, {hi}]"
            ))),
        },
    }
}

fn opt_bool(v: &Value, key: &str) -> Result<Option<bool>, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::bad(format!("`{key}` must be true or false"))),
    }
}

fn prompt_of(v: &Value) -> Result<PromptInput, ApiError> {
    match v.get("prompt") {
        Some(Value::String(s)) => Ok(PromptInput::Text(s.clone())),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) && !a.is_empty() => a
            .iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| ApiError::bad("`prompt` token ids must be integers ≥ 0"))
            })
            .collect::<Result<Vec<u32>, _>>()
            .map(PromptInput::Tokens),
        Some(Value::Array(a)) if a.len() == 1 => match &a[0] {
            Value::String(s) => Ok(PromptInput::Text(s.clone())),
            _ => Err(ApiError::bad(
                "`prompt` must be a string or an array of token ids",
            )),
        },
        Some(Value::Array(_)) => Err(ApiError::bad(
            "`prompt` must be one string or one array of token ids (batches are not served)",
        )),
        None | Some(Value::Null) => Err(ApiError::bad("`prompt` is required")),
        Some(_) => Err(ApiError::bad(
            "`prompt` must be a string or an array of token ids",
        )),
    }
}

fn messages_of(v: &Value) -> Result<PromptInput, ApiError> {
    let Some(Value::Array(ms)) = v.get("messages") else {
        return Err(ApiError::bad("`messages` is required (an array)"));
    };
    if ms.is_empty() {
        return Err(ApiError::bad("`messages` is empty"));
    }
    let mut out = Vec::with_capacity(ms.len());
    for (i, m) in ms.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str);
        let Some(role @ ("system" | "user" | "assistant" | "developer")) = role else {
            return Err(ApiError::bad(format!(
                "messages[{i}].role must be system, user, assistant or developer"
            )));
        };
        let role = if role == "developer" { "system" } else { role };
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            // Content parts: text parts only.
            Some(Value::Array(parts)) => {
                let mut s = String::new();
                for p in parts {
                    match (p.get("type").and_then(Value::as_str), p.get("text")) {
                        (Some("text"), Some(Value::String(t))) => s.push_str(t),
                        _ => {
                            return Err(ApiError::bad(format!(
                                "messages[{i}].content: only text parts are supported"
                            )));
                        }
                    }
                }
                s
            }
            _ => {
                return Err(ApiError::bad(format!(
                    "messages[{i}].content must be a string"
                )));
            }
        };
        out.push(ChatMessage {
            role: role.into(),
            content,
        });
    }
    Ok(PromptInput::Chat(out))
}

/// Parses and validates a request body; `max_tokens_limit` bounds `max_tokens` (and is its
/// default).
pub fn parse_request(
    api: Api,
    body: &[u8],
    max_tokens_limit: usize,
) -> Result<ParsedRequest, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad(format!("the body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad("the body must be a JSON object"));
    }
    for key in [
        "stop",
        "best_of",
        "suffix",
        "tools",
        "functions",
        "response_format",
    ] {
        if v.get(key).is_some_and(|x| !x.is_null()) {
            return Err(ApiError::bad(format!("`{key}` is not supported")));
        }
    }
    if opt_bool(&v, "echo")? == Some(true) {
        return Err(ApiError::bad("`echo` is not supported"));
    }
    if let Some(n) = opt_u64(&v, "n")?
        && n != 1
    {
        return Err(ApiError::bad("`n` must be 1"));
    }
    let prompt = match api {
        Api::Completions => prompt_of(&v)?,
        Api::Chat => messages_of(&v)?,
    };
    let max_tokens = match api {
        Api::Chat => match opt_u64(&v, "max_completion_tokens")? {
            Some(n) => Some(n),
            None => opt_u64(&v, "max_tokens")?,
        },
        Api::Completions => opt_u64(&v, "max_tokens")?,
    };
    let max_tokens = match max_tokens {
        None => max_tokens_limit,
        Some(n) if n as usize > max_tokens_limit || n == 0 => {
            return Err(ApiError::bad(format!(
                "`max_tokens` must be between 1 and {max_tokens_limit} (this server's limit)"
            )));
        }
        Some(n) => n as usize,
    };
    let top_logprobs = match api {
        // Completions: `logprobs` is the number of alternatives (0 = the token's own only).
        Api::Completions => opt_u64(&v, "logprobs")?.map(|k| k as usize),
        Api::Chat => match opt_bool(&v, "logprobs")? {
            Some(true) => Some(opt_u64(&v, "top_logprobs")?.unwrap_or(0) as usize),
            _ => {
                if opt_u64(&v, "top_logprobs")?.is_some() {
                    return Err(ApiError::bad("`top_logprobs` needs `logprobs: true`"));
                }
                None
            }
        },
    };
    if top_logprobs.is_some_and(|k| k > MAX_TOP_LOGPROBS) {
        return Err(ApiError::bad(format!(
            "at most {MAX_TOP_LOGPROBS} alternatives per token (`logprobs`/`top_logprobs`)"
        )));
    }
    let logprob_ids = match v.get("logprob_token_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.len() <= MAX_TOP_LOGPROBS && top_logprobs.is_some() => a
            .iter()
            .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| ApiError::bad("`logprob_token_ids` must be token ids"))?,
        Some(_) => {
            return Err(ApiError::bad(format!(
                "`logprob_token_ids` must be at most {MAX_TOP_LOGPROBS} token ids, with \
                 `logprobs`"
            )));
        }
    };
    let temperature = opt_f32(&v, "temperature", 0.0, 2.0)?.unwrap_or(1.0);
    let top_p = opt_f32(&v, "top_p", 0.0, 1.0)?.unwrap_or(1.0);
    let seed = opt_u64(&v, "seed")?.unwrap_or(0);
    let stream = opt_bool(&v, "stream")?.unwrap_or(false);
    let include_usage = match v.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(o) if o.is_object() => opt_bool(o, "include_usage")?.unwrap_or(false),
        Some(_) => return Err(ApiError::bad("`stream_options` must be an object")),
    };
    Ok(ParsedRequest {
        api,
        prompt,
        max_tokens,
        ignore_eos: opt_bool(&v, "ignore_eos")?.unwrap_or(false),
        sampling: SamplingParams {
            temperature,
            top_p,
            seed,
        },
        top_logprobs,
        logprob_ids,
        stream,
        include_usage,
    })
}

/// The `logprobs` object of one token in a completions chunk.
fn completion_logprobs(t: &TokenOut) -> Value {
    match &t.logprobs {
        None => Value::Null,
        Some(lp) => {
            let top: serde_json::Map<String, Value> = lp
                .top
                .iter()
                .map(|(piece, _, l)| (piece.clone(), json!(l)))
                .collect();
            let mut v = json!({
                "tokens": [t.piece],
                "token_logprobs": [lp.logprob],
                "top_logprobs": [top],
                "text_offset": [0],
            });
            if !lp.requested.is_empty()
                && let Some(o) = v.as_object_mut()
            {
                o.insert("requested_logprobs".into(), json!([requested(lp)]));
            }
            v
        }
    }
}

/// `{"<id>": logprob}` of the ids a request named (`logprob_token_ids`).
fn requested(lp: &super::worker::TokenLogprobs) -> Value {
    Value::Object(
        lp.requested
            .iter()
            .map(|(id, l)| (id.to_string(), json!(l)))
            .collect(),
    )
}

/// The `logprobs.content` entries of one token in a chat chunk.
fn chat_logprobs(t: &TokenOut) -> Value {
    match &t.logprobs {
        None => Value::Null,
        Some(lp) => json!({"content": [{
            "token": t.piece,
            "logprob": lp.logprob,
            "bytes": t.bytes,
            "top_logprobs": lp.top.iter().map(|(p, b, l)| json!({
                "token": p, "logprob": l, "bytes": b,
            })).collect::<Vec<_>>(),
        }]}),
    }
}

/// Identity fields shared by every object of one response.
#[derive(Debug, Clone)]
pub struct ResponseIds {
    pub id: String,
    pub created: i64,
    pub model: String,
}

/// One streamed chunk carrying token `t`.
pub fn token_chunk(api: Api, ids: &ResponseIds, t: &TokenOut, first: bool) -> Value {
    match api {
        Api::Completions => json!({
            "id": ids.id, "object": "text_completion", "created": ids.created, "model": ids.model,
            "choices": [{"index": 0, "text": t.text, "logprobs": completion_logprobs(t),
                         "finish_reason": Value::Null}],
        }),
        Api::Chat => {
            let delta = if first {
                json!({"role": "assistant", "content": t.text})
            } else {
                json!({"content": t.text})
            };
            json!({
                "id": ids.id, "object": "chat.completion.chunk", "created": ids.created,
                "model": ids.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": chat_logprobs(t),
                             "finish_reason": Value::Null}],
            })
        }
    }
}

fn usage(f: &Finish) -> Value {
    json!({
        "prompt_tokens": f.prompt_tokens,
        "completion_tokens": f.completion_tokens,
        "total_tokens": f.prompt_tokens + f.completion_tokens,
    })
}

/// The server's own timings (llama.cpp's field names: `prompt_n` the prompt tokens
/// prefilled, `cache_n` those reused from the slot's cache; plus the time to first token).
pub fn timings(f: &Finish) -> Value {
    json!({
        "prompt_n": f.prompt_tokens - f.cached_tokens,
        "cache_n": f.cached_tokens,
        "prompt_ms": f.prompt_ms,
        "predicted_n": f.completion_tokens,
        "predicted_ms": f.predicted_ms,
        "ttft_ms": f.ttft_ms,
    })
}

/// The last chunk of a stream: the finish reason and the server's timings (and, when asked
/// for with `stream_options.include_usage`, the usage, as its own chunk: see
/// [`usage_chunk`]).
pub fn finish_chunk(api: Api, ids: &ResponseIds, f: &Finish) -> Value {
    let object = match api {
        Api::Completions => "text_completion",
        Api::Chat => "chat.completion.chunk",
    };
    let choice = match api {
        Api::Completions => {
            json!({"index": 0, "text": "", "logprobs": Value::Null, "finish_reason": f.reason})
        }
        Api::Chat => json!({"index": 0, "delta": {}, "logprobs": Value::Null,
                            "finish_reason": f.reason}),
    };
    json!({"id": ids.id, "object": object, "created": ids.created, "model": ids.model,
           "choices": [choice], "timings": timings(f)})
}

/// The usage chunk (`choices` empty) sent after the last chunk.
pub fn usage_chunk(api: Api, ids: &ResponseIds, f: &Finish) -> Value {
    let object = match api {
        Api::Completions => "text_completion",
        Api::Chat => "chat.completion.chunk",
    };
    json!({"id": ids.id, "object": object, "created": ids.created, "model": ids.model,
           "choices": [], "usage": usage(f)})
}

/// A whole (non-streamed) response.
pub fn full_response(api: Api, ids: &ResponseIds, tokens: &[TokenOut], f: &Finish) -> Value {
    let text: String = tokens.iter().map(|t| t.text.as_str()).collect();
    let any_lp = tokens.iter().any(|t| t.logprobs.is_some());
    match api {
        Api::Completions => {
            let logprobs = if any_lp {
                let mut offset = 0usize;
                let mut offsets = Vec::new();
                for t in tokens {
                    offsets.push(offset);
                    offset += t.text.len();
                }
                json!({
                    "tokens": tokens.iter().map(|t| t.piece.clone()).collect::<Vec<_>>(),
                    "token_logprobs": tokens.iter()
                        .map(|t| t.logprobs.as_ref().map(|l| l.logprob)).collect::<Vec<_>>(),
                    "top_logprobs": tokens.iter().map(|t| completion_logprobs(t)
                        .get("top_logprobs").and_then(|a| a.get(0)).cloned()
                        .unwrap_or(Value::Null)).collect::<Vec<_>>(),
                    "text_offset": offsets,
                    "requested_logprobs": tokens.iter().map(|t| t.logprobs.as_ref()
                        .filter(|l| !l.requested.is_empty())
                        .map_or(Value::Null, requested)).collect::<Vec<_>>(),
                })
            } else {
                Value::Null
            };
            json!({
                "id": ids.id, "object": "text_completion", "created": ids.created,
                "model": ids.model,
                "choices": [{"index": 0, "text": text, "logprobs": logprobs,
                             "finish_reason": f.reason}],
                "usage": usage(f), "timings": timings(f),
            })
        }
        Api::Chat => {
            let logprobs = if any_lp {
                json!({"content": tokens.iter().filter_map(|t| chat_logprobs(t)
                    .get("content").and_then(|c| c.get(0)).cloned()).collect::<Vec<_>>()})
            } else {
                Value::Null
            };
            json!({
                "id": ids.id, "object": "chat.completion", "created": ids.created,
                "model": ids.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": logprobs, "finish_reason": f.reason}],
                "usage": usage(f), "timings": timings(f),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(api: Api, body: &str) -> Result<ParsedRequest, ApiError> {
        parse_request(api, body.as_bytes(), 256)
    }

    #[test]
    fn valid_requests_parse_with_defaults_and_limits() {
        let r = parse(
            Api::Completions,
            r#"{"prompt":"hi","max_tokens":5,"logprobs":3}"#,
        )
        .unwrap();
        assert!(matches!(r.prompt, PromptInput::Text(ref s) if s == "hi"));
        assert_eq!(
            (r.max_tokens, r.top_logprobs, r.stream),
            (5, Some(3), false)
        );
        let r = parse(Api::Completions, r#"{"prompt":[1,2,3]}"#).unwrap();
        assert!(matches!(r.prompt, PromptInput::Tokens(ref t) if t == &[1, 2, 3]));
        assert_eq!(r.max_tokens, 256, "the limit is the default");
        let r = parse(
            Api::Chat,
            r#"{"messages":[{"role":"user","content":"x"}],"stream":true,
                "stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":4,
                "temperature":0,"ignore_eos":true,"max_completion_tokens":7}"#,
        )
        .unwrap();
        assert!(r.stream && r.include_usage && r.ignore_eos);
        assert_eq!((r.max_tokens, r.top_logprobs), (7, Some(4)));
        assert_eq!(r.sampling.temperature, 0.0);
    }

    #[test]
    fn every_bad_field_is_refused_by_name() {
        let cases = [
            (Api::Completions, "not json", "valid JSON"),
            (Api::Completions, "[1]", "JSON object"),
            (Api::Completions, "{}", "`prompt` is required"),
            (Api::Completions, r#"{"prompt":5}"#, "`prompt` must be"),
            (Api::Completions, r#"{"prompt":[-1]}"#, "token ids"),
            (Api::Completions, r#"{"prompt":["a","b"]}"#, "batches"),
            (
                Api::Completions,
                r#"{"prompt":"x","max_tokens":257}"#,
                "between 1 and 256",
            ),
            (
                Api::Completions,
                r#"{"prompt":"x","max_tokens":0}"#,
                "between 1 and 256",
            ),
            (
                Api::Completions,
                r#"{"prompt":"x","max_tokens":"9"}"#,
                "`max_tokens`",
            ),
            (Api::Completions, r#"{"prompt":"x","n":2}"#, "`n` must be 1"),
            (
                Api::Completions,
                r#"{"prompt":"x","stop":["\n"]}"#,
                "`stop`",
            ),
            (Api::Completions, r#"{"prompt":"x","echo":true}"#, "`echo`"),
            (
                Api::Completions,
                r#"{"prompt":"x","logprobs":21}"#,
                "at most 20",
            ),
            (
                Api::Completions,
                r#"{"prompt":"x","temperature":3}"#,
                "`temperature`",
            ),
            (
                Api::Completions,
                r#"{"prompt":"x","stream":"yes"}"#,
                "`stream`",
            ),
            (Api::Chat, r#"{"messages":[]}"#, "empty"),
            (
                Api::Chat,
                r#"{"messages":[{"role":"robot","content":"x"}]}"#,
                "role",
            ),
            (
                Api::Chat,
                r#"{"messages":[{"role":"user","content":3}]}"#,
                "content",
            ),
            (
                Api::Chat,
                r#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}"#,
                "needs `logprobs: true`",
            ),
        ];
        for (api, body, needle) in cases {
            let e = parse(api, body).expect_err(body);
            assert_eq!(e.status, 400, "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
            assert_eq!(e.body()["error"]["type"], "invalid_request_error");
        }
    }
}
