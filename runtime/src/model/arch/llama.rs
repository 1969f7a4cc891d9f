//! `llama` (Llama 2/3.x, SmolLM, Mistral without sliding window): RMSNorm, GQA, RoPE on
//! adjacent pairs, SwiGLU; Llama 3.x frequency factors through the common RoPE scaling.

use super::Family;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::model::config::{ModelConfig, RopeLayout};

pub(super) struct Llama;

impl Family for Llama {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn configure(&self, _: &GgufFile, cfg: &mut ModelConfig) -> Result<()> {
        cfg.rope_layout = RopeLayout::Normal;
        Ok(())
    }
}
