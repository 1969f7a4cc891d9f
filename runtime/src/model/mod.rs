//! The model: configuration from GGUF metadata, weight views into the mapping, and the
//! forward pass (batched prefill, decode, and batched decode of several sequences) over
//! ring KV caches.
//!
//! Families (`llama`, `qwen2`, `gemma3`; see [`arch`]) switch on shared layer features:
//! GQA, RMSNorm, RoPE (adjacent-pair or NeoX layout; Llama 3.x frequency factors, linear
//! scaling), Q/K/V biases, per-head Q/K RMSNorm, post-attention and post-FFN norms, SwiGLU
//! or GeGLU, scaled embeddings, tied or separate output, and sliding-window local layers
//! with their own RoPE base whose keys and values live on a window-sized ring. The residual
//! stream stays in f32. Matrix products quantize their activation rows once per input
//! (Q8_0/Q8_1 values, in the packed layout on the AVX-512 tier) and run the integer kernels
//! of [`crate::quant`]: the same numerics as llama.cpp's CPU backend, up to summation order.
//! Attention reads f16 keys and values and accumulates in f32.
//!
//! # Layout
//! - [`config`]: hyper-parameters and what derives from them;
//! - `metadata`: reading them from GGUF metadata, and the refusal of metadata this runtime
//!   does not implement;
//! - [`arch`]: one file per family;
//! - `weights`: the loaded [`Model`] and its tensor views;
//! - `layers`: the shared operations (norms, RoPE, activations, pool jobs);
//! - `workspace`: scratch buffers allocated once per session;
//! - `pass`: one forward pass over all layers (the schedule below);
//! - `pass_io`: what a pass reads and reports outside its workspace (the KV rings it
//!   reaches through `KvAccess`, the work [`Counters`]);
//! - `forward`: [`Forward`], the state of one sequence; `batch`: [`BatchForward`] (batched
//!   decode, and mixed passes of prompt chunks and decode tokens).
//!
//! # Schedule of one layer
//! Each step is one job on the persistent pool (or runs on the calling thread when it is too
//! small to share), and the pool's join is the only barrier:
//!
//! 1. RMSNorm fused with activation quantization (one pass per row).
//! 2. Q, K and V in one job over the concatenated rows of the three matrices; bias, Q/K norm
//!    and RoPE are applied by the worker that produced each head. K and V are then written
//!    to the layer's ring (the window-sized one for a local layer).
//! 3. Attention over (row, KV head) tasks; a prefill chunk of one sequence instead converts
//!    each KV head's keys once into a transposed f32 tile shared by a block of queries. A
//!    batched pass may mix sequences (prompt chunks of some, decode rows of others): blocks
//!    of rows never span two sequences.
//! 4. Output projection accumulated straight into the residual stream (or, with
//!    post-norms, into scratch that is normalized and then added).
//! 5. RMSNorm + quantization, then gate and up in one job whose workers also apply the
//!    gated activation and quantize their slice of the result for the down projection.
//! 6. Down projection accumulated into the residual stream (post-norm as in 4).
//!
//! Work inside a job is shared out in chunks through an atomic counter, so a worker that
//! the OS delays does not stall the others. Nothing on these paths allocates.

pub mod arch;
pub mod attention;
mod batch;
pub mod config;
mod forward;
mod layers;
mod metadata;
mod pass;
mod pass_io;
mod weights;
mod workspace;

pub use crate::quant::act::gelu_tanh;
pub use batch::{BatchForward, SeqSet};
pub use config::{FfnAct, ModelConfig, RopeLayout, RopeScaling};
pub(crate) use forward::set_logits_all;
pub use forward::{Forward, SessionOptions};
pub use layers::{rms_norm, rope, silu};
pub use pass_io::Counters;
pub use weights::{LayerWeights, Model};
