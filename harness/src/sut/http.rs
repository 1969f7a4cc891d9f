//! Any OpenAI-compatible HTTP server as the scenario engine's system under test
//! (`--sut http://HOST:PORT`, `docs/HTTP.md`): each query is one streamed request
//! (`/v1/completions` with the prompt's token ids, or `/v1/chat/completions` with the prompt
//! as one user message), greedy, `ignore_eos` with `max_tokens` set to the sample's output
//! length, as MLPerf's performance mode forces it.
//!
//! A bounded pool of worker threads (1 for SingleStream, `concurrency` otherwise) sends the
//! requests; the engine's thread hears back in [`SystemUnderTest::poll`]. Each token is
//! stamped when its SSE event arrives (TTFT, TPOT and inter-token latency come from the
//! stream); the server's own `timings`, when it sends them, are kept beside. Token counts
//! come from the usage object when the server sends one, else from the chunks counted.
//!
//! Retry policy: a request refused before any token (connection refused, HTTP 500, 502, 503,
//! 504) is retried up to `retries` times after 250 ms × attempt (or the server's
//! `Retry-After`, at most 2 s); every retry is recorded. A failure after the first token
//! fails the query (recorded; the run goes on and is INVALID, as LoadGen rules a failed
//! query). A stream that finishes with fewer tokens than asked completes with the tokens it
//! had, and is recorded as short.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pocketperf_scenarios::{Query, Responder, Scenario, SystemUnderTest};
use serde_json::{Value, json};

use crate::http::client::{ApiKind, HttpClient, HttpError, ServerModel, StreamOutcome};

/// One sample as the HTTP SUT sends it.
#[derive(Debug, Clone)]
pub struct HttpPrompt {
    /// The user message (chat API).
    pub text: String,
    /// The prompt's token ids in the model's chat template (completions API).
    pub tokens: Vec<u32>,
    pub max_new_tokens: usize,
}

/// Settings of an [`HttpSut`].
#[derive(Debug, Clone)]
pub struct HttpSutConfig {
    pub base_url: String,
    pub api: ApiKind,
    /// Requests in flight at most (Offline and Server; SingleStream uses one).
    pub concurrency: usize,
    pub request_timeout: Duration,
    /// Longest silence inside a response.
    pub stall_timeout: Duration,
    pub retries: u32,
}

/// Where the token counts came from.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct TokenSources {
    /// Queries counted from the server's usage object.
    pub usage: u64,
    /// Queries counted from the stream's token chunks (no usage object).
    pub chunks: u64,
}

/// What the HTTP SUT recorded besides the engine's results.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HttpRecord {
    pub failed: Vec<String>,
    pub retried: Vec<String>,
    pub short: Vec<String>,
    pub token_count_source: TokenSources,
    /// Queries whose final chunk carried the server's `timings`.
    pub server_timings_queries: u64,
    /// Sums of the server's `prompt_ms` and `predicted_ms`, and of the tokens it says it
    /// predicted (for means beside the client-side figures).
    pub server_prompt_ms_sum: f64,
    pub server_predicted_ms_sum: f64,
    pub server_predicted_n_sum: u64,
}

impl HttpRecord {
    /// The record as result.json's `meta.settings.sut.record`, with means.
    pub fn summary(&self) -> Value {
        let n = self.server_timings_queries.max(1) as f64;
        let per_token = if self.server_predicted_n_sum > 0 {
            Some(self.server_predicted_ms_sum / self.server_predicted_n_sum as f64)
        } else {
            None
        };
        json!({
            "failed_queries": self.failed.len(),
            "retries": self.retried.len(),
            "short_responses": self.short.len(),
            "token_count_source": self.token_count_source,
            "server_timings": if self.server_timings_queries == 0 { Value::Null } else { json!({
                "queries": self.server_timings_queries,
                "mean_prompt_ms": self.server_prompt_ms_sum / n,
                "mean_predicted_ms": self.server_predicted_ms_sum / n,
                "mean_predicted_ms_per_token": per_token,
            })},
        })
    }

