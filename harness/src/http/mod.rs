//! HTTP in both directions (`docs/HTTP.md`): the runtime served with an OpenAI-compatible API
//! (`pocketperf serve --http`), and the client side the HTTP system under test uses
//! ([`crate::sut::http`]) to measure any server with that API.
//!
//! - [`api`]: request parsing and validation, response and chunk objects;
//! - [`sse`]: server-sent events framing (encoder and incremental decoder);
//! - [`worker`]: the model thread, continuous batching over the requests in flight;
//! - [`server`]: hyper on a tokio thread, routes, limits, shutdown;
//! - [`client`]: a blocking client (ureq) for completions, chat and `/v1/models`, timing
//!   each streamed token on arrival.

pub mod api;
pub mod client;
pub mod server;
pub mod sse;
pub mod worker;
