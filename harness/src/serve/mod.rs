//! `pocketperf serve`: the runtime as a child-process system under test, speaking
//! newline-delimited JSON on stdin/stdout (`docs/PROTOCOL.md`). Running the model in another
//! process isolates crashes (a soak records them and restarts the server), and the same
//! protocol carries a run to a remote device (`adb shell pocketperf serve`).
//!
//! - [`protocol`]: requests, events, error codes and the line framing, shared by both ends;
//! - [`server`]: the serving loop;
//! - [`client`]: the client, [`client::ServeClient`] (child process, timeouts, crash
//!   reports), used by the child-process SUT ([`crate::sut::process`]) and the soak;
//! - [`fault`]: fault injection for robustness tests (`POCKETPERF_FAULT`);
//! - [`strict_json`]: request JSON with duplicate keys refused.

pub mod client;
pub mod fault;
pub mod protocol;
pub mod server;
pub mod strict_json;

pub use fault::{FAULT_ENV, FaultSpec, Faults};
pub use protocol::{
    ErrorCode, Event, LoadRequest, Message, PROTOCOL, PROTOCOL_VERSION, PromptSpec, QueryRequest,
    Request, ScoreRequest, ScoredContinuation,
};
pub use server::{Server, memory_stats};