    /// Takes in one finished stream asked for `asked` tokens: returns its token count (the
    /// usage object's, else the token chunks counted, either noted in
    /// [`HttpRecord::token_count_source`]), adds the server's timings when sent, and notes a
    /// short response under `what` (`query 3`, `dialogue 0 turn 1`).
    pub fn account(&mut self, what: &str, out: &StreamOutcome, asked: usize) -> u64 {
        let tokens = match out.usage {
            Some((_, c)) => {
                self.token_count_source.usage += 1;
                c
            }
            None => {
                self.token_count_source.chunks += 1;
                out.token_times.len() as u64
            }
        };
        if let Some(t) = &out.timings {
            self.server_timings_queries += 1;
            let f = |k: &str| t.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            self.server_prompt_ms_sum += f("prompt_ms");
            self.server_predicted_ms_sum += f("predicted_ms");
            self.server_predicted_n_sum += f("predicted_n") as u64;
        }
        if tokens < asked as u64 {
            self.short.push(format!(
                "{what}: {tokens} of {asked} tokens (finish_reason {})",
                out.finish_reason.as_deref().unwrap_or("none")
            ));
        }
        tokens
    }

    /// Warnings for result.json (first 20 of each kind).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        for (what, list) in [
            ("failed query", &self.failed),
            ("retry", &self.retried),
            ("short response", &self.short),
        ] {
            w.extend(
                list.iter()
                    .take(20)
                    .map(|m| format!("http SUT {what}: {m}")),
            );
            if list.len() > 20 {
                w.push(format!("http SUT: {} more of kind {what}", list.len() - 20));
            }
        }
        w
    }
}

/// result.json's `meta.settings.sut` for an HTTP SUT: kind, endpoint, API, what the server
/// says its model is (id, and the file's SHA-256 when it is our own server), the system's
/// identity for the comparability check (`system`: the server and model, not the port), and
/// the record (failures, retries, short responses, token-count source, server timings).
pub fn sut_json(cfg: &HttpSutConfig, m: &ServerModel, rec: &HttpRecord) -> Value {
    let server = m
        .server
        .clone()
        .or_else(|| m.owned_by.clone())
        .unwrap_or_else(|| "unknown".into());
    json!({
        "kind": "http",
        "endpoint": cfg.base_url,
        "api": cfg.api,
        "concurrency": cfg.concurrency,
        "retry_policy": format!(
            "up to {} retries before the first token on connection refused or HTTP \
             500/502/503/504, 250 ms x attempt (Retry-After, at most 2 s, when sent)",
            cfg.retries
        ),
        "model_id": m.id,
        "model_sha256": m.sha256,
        "server": server,
        "system": format!("http {server} {}", m.id),
        "record": rec.summary(),
    })
}

enum Ev {
    Token { id: u64, t: Instant },
    Done { id: u64, t: Instant, tokens: u64 },
    Fail { id: u64, reason: String },
}

