//! The `pocketperf` harness library: SUT adapters, telemetry, devices, commands.
//!
//! Map (`docs/ARCHITECTURE.md` follows one `run` through it):
//! - [`cmd`] — the CLI: flag structs and their resolution, one file per command; `main`
//!   dispatches each to the module below that does the work;
//! - [`run`] — runs that fill a result directory: [`run::perf`] (SingleStream, Offline,
//!   Server) and [`run::dialogue`], repeated by [`run::run`] for `--repeat`;
//! - [`sut`] — systems under test: [`sut::prompts`] (the one text-to-tokens route, prompt
//!   libraries), [`sut::in_process`] (decoders), [`sut::process`] (`serve` as a child);
//! - [`outputs`] — result.json assembly, percentiles, tokens.csv, provenance, log header;
//! - [`trace`] — `trace.json`, the run as a Chrome/Perfetto trace;
//! - [`mmlu`] — MMLU-576 accuracy runs and their comparison;
//! - [`serve`] — `pocketperf serve`: protocol and line framing, server, client, faults;
//! - [`http`] — `serve --http` (OpenAI-compatible server) and the HTTP SUT's client;
//! - [`governor_hook`] — the thermal governor inside a decode loop;
//! - [`telemetry`] — probe, sampler, energy, attribution, a run's recorder;
//! - [`sim`] — simulated handsets and the governor's closed-loop simulation;
//! - [`soak`] — hours-long robustness runs through `serve`;
//! - [`farm`] — suites on many devices;
//! - [`interleave`] — `gate --interleave`: two binaries' runs alternated into replicates;
//! - [`tools`] — the work of the model commands (`model`, `tokenize`, `generate`, `logits`,
//!   `perplexity`, `bench` with its roofline probe);
//! - [`meta`], [`model_store`], [`progress`] — provenance, the model cache, terminal progress
//!   and a run's heartbeat;
//! - [`dir_lock`] — one writer per result directory, `--out` claimed or refused (`--force`);
//!   [`fuzz_bodies`] — the parsers' fuzz
//!   bodies.

pub mod cmd;
pub mod dir_lock;
pub mod farm;
pub mod fuzz_bodies;
pub mod governor_hook;
pub mod http;
pub mod interleave;
pub mod meta;
pub mod mmlu;
pub mod model_store;
pub mod outputs;
pub mod progress;
pub mod run;
pub mod serve;
pub mod sim;
pub mod soak;
pub mod sut;
pub mod telemetry;
pub mod tools;
pub mod trace;
