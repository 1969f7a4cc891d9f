//! The soak's system under test: a `pocketperf serve` child over the stdio protocol (started,
//! and after a crash or stall replaced, by the runner), or an OpenAI-compatible server over
//! HTTP (`soak --sut http://HOST:PORT`, `docs/HTTP.md`), which the harness can neither start
//! nor restart: "starting" it is connecting (`GET /v1/models`), and after a failure the next
//! request goes to the same address.
//!
//! Over HTTP a dialogue turn or a greedy probe is one streamed request, greedy, `ignore_eos`
//! unless the request stops at end of generation; a conversation or a chat prompt goes to
//! `/v1/chat/completions` as messages, a raw prompt to `/v1/completions` as text. Tokens are
//! timed on SSE arrival on the harness's clock (`t_recv_ns` 0 is the request's start); token
//! ids are not part of that API, so a reply is its text. An MMLU probe is one
//! `/v1/completions` request for one token with the 20 likeliest alternatives and, through
//! `logprob_token_ids`, the four letters' ids (tokenized by the local model's tokenizer);
//! a letter outside what the server returns scores −∞. Memory: `GET /health`'s
//! `pocketperf.memory` when the server reports it (ours does), else no memory sample.

use std::time::{Duration, Instant};

use pocketperf_runtime::tokenizer::Tokenizer;
use serde_json::{Value, json};

use crate::http::client::{ApiKind, HttpClient, HttpError, ServerModel};
use crate::mmlu::http::letters_from;
use crate::serve::client::{
    ExitInfo, HelloInfo, LoadedInfo, QueryOutcome, ScoreOutcome, ServeClient, StatsInfo, SutError,
};
use crate::serve::protocol::{
    ErrorCode, MemoryStats, QueryRequest, ScoreRequest, ScoredContinuation,
};
use crate::sut::http::reused_tokens;
use crate::sut::prompts::encode_rendered;

/// Alternatives asked for with an MMLU probe.
const TOP_K: usize = 20;

/// A server the soak talks to.
pub enum SoakSut {
    /// `pocketperf serve` as a child process.
    Child(Box<ServeClient>),
    /// An OpenAI-compatible server.
    Http(Box<HttpSoakSut>),
}

/// An OpenAI-compatible server as the soak's SUT.
pub struct HttpSoakSut {
    client: HttpClient,
    model: ServerModel,
    hello: HelloInfo,
    /// The local tokenizer: the MMLU probes' letter ids.
    tokenizer: Tokenizer,
    /// Longest silence inside a request.
    stall: Duration,
}

impl HttpSoakSut {
    /// Connects to `url` (`/v1/models`); `request_timeout` bounds one request, `stall` a
    /// silence inside it.
    pub fn connect(
        url: &str,
        tokenizer: Tokenizer,
        request_timeout: Duration,
        stall: Duration,
    ) -> Result<(Self, LoadedInfo), String> {
        let client = HttpClient::new(url, 1, request_timeout, stall)?;
        let t0 = Instant::now();
        let model = client.model().map_err(|e| e.to_string())?;
        let hello = HelloInfo {
            pid: 0,
            version: 0,
            tool_version: model
                .server
                .clone()
                .or_else(|| model.owned_by.clone())
                .unwrap_or_else(|| "unknown".into()),
            git_commit: String::new(),
            fault: None,
        };
        let loaded = LoadedInfo {
            name: model.id.clone(),
            vocab: 0,
            ctx: 0,
            threads: 0,
            isa: String::new(),
            load_ms: t0.elapsed().as_secs_f64() * 1e3,
        };
        Ok((
            HttpSoakSut {
                client,
                model,
                hello,
                tokenizer,
                stall,
            },
            loaded,
        ))
    }

    fn query(&self, req: &QueryRequest) -> Result<QueryOutcome, SutError> {
        let (api, body) = query_body(&self.model.id, req);
        let t0 = Instant::now();
        let ns = |t: Instant| t.saturating_duration_since(t0).as_nanos() as u64;
        let out = self
            .client
            .stream(api, &body, |_| {})
            .map_err(|e| sut_error("query", e, self.stall))?;
        let token_ns: Vec<u64> = out.token_times.iter().map(|t| ns(*t)).collect();
        let generated = out.usage.map_or(out.token_times.len(), |(_, c)| c as usize);
        let t_end = ns(out.t_done.unwrap_or_else(Instant::now));
        Ok(QueryOutcome {
            prompt_tokens: out.usage.map_or(0, |(p, _)| p as usize),
            reused_tokens: reused_tokens(&out),
            generated,
            stopped_at_eog: out.finish_reason.as_deref() == Some("stop"),
            tokens: Vec::new(),
            t_first_ns: token_ns.first().copied(),
            text: out.text,
            token_ns,
            t_recv_ns: 0,
            t_end_ns: t_end,
            t_done_ns: t_end,
        })
    }

