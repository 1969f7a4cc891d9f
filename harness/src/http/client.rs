//! A blocking client for OpenAI-compatible servers (ureq, HTTP/1.1, no TLS): `/v1/models`,
//! `/health`, and completions or chat completions, streamed (each token timed as its SSE
//! event arrives, [`HttpClient::stream`]) or whole ([`HttpClient::complete`]).
//!
//! A token is a stream chunk whose choice carries text (`text`, or `delta.content` for chat)
//! before the finish reason; a chat chunk announcing the role with empty content is not one.
//! A stream must end with `data: [DONE]`: one that stops before it was cut (a killed
//! server), and is an error, as is an `error` event, a non-JSON event or a non-2xx status.
//!
//! llama.cpp's native `/completion` ([`ApiKind::Native`]) has a shape of its own: an event
//! per token with `content` and the token's id in `tokens`, and a last event with
//! `stop: true` that ends the stream (no `[DONE]`), carrying `tokens_evaluated` and
//! `tokens_predicted` (read as the usage), `stop_type` (`limit` is read as the finish reason
//! `length`, `eos` and `word` as `stop`) and `timings`; with `n_probs`, each token event has
//! `completion_probabilities`.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::sse::SseDecoder;

/// Longest SSE line accepted from a server.
const MAX_SSE_LINE: usize = 1 << 20;
/// Largest whole response body read.
const MAX_BODY: u64 = 16 << 20;

/// Which request shape the server gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiKind {
    /// `POST /v1/completions` (prompt as token ids of the local model's tokenizer).
    Completions,
    /// `POST /v1/chat/completions` (prompt as one user message).
    Chat,
    /// llama.cpp's native `POST /completion` (prompt as token ids; each streamed token with
    /// its id, `n_probs` alternatives with ids, the server's counts and timings).
    Native,
}

impl ApiKind {
    pub fn path(self) -> &'static str {
        match self {
            ApiKind::Completions => "/v1/completions",
            ApiKind::Chat => "/v1/chat/completions",
            ApiKind::Native => "/completion",
        }
    }
}

/// A failed exchange.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{url}: cannot connect: {reason}")]
    Connect { url: String, reason: String },
    #[error("{url}: HTTP {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
        /// `Retry-After` in seconds, when sent.
        retry_after: Option<u64>,
    },
    #[error("{url}: timed out ({reason})")]
    Timeout { url: String, reason: String },
    #[error("{url}: {reason}")]
    Stream { url: String, reason: String },
    #[error("{url}: bad response: {reason}")]
    BadResponse { url: String, reason: String },
}

impl HttpError {
    /// Whether another try may succeed before anything was received: refused connections,
    /// HTTP 500, 502, 503 and 504.
    pub fn retryable(&self) -> bool {
        match self {
            HttpError::Connect { .. } => true,
            HttpError::Status { status, .. } => matches!(status, 500 | 502 | 503 | 504),
            _ => false,
        }
    }
}

/// What the server reports about its model (`/v1/models`, the first entry).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServerModel {
    pub id: String,
    pub owned_by: Option<String>,
    /// The model file's SHA-256 (`pocketperf serve --http` reports it).
    pub sha256: Option<String>,
    /// The server's software, when it says.
    pub server: Option<String>,
}

/// A streamed generation as the client saw it.
#[derive(Debug, Clone, Default)]
pub struct StreamOutcome {
    /// Arrival of each token chunk.
    pub token_times: Vec<Instant>,
    pub text: String,
    /// `(prompt_tokens, completion_tokens)` from the usage object.
    pub usage: Option<(u64, u64)>,
    pub finish_reason: Option<String>,
    /// The server's own timings (llama.cpp's `timings` object), verbatim.
    pub timings: Option<Value>,
    /// When `[DONE]` arrived.
    pub t_done: Option<Instant>,
    /// Each token chunk's logprobs object, verbatim (`completion_probabilities` for the
    /// native API).
    pub logprobs: Vec<Value>,
    /// The token ids, when the server streams them (native API).
    pub token_ids: Vec<u32>,
}

