//! `--backend cpu|opencl` and the OpenCL selection flags shared by every command that runs
//! the model (`generate`, `logits`, `perplexity`, `bench`, `run`).

use anyhow::{Context, Result};
use clap::Args;
use pocketperf_runtime::backend::opencl::{ClAttention, ClOptions};
use pocketperf_runtime::backend::{BackendChoice, BackendKind};
use pocketperf_runtime::session::Engine;

#[derive(Args, Debug, Clone, serde::Serialize)]
pub struct BackendArgs {
    /// Inference backend: cpu or opencl.
    #[arg(long, default_value = "cpu")]
    pub backend: BackendKind,
    /// OpenCL platform: index or name substring (default: the first with a GPU).
    #[arg(long)]
    pub cl_platform: Option<String>,
    /// OpenCL device: index or name/type substring (default: first GPU, else first device).
    #[arg(long)]
    pub cl_device: Option<String>,
    /// OpenCL attention kernel: exact (the CPU backend's order of operations) or split
    /// (online softmax split over the sequence).
    #[arg(long, default_value = "exact")]
    pub cl_attention: ClAttention,
    /// Guard regions around every OpenCL buffer, checked after each kernel (slow; debugging).
    #[arg(long)]
    pub cl_canaries: bool,
}

impl Default for BackendArgs {
    fn default() -> Self {
        BackendArgs {
            backend: BackendKind::Cpu,
            cl_platform: None,
            cl_device: None,
            cl_attention: ClAttention::Exact,
            cl_canaries: false,
        }
    }
}

impl BackendArgs {
    pub fn choice(&self) -> BackendChoice {
        match self.backend {
            BackendKind::Cpu => BackendChoice::Cpu,
            BackendKind::OpenCl => BackendChoice::OpenCl(ClOptions {
                platform: self.cl_platform.clone(),
                device: self.cl_device.clone(),
                canaries: self.cl_canaries,
                attention: self.cl_attention,
                no_profiling: false,
                no_fp64: false,
            }),
        }
    }

    /// Puts `engine` on the chosen backend; for OpenCL says on stderr which device runs it
    /// and how the weights got there.
    pub fn apply(&self, engine: Engine) -> Result<Engine> {
        let engine = engine
            .with_backend(&self.choice())
            .with_context(|| format!("opening the {} backend", self.backend))?;
        if let Some(cl) = engine.backend().opencl() {
            let s = cl.summary();
            eprintln!(
                "opencl: {} / {} ({}), weights {} ({:.1} MB{}), attention {}, {} tokens per tile",
                s.platform,
                s.device,
                s.device_type,
                s.weights_import.name(),
                s.weight_bytes as f64 / 1e6,
                if s.uploaded_bytes > 0 {
                    format!(", {:.1} MB copied", s.uploaded_bytes as f64 / 1e6)
                } else {
                    String::new()
                },
                s.attention.name(),
                s.tile_tokens,
            );
        }
        Ok(engine)
    }
}
