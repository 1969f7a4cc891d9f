//! PocketPerf runtime: a complete on-device LLM inference engine.
//!
//! The runtime knows nothing of benchmarks. It owns the model file (`gguf`), the text codec
//! (`tokenizer`), the numeric kernels (`quant`, `pool`), the forward pass (`model`), the
//! preallocated ring KV cache (`kv`), the prefill/decode API with per-token timing
//! (`session`) and the PID thermal governor (`governor`).
//!
//! Map: [`gguf`] + [`ggml_type`] (model file) → [`tokenizer`] (text ↔ ids) → [`model`]
//! (forward pass over [`quant`] kernels on the [`pool`], KV in [`kv`], dispatched through
//! [`backend`]: CPU or OpenCL) → [`session`] (`Engine`, `Session`, batched decode, sampling)
//! → [`perplexity`] (llama-perplexity's protocol over an engine);
//! [`governor`] (controllers in `pid`/`step_wise`, actuators, sysfs sensor and caps) throttles
//! a decode loop from outside; [`residency`] probes, evicts, locks and prefaults model
//! mappings; [`error`] is the crate's one error type.

pub mod backend;
pub mod error;
pub mod ggml_type;
pub mod gguf;
pub mod governor;
pub mod kv;
pub mod model;
pub mod perplexity;
pub mod pool;
pub mod quant;
pub mod residency;
pub mod session;
pub mod tokenizer;

pub use error::{Error, Result};
pub use ggml_type::GgmlType;
