//! `pocketperf serve --http`: the runtime behind an OpenAI-compatible HTTP/1.1 server
//! (`docs/HTTP.md`). hyper serves the connections on one tokio thread; the model runs on the
//! calling thread in [`super::worker`] (continuous batching). Routes:
//!
//! - `POST /v1/completions`, `POST /v1/chat/completions` — streamed (SSE) or whole;
//! - `GET /v1/models` — the model id, with its SHA-256 and file type under `pocketperf`;
//! - `GET /health` — `ok` (or `stopping`) and the worker's counters: slots busy, queued,
//!   completed, cancelled, timed out.
//!
//! Limits: request bodies over `max_body_bytes` get 413; `max_tokens` over the limit 400; a
//! full queue 503 with `Retry-After`; a request past its deadline 504 (or, once streaming,
//! an error event). Every error is a JSON body `{"error": {"message", "type", "code"}}`.
//! SIGINT/SIGTERM stop the listener, let the requests in flight finish for the drain time,
//! cancel what is left and return.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use pocketperf_runtime::session::Engine;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::api::{
    Api, ApiError, ResponseIds, finish_chunk, full_response, parse_request, token_chunk,
    usage_chunk,
};
use super::sse;
use super::worker::{GenEvent, GenRequest, TokenOut, WorkerConfig, WorkerState, run_worker};

/// Settings of `serve --http`.
#[derive(Debug, Clone)]
pub struct HttpServeConfig {
    pub addr: SocketAddr,
    /// Sequences decoded together.
    pub slots: usize,
    /// Tokens per sequence (prompt plus output).
    pub ctx: usize,
    pub max_tokens_limit: usize,
    pub max_body_bytes: usize,
    /// From arrival to the last token.
    pub request_timeout: Duration,
    /// Requests waiting for a slot beyond which new ones get 503.
    pub max_queue: usize,
    /// How long requests in flight may run on after SIGTERM.
    pub drain: Duration,
    /// Keep each slot's KV between requests and reuse the longest common prompt prefix.
    pub prefix_reuse: bool,
}

/// What the server says about its model (`/v1/models`).
#[derive(Debug, Clone)]
pub struct ServedModel {
    pub id: String,
    pub sha256: String,
    pub file_type: String,
    pub path: String,
}

struct Shared {
    cfg: HttpServeConfig,
    model: ServedModel,
    queue: SyncSender<GenRequest>,
    state: Arc<WorkerState>,
    next_id: AtomicU64,
    in_flight: AtomicUsize,
}

/// A response body: whole, or an event stream fed by the worker.
enum OutBody {
    Full(Option<Bytes>),
    Stream(Box<StreamBody>),
}

struct StreamBody {
    rx: UnboundedReceiver<GenEvent>,
    api: Api,
    ids: ResponseIds,
    include_usage: bool,
    /// Bytes of the first event, already received before the headers went out.
    pending: Option<Bytes>,
    first: bool,
    done: bool,
    shared: Arc<Shared>,
}

