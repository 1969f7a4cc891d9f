//! The `gguf_open` fuzz target's library: the body and seeds of the dev-only
//! `pocketperf-testkit` crate (`testkit/src/fuzz.rs`, with the synthetic GGUF builders of
//! `testkit/src/gguf.rs`), compiled in by `#[path]` so this workspace of its own builds
//! with the lock file it has. The runtime's tests use the same code through the testkit
//! dev-dependency.

#[path = "../../testkit/src/gguf.rs"]
pub mod gguf;

#[path = "../../testkit/src/fuzz.rs"]
mod body;

pub use body::{Touched, open_and_touch, seeds};
pub use gguf::{Rng, TinyLlama, synthetic_all_types, tiny_llama};