/// A client of one server.
#[derive(Clone)]
pub struct HttpClient {
    base: String,
    agent: ureq::Agent,
}

/// `http://host:port` without a trailing slash, or why not.
pub fn normalize_base(url: &str) -> Result<String, String> {
    if url.starts_with("https://") {
        return Err(format!(
            "{url}: https is not supported (plain HTTP on a local link)"
        ));
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!("{url}: expected http://HOST:PORT"));
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || rest.contains('?') || rest.contains('#') {
        return Err(format!(
            "{url}: expected http://HOST:PORT (no path; the API paths are fixed)"
        ));
    }
    Ok(format!("http://{rest}"))
}

fn message_of(body: &str) -> String {
    let v: Option<Value> = serde_json::from_str(body).ok();
    let m = v.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error"))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    m.unwrap_or_else(|| body.chars().take(300).collect())
}

impl HttpClient {
    /// A client of `base` (`http://HOST:PORT`) keeping up to `pool` connections open; each
    /// request may take `request_timeout` in all and go `stall_timeout` without a byte.
    pub fn new(
        base: &str,
        pool: usize,
        request_timeout: Duration,
        stall_timeout: Duration,
    ) -> Result<Self, String> {
        let base = normalize_base(base)?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_idle_connections(pool.max(1))
            .max_idle_connections_per_host(pool.max(1))
            .timeout_global(Some(request_timeout))
            .timeout_connect(Some(Duration::from_secs(5).min(request_timeout)))
            .timeout_per_read(Some(stall_timeout))
            .build()
            .into();
        Ok(HttpClient { base, agent })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The system under test as the results name it: the server's model id, this address and
    /// the endpoint `api` uses.
    pub fn sut_name(&self, model: &ServerModel, api: ApiKind) -> String {
        format!("{} over HTTP at {} ({})", model.id, self.base, api.path())
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn map_err(&self, url: &str, e: ureq::Error) -> HttpError {
        let url = url.to_string();
        match e {
            ureq::Error::Timeout(t) => HttpError::Timeout {
                url,
                reason: t.to_string(),
            },
            ureq::Error::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::NotConnected
                ) =>
            {
                HttpError::Connect {
                    url,
                    reason: io.to_string(),
                }
            }
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                HttpError::Timeout {
                    url,
                    reason: io.to_string(),
                }
            }
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => HttpError::Connect {
                url,
                reason: e.to_string(),
            },
            other => HttpError::Stream {
                url,
                reason: other.to_string(),
            },
        }
    }

