//! Test helpers shared by the workspace's tests (a dev-dependency only; never shipped).
//!
//! - [`gguf`] — synthetic GGUF files: every value type, tiny llama models of any shape;
//! - [`fuzz`] — the GGUF fuzz target's body ([`open_and_touch`]) and its seed corpus, also
//!   compiled into `fuzz/` by `#[path]`;
//! - [`paths`] — the shared reference material (`../shared`, `$POCKETPERF_SHARED`), the
//!   workspace root, the cached reference model;
//! - [`fixtures`] — copying a captured sysfs tree into a scratch directory, real symlinks
//!   and "link stand-in" files alike, and following either kind of link;
//! - [`process`] — a finished child process (status, stdout, stderr) as assertion text.
//!
//! Helpers panic with the path and the cause: they run only inside tests.

pub mod fixtures;
pub mod fuzz;
pub mod gguf;
pub mod paths;
pub mod process;

pub use fixtures::{Links, copy_tree, copy_tree_as, follow_link, link_target, set_link_target};
pub use fuzz::{Touched, open_and_touch, seeds};
pub use gguf::{Rng, TinyLlama, synthetic_all_types, tiny_llama};
pub use paths::{reference_model, shared_dir, workspace_root};
pub use process::output_text;
