//! `qwen2` (Qwen2, Qwen2.5): the llama layout with biases on Q, K and V (found by tensor)
//! and RoPE in the NeoX layout.

use super::Family;
use crate::error::Result;
use crate::gguf::GgufFile;
use crate::model::config::{ModelConfig, RopeLayout};

pub(super) struct Qwen2;

impl Family for Qwen2 {
    fn name(&self) -> &'static str {
        "qwen2"
    }

    fn configure(&self, _: &GgufFile, cfg: &mut ModelConfig) -> Result<()> {
        cfg.rope_layout = RopeLayout::Neox;
        Ok(())
    }
}
