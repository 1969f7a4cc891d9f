//! Model families. Each file describes one architecture: its RoPE layout, the metadata keys
//! it reads beyond the common ones of [`super::config`], and which of the shared layer
//! features (biases, Q/K norms, post-norms, GeGLU, sliding-window layers) it switches on.
//! The forward pass ([`super::pass`]) and weight loading ([`super::weights`]) follow those
//! switches, so a new family is one new file plus its line in [`FAMILIES`].

mod gemma3;
mod llama;
mod qwen2;

use super::config::ModelConfig;
use crate::error::Result;
use crate::gguf::GgufFile;

/// One architecture (`general.architecture`).
pub(crate) trait Family: Sync {
    /// The `general.architecture` value.
    fn name(&self) -> &'static str;
    /// Keys (suffixes after `{arch}.`) this family implements that are otherwise refused.
    fn consumed_keys(&self) -> &'static [&'static str] {
        &[]
    }
    /// Adjusts the common configuration to this family, reading its own keys.
    fn configure(&self, g: &GgufFile, cfg: &mut ModelConfig) -> Result<()>;
}

/// Every supported family.
static FAMILIES: &[&dyn Family] = &[&llama::Llama, &qwen2::Qwen2, &gemma3::Gemma3];

/// The family of an architecture name.
pub(crate) fn family(arch: &str) -> Option<&'static dyn Family> {
    FAMILIES.iter().copied().find(|f| f.name() == arch)
}

/// Names of the supported architectures.
pub fn supported() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.name()).collect()
}