/// The request body of one sample.
pub fn request_body(api: ApiKind, model: &str, p: &HttpPrompt) -> Value {
    let common = json!({
        "model": model,
        "max_tokens": p.max_new_tokens,
        "temperature": 0,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let mut b = match api {
        ApiKind::Completions => json!({"prompt": p.tokens}),
        ApiKind::Chat => json!({"messages": [{"role": "user", "content": p.text}]}),
        // llama.cpp's own names: `n_predict`, and the ids of the tokens in the stream.
        ApiKind::Native => {
            return json!({
                "prompt": p.tokens,
                "n_predict": p.max_new_tokens,
                "temperature": 0,
                "ignore_eos": true,
                "stream": true,
                "return_tokens": true,
            });
        }
    };
    if let (Some(o), Value::Object(c)) = (b.as_object_mut(), common) {
        o.extend(c);
    }
    b
}

/// Prompt tokens the server says it took from its cache: `timings.cache_n` (llama.cpp), else
/// the usage object's prompt tokens less `timings.prompt_n` (those it evaluated), else 0.
pub fn reused_tokens(out: &StreamOutcome) -> usize {
    let t = out.timings.as_ref();
    let get = |k: &str| t.and_then(|t| t.get(k)).and_then(Value::as_u64);
    if let Some(c) = get("cache_n") {
        return c as usize;
    }
    match (out.usage, get("prompt_n")) {
        (Some((p, _)), Some(n)) => p.saturating_sub(n) as usize,
        _ => 0,
    }
}

/// Sends `body` streamed, retrying what [`HttpError::retryable`] allows before any token
/// (each retry noted in `record` under `what`).
pub fn with_retries(
    client: &HttpClient,
    cfg: &HttpSutConfig,
    body: &Value,
    what: &str,
    record: &Mutex<HttpRecord>,
    mut on_token: impl FnMut(Instant),
) -> Result<StreamOutcome, HttpError> {
    let mut attempt = 0;
    loop {
        let mut got = 0usize;
        let r = client.stream(cfg.api, body, |t| {
            got += 1;
            on_token(t);
        });
        match r {
            Err(e) if got == 0 && e.retryable() && attempt < cfg.retries => {
                attempt += 1;
                let wait = match &e {
                    HttpError::Status {
                        retry_after: Some(s),
                        ..
                    } => Duration::from_secs(*s).min(Duration::from_secs(2)),
                    _ => Duration::from_millis(250 * attempt as u64),
                };
                if let Ok(mut r) = record.lock() {
                    r.retried
                        .push(format!("{what}: attempt {attempt} after: {e}"));
                }
                std::thread::sleep(wait);
            }
            other => return other,
        }
    }
}

fn worker(
    client: HttpClient,
    cfg: HttpSutConfig,
    model: String,
    prompts: Arc<Vec<HttpPrompt>>,
    jobs: Arc<Mutex<Receiver<Query>>>,
    events: Sender<Ev>,
    record: Arc<Mutex<HttpRecord>>,
) {
    loop {
        let q = match jobs.lock() {
            Ok(rx) => match rx.recv() {
                Ok(q) => q,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let Some(p) = prompts.get(q.sample_index as usize) else {
            let _ = events.send(Ev::Fail {
                id: q.id,
                reason: format!("sample {} is outside the prompt set", q.sample_index),
            });
            continue;
        };
        let body = request_body(cfg.api, &model, p);
        let what = format!("query {}", q.id);
        let r = with_retries(&client, &cfg, &body, &what, &record, |t| {
            let _ = events.send(Ev::Token { id: q.id, t });
        });
        match r {
            Ok(out) => {
                let tokens = {
                    let mut rec = record.lock().unwrap_or_else(|e| e.into_inner());
                    rec.account(&format!("query {}", q.id), &out, p.max_new_tokens)
                };
                let t = out.t_done.unwrap_or_else(Instant::now);
                let _ = events.send(Ev::Done {
                    id: q.id,
                    t,
                    tokens,
                });
            }
            Err(e) => {
                if let Ok(mut r) = record.lock() {
                    r.failed.push(format!("query {}: {e}", q.id));
                }
                let _ = events.send(Ev::Fail {
                    id: q.id,
                    reason: e.to_string(),
                });
            }
        }
    }
}

/// An OpenAI-compatible server as the system under test.
pub struct HttpSut {
    name: String,
    pub model: ServerModel,
    jobs: Option<Sender<Query>>,
    events: Receiver<Ev>,
    workers: Vec<JoinHandle<()>>,
    /// The run clock's time at `anchor.1`.
    anchor: Option<(u64, Instant)>,
    pub record: Arc<Mutex<HttpRecord>>,
    pub config: HttpSutConfig,
}

impl HttpSut {
    /// Connects (asking `/v1/models`, which fails fast when nothing listens) and starts the
    /// pool: one worker for SingleStream, `concurrency` for Offline and Server.
    pub fn start(
        cfg: HttpSutConfig,
        scenario: Scenario,
        prompts: Vec<HttpPrompt>,
    ) -> Result<Self, HttpError> {
        let pool = match scenario {
            Scenario::SingleStream => 1,
            _ => cfg.concurrency.max(1),
        };
        let client = HttpClient::new(&cfg.base_url, pool, cfg.request_timeout, cfg.stall_timeout)
            .map_err(|reason| HttpError::BadResponse {
            url: cfg.base_url.clone(),
            reason,
        })?;
        let model = client.model()?;
        let name = client.sut_name(&model, cfg.api);
        let (jobs_tx, jobs_rx) = channel::<Query>();
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let (ev_tx, ev_rx) = channel();
        let record = Arc::new(Mutex::new(HttpRecord::default()));
        let prompts = Arc::new(prompts);
        let workers = (0..pool)
            .map(|k| {
                let (c, cfg2, m, p, j, e, r) = (
                    client.clone(),
                    cfg.clone(),
                    model.id.clone(),
                    prompts.clone(),
                    jobs_rx.clone(),
                    ev_tx.clone(),
                    record.clone(),
                );
                std::thread::Builder::new()
                    .name(format!("http-sut-{k}"))
                    .spawn(move || worker(c, cfg2, m, p, j, e, r))
            })
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| HttpError::BadResponse {
                url: cfg.base_url.clone(),
                reason: format!("starting the client threads: {e}"),
            })?;
        Ok(HttpSut {
            name,
            model,
            jobs: Some(jobs_tx),
            events: ev_rx,
            workers,
            anchor: None,
            record,
            config: cfg,
        })
    }

    /// Stops the pool (after the requests in flight).
    pub fn shutdown(&mut self) {
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }

    /// A copy of the record so far.
    pub fn record(&self) -> HttpRecord {
        self.record
            .lock()
            .map(|r| r.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    fn on_run_clock(&self, t: Instant) -> u64 {
        match self.anchor {
            Some((ns, at)) => match t.checked_duration_since(at) {
                Some(d) => ns + d.as_nanos() as u64,
                None => ns.saturating_sub(at.duration_since(t).as_nanos() as u64),
            },
            None => 0,
        }
    }
}

impl SystemUnderTest for HttpSut {
    fn name(&self) -> &str {
        &self.name
    }

    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        if self.anchor.is_none() {
            self.anchor = Some((responder.now_ns(), Instant::now()));
        }
        for q in queries {
            let sent = self.jobs.as_ref().is_some_and(|j| j.send(*q).is_ok());
            if !sent {
                responder.fail(q.id, "the HTTP client pool has stopped");
            }
        }
    }

    fn poll(&mut self, responder: &mut Responder<'_>) {
        while let Ok(ev) = self.events.try_recv() {
            match ev {
                Ev::Token { id, t } => responder.token_at(id, self.on_run_clock(t)),
                Ev::Done { id, t, tokens } => {
                    responder.complete_at(id, self.on_run_clock(t), tokens, None)
                }
                Ev::Fail { id, reason } => responder.fail(id, &reason),
            }
        }
    }
}

impl Drop for HttpSut {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_comes_from_the_servers_timings() {
        let mut out = StreamOutcome {
            usage: Some((120, 8)),
            ..Default::default()
        };
        assert_eq!(reused_tokens(&out), 0);
        out.timings = Some(json!({"prompt_n": 20, "predicted_n": 8}));
        assert_eq!(reused_tokens(&out), 100);
        out.timings = Some(json!({"prompt_n": 20, "cache_n": 96}));
        assert_eq!(reused_tokens(&out), 96);
    }
}