impl Drop for StreamBody {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn sse_json(v: &Value) -> Vec<u8> {
    sse::event(&v.to_string())
}

impl StreamBody {
    /// SSE bytes of one worker event; `done` once the stream is over.
    fn encode(&mut self, e: GenEvent) -> Bytes {
        match e {
            GenEvent::Token(t) => {
                let b = sse_json(&token_chunk(self.api, &self.ids, &t, self.first));
                self.first = false;
                Bytes::from(b)
            }
            GenEvent::Done(f) => {
                self.done = true;
                let mut b = sse_json(&finish_chunk(self.api, &self.ids, &f));
                if self.include_usage {
                    b.extend(sse_json(&usage_chunk(self.api, &self.ids, &f)));
                }
                b.extend(sse::event("[DONE]"));
                Bytes::from(b)
            }
            GenEvent::Failed { status, message } => {
                self.done = true;
                let mut b = sse_json(&ApiError::new(status, message).body());
                b.extend(sse::event("[DONE]"));
                Bytes::from(b)
            }
        }
    }
}

impl Body for OutBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            OutBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            OutBody::Stream(s) => {
                if let Some(b) = s.pending.take() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                if s.done {
                    return Poll::Ready(None);
                }
                match s.rx.poll_recv(cx) {
                    Poll::Ready(Some(e)) => Poll::Ready(Some(Ok(Frame::data(s.encode(e))))),
                    Poll::Ready(None) => {
                        // The worker dropped the request without a last event.
                        let b = s.encode(GenEvent::Failed {
                            status: 500,
                            message: "the generation ended without a result".into(),
                        });
                        Poll::Ready(Some(Ok(Frame::data(b))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            OutBody::Full(b) => b.is_none(),
            OutBody::Stream(s) => s.done && s.pending.is_none(),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            OutBody::Full(Some(b)) => hyper::body::SizeHint::with_exact(b.len() as u64),
            OutBody::Full(None) => hyper::body::SizeHint::with_exact(0),
            OutBody::Stream(_) => hyper::body::SizeHint::default(),
        }
    }
}

fn json_response(status: u16, v: &Value) -> Response<OutBody> {
    let mut r = Response::new(OutBody::Full(Some(Bytes::from(v.to_string()))));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error_response(e: &ApiError) -> Response<OutBody> {
    let mut r = json_response(e.status, &e.body());
    if e.status == 503 {
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

fn models_body(m: &ServedModel, cfg: &HttpServeConfig) -> Value {
    json!({"object": "list", "data": [{
        "id": m.id, "object": "model", "created": 0, "owned_by": "pocketperf",
        "pocketperf": {
            "sha256": m.sha256, "file_type": m.file_type, "file": m.path,
            "server": format!("pocketperf {}", crate::meta::TOOL_VERSION),
            "slots": cfg.slots, "ctx": cfg.ctx, "max_tokens": cfg.max_tokens_limit,
            "prefix_reuse": cfg.prefix_reuse,
        },
    }]})
}

fn health_body(sh: &Shared) -> Value {
    let s = &sh.state;
    let stopping = s.stopping.load(Ordering::Relaxed);
    json!({
        "status": if stopping { "stopping" } else { "ok" },
        "slots_total": s.slots_total.load(Ordering::Relaxed),
        "slots_busy": s.slots_busy.load(Ordering::Relaxed),
        "queued": s.queued.load(Ordering::Relaxed),
        "completed": s.completed.load(Ordering::Relaxed),
        "cancelled": s.cancelled.load(Ordering::Relaxed),
        "timed_out": s.timed_out.load(Ordering::Relaxed),
        // This process's memory and page faults (what `soak --sut http://…` samples).
        "pocketperf": {
            "pid": std::process::id(),
            "memory": crate::serve::server::memory_stats(),
        },
    })
}

/// Reads the body within the size limit.
async fn read_body(req: Request<Incoming>, limit: usize) -> Result<Bytes, ApiError> {
    let too_big = || {
        ApiError::new(
            413,
            format!("the request body exceeds this server's limit of {limit} bytes"),
        )
    };
    if let Some(n) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok())
        && n > limit as u64
    {
        return Err(too_big());
    }
    match Limited::new(req.into_body(), limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_big()),
        Err(e) => Err(ApiError::bad(format!("reading the request body: {e}"))),
    }
}

async fn generate(
    api: Api,
    req: Request<Incoming>,
    sh: Arc<Shared>,
) -> Result<Response<OutBody>, ApiError> {
    let t0 = Instant::now();
    if sh.state.stopping.load(Ordering::Relaxed) {
        return Err(ApiError::new(503, "the server is shutting down"));
    }
    let body = read_body(req, sh.cfg.max_body_bytes).await?;
    let p = parse_request(api, &body, sh.cfg.max_tokens_limit)?;
    let (tx, mut rx) = unbounded_channel();
    let deadline = t0 + sh.cfg.request_timeout;
    let g = GenRequest {
        prompt: p.prompt,
        max_tokens: p.max_tokens,
        ignore_eos: p.ignore_eos,
        sampling: p.sampling,
        top_logprobs: p.top_logprobs,
        logprob_ids: p.logprob_ids,
        deadline,
        events: tx,
    };
    sh.state.queued.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = sh.queue.try_send(g) {
        sh.state.queued.fetch_sub(1, Ordering::Relaxed);
        return Err(match e {
            TrySendError::Full(_) => ApiError::new(
                503,
                format!("{} requests are already waiting", sh.cfg.max_queue),
            ),
            TrySendError::Disconnected(_) => ApiError::new(503, "the model worker has stopped"),
        });
    }
    let n = sh.next_id.fetch_add(1, Ordering::Relaxed);
    let ids = ResponseIds {
        id: format!("{}-{n}", if api == Api::Chat { "chatcmpl" } else { "cmpl" }),
        created: chrono::Utc::now().timestamp(),
        model: sh.model.id.clone(),
    };
    // A little beyond the worker's own deadline: the worker reports its timeouts itself.
    let wait = sh.cfg.request_timeout + Duration::from_secs(2);
    let timed_out = || ApiError::new(504, "request timed out");
    if p.stream {
        // The first event decides the status: an error before any token is the request's.
        let first =
            match tokio::time::timeout_at((deadline + Duration::from_secs(2)).into(), rx.recv())
                .await
            {
                Err(_) => return Err(timed_out()),
                Ok(None) => {
                    return Err(ApiError::new(500, "the generation ended without a result"));
                }
                Ok(Some(GenEvent::Failed { status, message })) => {
                    return Err(ApiError::new(status, message));
                }
                Ok(Some(e)) => e,
            };
        sh.in_flight.fetch_add(1, Ordering::Relaxed);
        let mut s = StreamBody {
            rx,
            api,
            ids,
            include_usage: p.include_usage,
            pending: None,
            first: true,
            done: false,
            shared: sh.clone(),
        };
        s.pending = Some(s.encode(first));
        let mut r = Response::new(OutBody::Stream(Box::new(s)));
        let h = r.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        h.insert("cache-control", HeaderValue::from_static("no-cache"));
        return Ok(r);
    }
    let collect = async {
        let mut tokens: Vec<TokenOut> = Vec::new();
        loop {
            match rx.recv().await {
                Some(GenEvent::Token(t)) => tokens.push(t),
                Some(GenEvent::Done(f)) => return Ok((tokens, f)),
                Some(GenEvent::Failed { status, message }) => {
                    return Err(ApiError::new(status, message));
                }
                None => return Err(ApiError::new(500, "the generation ended without a result")),
            }
        }
    };
    match tokio::time::timeout(wait, collect).await {
        Err(_) => Err(timed_out()),
        Ok(Err(e)) => Err(e),
        Ok(Ok((tokens, f))) => Ok(json_response(200, &full_response(api, &ids, &tokens, &f))),
    }
}

async fn handle(req: Request<Incoming>, sh: Arc<Shared>) -> Result<Response<OutBody>, Infallible> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let route = match path.as_str() {
        "/health" => Some((Method::GET, None)),
        "/v1/models" => Some((Method::GET, None)),
        "/v1/completions" => Some((Method::POST, Some(Api::Completions))),
        "/v1/chat/completions" => Some((Method::POST, Some(Api::Chat))),
        _ => None,
    };
    let Some((want, api)) = route else {
        return Ok(error_response(&ApiError::new(
            404,
            format!("no route {path}"),
        )));
    };
    if method != want {
        return Ok(error_response(&ApiError::new(
            405,
            format!("{path} takes {want}, not {method}"),
        )));
    }
    Ok(match (path.as_str(), api) {
        ("/health", _) => json_response(200, &health_body(&sh)),
        ("/v1/models", _) => json_response(200, &models_body(&sh.model, &sh.cfg)),
        (_, Some(api)) => generate(api, req, sh)
            .await
            .unwrap_or_else(|e| error_response(&e)),
        _ => error_response(&ApiError::new(404, format!("no route {path}"))),
    })
}

/// Accepts connections until `stop()` says so, then waits for the streams in flight to end
/// (the worker finishes or cancels them) for at most `drain` plus a second.
async fn accept_loop(
    listener: std::net::TcpListener,
    sh: Arc<Shared>,
    stop: impl Fn() -> bool,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    loop {
        tokio::select! {
            acc = listener.accept() => {
                let Ok((stream, _)) = acc else { continue };
                let sh = sh.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(req, sh.clone()));
                    // A connection error (client gone, malformed request) ends this
                    // connection only; hyper has answered what it could.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                if stop() { break; }
            }
        }
    }
    drop(listener);
    sh.state.stopping.store(true, Ordering::Relaxed);
    let until = Instant::now() + sh.cfg.drain + Duration::from_secs(1);
    while Instant::now() < until
        && (sh.in_flight.load(Ordering::Relaxed) > 0
            || sh.state.slots_busy.load(Ordering::Relaxed) > 0)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Serves `engine` on `listener` until `stop()` (polled every 50 ms) returns true: the HTTP
/// side on a tokio thread, the model on this one.
pub fn serve(
    engine: &Engine,
    listener: std::net::TcpListener,
    cfg: HttpServeConfig,
    model: ServedModel,
    stop: impl Fn() -> bool + Send + 'static,
) -> anyhow::Result<()> {
    let (queue, rx) = std::sync::mpsc::sync_channel(cfg.max_queue.max(1));
    let state = Arc::new(WorkerState::default());
    let sh = Arc::new(Shared {
        cfg: cfg.clone(),
        model,
        queue,
        state: state.clone(),
        next_id: AtomicU64::new(0),
        in_flight: AtomicUsize::new(0),
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let http = std::thread::Builder::new()
        .name("http".into())
        .spawn(move || rt.block_on(accept_loop(listener, sh, stop)))?;
    let wcfg = WorkerConfig {
        slots: cfg.slots,
        ctx: cfg.ctx,
        drain: cfg.drain,
        prefix_reuse: cfg.prefix_reuse,
    };
    // The worker returns once the HTTP side is gone (its queue closed) or, after a stop,
    // once the requests in flight are done or cancelled.
    let worked = run_worker(engine, wcfg, state, rx);
    let served = http
        .join()
        .map_err(|_| anyhow::anyhow!("the HTTP thread panicked"))?;
    worked?;
    served?;
    Ok(())
}