    fn check_status(
        &self,
        url: &str,
        resp: &mut ureq::http::Response<ureq::Body>,
    ) -> Result<(), HttpError> {
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().parse().ok());
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 10)
            .read_to_string()
            .unwrap_or_default();
        Err(HttpError::Status {
            url: url.to_string(),
            status,
            message: message_of(&body),
            retry_after,
        })
    }

    fn get_json(&self, path: &str) -> Result<Value, HttpError> {
        let url = self.url(path);
        let mut resp = self
            .agent
            .get(&url)
            .call()
            .map_err(|e| self.map_err(&url, e))?;
        self.check_status(&url, &mut resp)?;
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| self.map_err(&url, e))?;
        serde_json::from_str(&body).map_err(|e| HttpError::BadResponse {
            url,
            reason: format!("not JSON: {e}"),
        })
    }

    /// `GET /health` as JSON.
    pub fn health(&self) -> Result<Value, HttpError> {
        self.get_json("/health")
    }

    /// `GET /v1/models`: the first model listed.
    pub fn model(&self) -> Result<ServerModel, HttpError> {
        let v = self.get_json("/v1/models")?;
        let first = v
            .get("data")
            .and_then(|d| d.get(0))
            .or_else(|| v.get("models").and_then(|d| d.get(0)));
        let Some(m) = first else {
            return Err(HttpError::BadResponse {
                url: self.url("/v1/models"),
                reason: "no model listed under `data`".into(),
            });
        };
        let s = |p: &str| m.pointer(p).and_then(Value::as_str).map(str::to_string);
        Ok(ServerModel {
            id: s("/id")
                .or_else(|| s("/name"))
                .unwrap_or_else(|| "unknown".into()),
            owned_by: s("/owned_by"),
            sha256: s("/pocketperf/sha256"),
            server: s("/pocketperf/server"),
        })
    }

    fn post(
        &self,
        api: ApiKind,
        body: &Value,
    ) -> Result<(String, ureq::http::Response<ureq::Body>), HttpError> {
        let url = self.url(api.path());
        let mut resp = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(body.to_string())
            .map_err(|e| self.map_err(&url, e))?;
        self.check_status(&url, &mut resp)?;
        Ok((url, resp))
    }

    /// A whole (non-streamed) response.
    pub fn complete(&self, api: ApiKind, body: &Value) -> Result<Value, HttpError> {
        let (url, mut resp) = self.post(api, body)?;
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| self.map_err(&url, e))?;
        serde_json::from_str(&text).map_err(|e| HttpError::BadResponse {
            url,
            reason: format!("not JSON: {e}"),
        })
    }

    /// A streamed response (`body` should ask for `stream: true`); `on_token` is called as
    /// each token chunk arrives.
    pub fn stream(
        &self,
        api: ApiKind,
        body: &Value,
        mut on_token: impl FnMut(Instant),
    ) -> Result<StreamOutcome, HttpError> {
        let (url, resp) = self.post(api, body)?;
        let mut reader = resp.into_body().into_reader();
        let mut dec = SseDecoder::new(MAX_SSE_LINE);
        let mut out = StreamOutcome::default();
        let mut buf = vec![0u8; 16 << 10];
        let stream_err = |reason: String| HttpError::Stream {
            url: url.clone(),
            reason,
        };
        loop {
            let n = match reader.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let timed_out = matches!(
                        e.kind(),
                        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                    ) || e.to_string().contains("timeout");
                    return Err(if timed_out {
                        HttpError::Timeout {
                            url: url.clone(),
                            reason: format!("{e} after {} tokens", out.token_times.len()),
                        }
                    } else {
                        stream_err(format!(
                            "stream broken after {} tokens: {e}",
                            out.token_times.len()
                        ))
                    });
                }
            };
            if n == 0 {
                return Err(stream_err(format!(
                    "stream ended after {} tokens without [DONE]",
                    out.token_times.len()
                )));
            }
            let now = Instant::now();
            let events = dec
                .push(&buf[..n])
                .map_err(|e| stream_err(format!("malformed event stream: {e}")))?;
            for data in events {
                if data.trim() == "[DONE]" {
                    out.t_done = Some(now);
                    return Ok(out);
                }
                let v: Value = serde_json::from_str(&data).map_err(|e| {
                    stream_err(format!(
                        "malformed event (not JSON: {e}): {}",
                        data.chars().take(120).collect::<String>()
                    ))
                })?;
                if v.get("error").is_some_and(|e| !e.is_null()) {
                    return Err(stream_err(format!(
                        "error event after {} tokens: {}",
                        out.token_times.len(),
                        message_of(&data)
                    )));
                }
                if api == ApiKind::Native {
                    if absorb_native(&v, now, &mut out, &mut on_token) {
                        out.t_done = Some(now);
                        return Ok(out);
                    }
                } else {
                    self.absorb(api, &v, now, &mut out, &mut on_token);
                }
            }
        }
    }

    fn absorb(
        &self,
        api: ApiKind,
        v: &Value,
        now: Instant,
        out: &mut StreamOutcome,
        on_token: &mut impl FnMut(Instant),
    ) {
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            let g = |k: &str| u.get(k).and_then(Value::as_u64);
            if let (Some(p), Some(c)) = (g("prompt_tokens"), g("completion_tokens")) {
                out.usage = Some((p, c));
            }
        }
        if let Some(t) = v.get("timings").filter(|t| t.is_object()) {
            out.timings = Some(t.clone());
        }
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
            return;
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            out.finish_reason = Some(r.to_string());
        }
        let logprobs = choice.get("logprobs").filter(|l| !l.is_null());
        let text = match api {
            ApiKind::Completions | ApiKind::Native => choice.get("text").and_then(Value::as_str),
            ApiKind::Chat => choice.pointer("/delta/content").and_then(Value::as_str),
        };
        let Some(text) = text else { return };
        let role_only =
            api == ApiKind::Chat && text.is_empty() && choice.pointer("/delta/role").is_some();
        let finishing = choice.get("finish_reason").is_some_and(|r| !r.is_null());
        if role_only || (finishing && text.is_empty() && logprobs.is_none()) {
            return;
        }
        out.text.push_str(text);
        if let Some(l) = logprobs {
            out.logprobs.push(l.clone());
        }
        out.token_times.push(now);
        on_token(now);
    }
}

