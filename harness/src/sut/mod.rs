//! Systems under test: what the scenario engine issues queries to.
//!
//! - [`prompts`] — the one route from text to tokens, and the prompt libraries;
//! - [`in_process`] — the runtime in this process (sequential and batched decoders);
//! - [`process`] — `pocketperf serve` as a child process, over [`crate::serve::client`];
//! - [`http`] — any OpenAI-compatible server over HTTP (`--sut http://HOST:PORT`);
//! - [`faults`] — page faults per query of either, around the engine's calls.
//!
//! An SUT behind another transport (a remote device) is one more module here.

pub mod faults;
pub mod http;
pub mod in_process;
pub mod process;
pub mod prompts;