    fn score(&self, req: &ScoreRequest) -> Result<ScoreOutcome, SutError> {
        let refuse = |message: String| SutError::Remote {
            op: "score".into(),
            code: ErrorCode::BadRequest,
            message,
        };
        let (Some(prompt), None, false) = (&req.prompt, &req.messages, req.chat) else {
            return Err(refuse(
                "over HTTP a score request takes a raw text prompt".into(),
            ));
        };
        if req.continuations.len() != 4 {
            return Err(refuse(format!(
                "over HTTP four continuations are scored, not {}",
                req.continuations.len()
            )));
        }
        let mut ids = [0u32; 4];
        for (slot, c) in ids.iter_mut().zip(&req.continuations) {
            match encode_rendered(&self.tokenizer, c, false).map_err(|e| refuse(e.to_string()))? {
                t if t.len() == 1 => *slot = t[0],
                t => {
                    return Err(refuse(format!(
                        "continuation {c:?} is {} tokens; over HTTP each must be one",
                        t.len()
                    )));
                }
            }
        }
        let body = json!({
            "model": self.model.id, "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "logprobs": TOP_K, "ignore_eos": true, "logprob_token_ids": ids,
        });
        let t0 = Instant::now();
        let resp = self
            .client
            .complete(ApiKind::Completions, &body)
            .map_err(|e| sut_error("score", e, self.stall))?;
        let t_end = t0.elapsed().as_nanos() as u64;
        let pieces: [String; 4] = std::array::from_fn(|i| req.continuations[i].clone());
        // A server that answers without log-probabilities cannot score (llama-server's
        // OpenAI-compatible completions, for one): the probe is refused, not a crash, and the
        // server stays in use.
        let Some((lp, _)) = letters_from(&resp, &pieces, ids) else {
            return Err(refuse(
                "the server returns no log-probabilities for the four letters (an MMLU probe \
                 needs them; --probe-mmlu 0 leaves MMLU probes out)"
                    .into(),
            ));
        };
        let continuations = lp
            .iter()
            .zip(ids)
            .map(|(l, id)| {
                let v = f64::from(*l);
                ScoredContinuation {
                    tokens: vec![id],
                    logprob: v,
                    logprob_bits: format!("{:016x}", v.to_bits()),
                }
            })
            .collect();
        Ok(ScoreOutcome {
            prompt_tokens: resp
                .pointer("/usage/prompt_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0) as usize,
            continuations,
            t_recv_ns: 0,
            t_end_ns: t_end,
        })
    }

    fn stats(&self) -> Result<StatsInfo, SutError> {
        let h = self
            .client
            .health()
            .map_err(|e| sut_error("stats", e, self.stall))?;
        let Some(p) = h.get("pocketperf").filter(|p| p.is_object()) else {
            return Err(SutError::Remote {
                op: "stats".into(),
                code: ErrorCode::UnknownOp,
                message: "the server's /health reports no memory".into(),
            });
        };
        let memory: MemoryStats =
            serde_json::from_value(p["memory"].clone()).map_err(|e| SutError::Protocol {
                op: "stats".into(),
                reason: format!("/health pocketperf.memory: {e}"),
            })?;
        let n = |k: &str| p.get(k).and_then(Value::as_u64).unwrap_or(0);
        Ok(StatsInfo {
            pid: n("pid") as u32,
            loaded: true,
            queries: h.get("completed").and_then(Value::as_u64).unwrap_or(0),
            tokens_generated: n("tokens_generated"),
            memory,
            uptime_ns: n("uptime_ns"),
        })
    }
}

/// The endpoint and body of a query: messages or a chat prompt to the chat API, raw text to
/// the completions API.
pub fn query_body(model: &str, req: &QueryRequest) -> (ApiKind, Value) {
    let mut body = json!({
        "model": model,
        "max_tokens": req.max_new_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "seed": req.seed,
        "ignore_eos": !req.stop_at_eog,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let api = match (&req.messages, &req.prompt) {
        (Some(m), _) => {
            body["messages"] = json!(m);
            ApiKind::Chat
        }
        (None, Some(p)) if req.chat => {
            body["messages"] = json!([{"role": "user", "content": p}]);
            ApiKind::Chat
        }
        (None, p) => {
            body["prompt"] = json!(p.as_deref().unwrap_or(""));
            ApiKind::Completions
        }
    };
    (api, body)
}

/// An HTTP failure as the runner classifies SUT failures: a stall is a timeout, a 4xx a
/// refusal of that request, anything else (refused connection, 5xx, a cut or malformed
/// stream) a failure of the server.
fn sut_error(op: &str, e: HttpError, stall: Duration) -> SutError {
    match e {
        HttpError::Timeout { reason, .. } => SutError::Timeout {
            op: format!("{op} ({reason})"),
            waited_s: stall.as_secs_f64(),
        },
        HttpError::Status {
            status, message, ..
        } if (400..500).contains(&status) => SutError::Remote {
            op: op.into(),
            code: ErrorCode::BadRequest,
            message: format!("HTTP {status}: {message}"),
        },
        other => SutError::Protocol {
            op: op.into(),
            reason: other.to_string(),
        },
    }
}

impl SoakSut {
    pub fn pid(&self) -> u32 {
        match self {
            SoakSut::Child(c) => c.pid(),
            SoakSut::Http(_) => 0,
        }
    }

    pub fn hello(&self) -> &HelloInfo {
        match self {
            SoakSut::Child(c) => c.hello(),
            SoakSut::Http(h) => &h.hello,
        }
    }

    pub fn stderr_tail(&self) -> Vec<String> {
        match self {
            SoakSut::Child(c) => c.stderr_tail(),
            SoakSut::Http(_) => Vec::new(),
        }
    }

    /// Kills a child (its exit); a server over HTTP is not the harness's to kill (`None`).
    pub fn kill(&mut self) -> Option<ExitInfo> {
        match self {
            SoakSut::Child(c) => Some(c.kill()),
            SoakSut::Http(_) => None,
        }
    }

    pub fn shutdown(self, timeout: Duration) {
        if let SoakSut::Child(c) = self {
            c.shutdown(timeout);
        }
    }

    pub fn query(
        &mut self,
        req: &QueryRequest,
        timeout: Duration,
    ) -> Result<QueryOutcome, SutError> {
        match self {
            SoakSut::Child(c) => c.query(req, timeout, |_| {}),
            SoakSut::Http(h) => h.query(req),
        }
    }

    pub fn score(
        &mut self,
        req: &ScoreRequest,
        timeout: Duration,
    ) -> Result<ScoreOutcome, SutError> {
        match self {
            SoakSut::Child(c) => c.score(req, timeout),
            SoakSut::Http(h) => h.score(req),
        }
    }

    pub fn stats(&mut self, timeout: Duration) -> Result<StatsInfo, SutError> {
        match self {
            SoakSut::Child(c) => c.stats(timeout),
            SoakSut::Http(h) => h.stats(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::protocol::{Message, PromptSpec};

    #[test]
    fn requests_take_the_api_their_prompt_needs() {
        let mut q = QueryRequest::new(
            PromptSpec::messages(vec![Message {
                role: "user".into(),
                content: "Hi".into(),
            }]),
            5,
        );
        q.stop_at_eog = false;
        let (api, b) = query_body("m", &q);
        assert_eq!(api, ApiKind::Chat);
        assert_eq!(b["messages"][0]["content"], "Hi");
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["max_tokens"], 5);
        let (api, b) = query_body("m", &QueryRequest::new(PromptSpec::chat("Yo"), 3));
        assert_eq!(api, ApiKind::Chat);
        assert_eq!(b["messages"][0]["role"], "user");
        assert_eq!(b["ignore_eos"], false);
        let (api, b) = query_body("m", &QueryRequest::new(PromptSpec::text("raw"), 3));
        assert_eq!(api, ApiKind::Completions);
        assert_eq!(b["prompt"], "raw");
        assert!(b.get("messages").is_none());
    }

    #[test]
    fn http_failures_map_to_the_runners_kinds() {
        let t = sut_error(
            "query",
            HttpError::Timeout {
                url: "u".into(),
                reason: "r".into(),
            },
            Duration::from_secs(3),
        );
        assert!(matches!(t, SutError::Timeout { waited_s, .. } if waited_s == 3.0));
        let r = sut_error(
            "query",
            HttpError::Status {
                url: "u".into(),
                status: 400,
                message: "m".into(),
                retry_after: None,
            },
            Duration::from_secs(3),
        );
        assert!(matches!(r, SutError::Remote { .. }));
        let c = sut_error(
            "query",
            HttpError::Connect {
                url: "u".into(),
                reason: "refused".into(),
            },
            Duration::from_secs(3),
        );
        assert!(!c.to_string().is_empty() && matches!(c, SutError::Protocol { .. }));
    }
}