/// Takes in one event of a native `/completion` stream; `true` at its last (`stop: true`).
/// A token is an event with ids in `tokens` (one arrival per id), or with text and no
/// `tokens` field.
pub fn absorb_native(
    v: &Value,
    now: Instant,
    out: &mut StreamOutcome,
    on_token: &mut impl FnMut(Instant),
) -> bool {
    let stop = v.get("stop").and_then(Value::as_bool).unwrap_or(false);
    let text = v.get("content").and_then(Value::as_str).unwrap_or("");
    let ids: Vec<u32> = v
        .get("tokens")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_u64)
                .map(|x| x as u32)
                .collect()
        })
        .unwrap_or_default();
    let arrivals = if v.get("tokens").is_some() {
        ids.len()
    } else {
        usize::from(!text.is_empty())
    };
    out.text.push_str(text);
    out.token_ids.extend(&ids);
    if let Some(p) = v.get("completion_probabilities").filter(|p| !p.is_null()) {
        out.logprobs.push(p.clone());
    }
    for _ in 0..arrivals {
        out.token_times.push(now);
        on_token(now);
    }
    if stop {
        let g = |k: &str| v.get(k).and_then(Value::as_u64);
        if let (Some(p), Some(c)) = (g("tokens_evaluated"), g("tokens_predicted")) {
            out.usage = Some((p, c));
        }
        if let Some(t) = v.get("timings").filter(|t| t.is_object()) {
            out.timings = Some(t.clone());
        }
        out.finish_reason = v.get("stop_type").and_then(Value::as_str).map(|s| {
            match s {
                "limit" => "length",
                "eos" | "word" => "stop",
                other => other,
            }
            .to_string()
        });
    }
    stop
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked() {
        assert_eq!(
            normalize_base("http://127.0.0.1:8080/").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(normalize_base("https://x:1").unwrap_err().contains("https"));
        assert!(normalize_base("127.0.0.1:80").is_err());
        assert!(
            normalize_base("http://h:1/v1")
                .unwrap_err()
                .contains("no path")
        );
    }

    #[test]
    fn chunks_count_as_tokens_only_with_text_before_the_finish() {
        let c = HttpClient::new(
            "http://127.0.0.1:9",
            1,
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap();
        let mut out = StreamOutcome::default();
        let mut n = 0;
        let now = Instant::now();
        let chunks = [
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"content":""},"finish_reason":null,"logprobs":{"content":[]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"length"}],"timings":{"predicted_n":2}}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
        ];
        for ch in chunks {
            let v: Value = serde_json::from_str(ch).unwrap();
            c.absorb(ApiKind::Chat, &v, now, &mut out, &mut |_| n += 1);
        }
        assert_eq!(n, 2);
        assert_eq!(out.token_times.len(), 2);
        assert_eq!(out.usage, Some((5, 2)));
        assert_eq!(out.finish_reason.as_deref(), Some("length"));
        assert_eq!(out.timings.unwrap()["predicted_n"], 2);
        assert_eq!(out.text, "Hi");
    }
}
