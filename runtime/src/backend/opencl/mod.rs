//! OpenCL backend: the same forward pass as [`crate::model`] for llama, qwen2 and gemma3, as
//! fused kernels over weights kept in ggml's block formats on the device (F32, F16, Q4_0,
//! Q4_1, Q5_0, Q8_0, Q4_K, Q6_K).
//!
//! * [`device`]: platform/device listing (`pocketperf probe`) and selection.
//! * `program`: the `.cl` sources (embedded with `include_str!`), specialised by `-D` constants.
//! * `weights`: zero-copy (`CL_MEM_USE_HOST_PTR`) or uploaded weight buffers.
//! * `forward`: [`ClCore`], the device KV rings of one or more sequences, activations and
//!   kernel launches of a pass; [`ClForward`], a session of its own (a one-sequence core);
//!   [`ClLane`], a session of a batch (batched decode: one pass, one decode token or prompt
//!   chunk of each sequence, each weight read once).
//! * [`canary`]: guard regions around every buffer a kernel writes (test/debug mode).
//!
//! A decoded token costs `5 × layers + 2` launches (embedding, five per layer, head), one
//! small host→device write (token id, position, slot, row table, rotary rows) and one
//! device→host read (logits).
//! The kernels run on PoCL in CI and are meant for Adreno/Mali GPUs; see docs/OPENCL.md.

pub mod canary;
pub mod device;
mod forward;
mod program;
mod weights;

pub use device::{ClDeviceInfo, ClPlatformInfo, list_devices};
pub use forward::{ClCore, ClForward, ClLane, ClSeq, ClSeqs};
pub use weights::WeightImport;

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::model::{Model, ModelConfig, SessionOptions};
use opencl3::command_queue::{CL_QUEUE_PROFILING_ENABLE, CommandQueue};
use opencl3::context::Context;
use opencl3::device::Device;
use opencl3::memory::{Buffer, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY};
use opencl3::program::Program;
use std::ffi::c_void;
use std::sync::Arc;

/// Environment variable that turns buffer canaries on (`1`) for any OpenCL engine.
pub const CANARY_ENV: &str = "POCKETPERF_CL_CANARIES";

/// How to open the OpenCL backend.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ClOptions {
    /// Platform: index or case-insensitive name substring (default: the first with a GPU).
    pub platform: Option<String>,
    /// Device: index within the platform(s) or name/type substring (default: first GPU,
    /// else first device).
    pub device: Option<String>,
    /// Guard regions around every written buffer, checked after each kernel (slow; tests).
    pub canaries: bool,
    /// Skip kernel profiling even where the device supports it.
    pub no_profiling: bool,
    /// How attention is computed.
    pub attention: ClAttention,
    /// Sum RMSNorm squares in compensated f32 even where the device has fp64 (the path of
    /// devices without it, e.g. Adreno; lets PoCL test it).
    pub no_fp64: bool,
}

/// The attention kernel a session uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClAttention {
    /// The CPU backend's order of operations, one work-group per (head, token): results
    /// equal the CPU's up to the device's `exp` (conformance; the default).
    #[default]
    Exact,
    /// Online softmax split over the sequence, merged in the output projection
    /// (flash-decoding; more parallel work on a GPU at long contexts).
    Split,
}

impl ClAttention {
    pub fn name(self) -> &'static str {
        match self {
            ClAttention::Exact => "exact",
            ClAttention::Split => "split",
        }
    }
}

impl std::str::FromStr for ClAttention {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "exact" => Ok(ClAttention::Exact),
            "split" => Ok(ClAttention::Split),
            _ => Err(Error::InvalidArgument {
                what: "cl-attention".into(),
                reason: format!("`{s}`: expected exact or split"),
            }),
        }
    }
}

/// What the backend reports about itself (bench rows, result files, logs).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClSummary {
    pub platform: String,
    pub device: String,
    pub device_type: String,
    pub driver_version: String,
    pub weights_import: WeightImport,
    pub weight_bytes: u64,
    pub uploaded_bytes: u64,
    pub tile_tokens: usize,
    pub attention: ClAttention,
    pub profiling: bool,
    pub canaries: bool,
}

/// Engine-wide OpenCL state shared by its sessions.
pub(crate) struct Inner {
    pub ctx: Context,
    pub dev: Device,
    pub queue: CommandQueue,
    pub program: Program,
    pub device: ClDeviceInfo,
    pub platform: ClPlatformInfo,
    pub config: ModelConfig,
    pub weights: weights::Weights,
    pub plan: program::BuildPlan,
    /// Stands in for absent bias vectors.
    pub dummy: Buffer<u8>,
    pub profiling: bool,
    pub canaries: bool,
    pub attention: ClAttention,
    /// Bytes of each guard region in canary mode.
    pub guard_size: usize,
    pub build_options: String,
    /// RoPE inverse frequencies of the global layers and, if the model has sliding-window
    /// layers, of those (the CPU model's own tables).
    pub inv_freq: Vec<f32>,
    pub inv_freq_swa: Option<Vec<f32>>,
}

/// A model's weights and kernels on one OpenCL device.
pub struct ClEngine {
    inner: Arc<Inner>,
}

/// Refuses, before touching a device, a model whose computation the kernels do not
/// implement: an architecture other than llama, qwen2 and gemma3, RoPE frequency scaling, and
/// weight types without a kernel. (Gemma 3's per-head Q/K norms, post-norms, scaled
/// embeddings, GeGLU, sliding-window layers with their own RoPE base and tied output run.)
pub fn check_model(model: &Model) -> Result<()> {
    let c = model.config();
    let unsupported = |what: &str| {
        Err(Error::OpenCl(format!(
            "architecture `{}`: {what} is not implemented by the OpenCL kernels; run it on \
             the CPU backend",
            c.arch
        )))
    };
    if !matches!(c.arch.as_str(), "llama" | "qwen2" | "gemma3") {
        return unsupported("this architecture");
    }
    if c.rope_scaling != crate::model::RopeScaling::None {
        return unsupported("RoPE frequency scaling");
    }
    for t in model.gguf().tensors() {
        let matrix = t.dims.len() == 2;
        if matrix && !weights::is_matrix_type(t.ty) {
            return Err(Error::UnsupportedType {
                name: t.name.clone(),
                ty: format!(
                    "{} (no OpenCL kernel; run it on the CPU backend)",
                    t.ty.name()
                ),
            });
        }
    }
    Ok(())
}

fn cl_err(what: &str) -> impl FnOnce(opencl3::error_codes::ClError) -> Error + '_ {
    move |e| Error::OpenCl(format!("{what}: {e} ({})", e.0))
}

impl ClEngine {
    /// Selects the device, builds the kernels for this model and imports the weights.
    pub fn new(model: &Model, opts: &ClOptions) -> Result<Self> {
        check_model(model)?;
        let (platform, dev, info) =
            device::select(opts.platform.as_deref(), opts.device.as_deref())?;
        let c = model.config().clone();
        program::check_shape(&c, &info)?;
        let gguf: &Arc<GgufFile> = model.gguf();
        let ctx = Context::from_device(&dev).map_err(cl_err("creating the context"))?;
        let profiling = info.profiling && !opts.no_profiling;
        let props = if profiling {
            CL_QUEUE_PROFILING_ENABLE
        } else {
            0
        };
        let queue = create_queue(&ctx, &dev, props)?;
        let weights = weights::import(&ctx, gguf, &c, info.mem_base_addr_align as usize)?;
        let forms = forms_of(&weights);
        if let Some(l) = weights.layers.iter().position(|l| {
            program::form_of(weights.get(l.w_gate).ty) != program::form_of(weights.get(l.w_up).ty)
        }) {
            return Err(Error::OpenCl(format!(
                "layer {l}: ffn_gate ({}) and ffn_up ({}) need different activation forms; the \
                 fused gate/up kernel needs both quantized or both float",
                weights.get(weights.layers[l].w_gate).ty.name(),
                weights.get(weights.layers[l].w_up).ty.name()
            )));
        }
        let plan = program::BuildPlan::new(&c, &forms, &info)?;
        let mut build_options = program::build_options(&c, &plan, &info);
        if opts.no_fp64 {
            build_options += " -DNO_FP64=1";
        }
        let program = program::build(&ctx, &build_options)?;
        let dummy = const_buffer(&ctx, &[0u8; 4], "dummy")?;
        let canaries = opts.canaries || std::env::var(CANARY_ENV).is_ok_and(|v| v == "1");
        let guard_size = (info.mem_base_addr_align as usize).max(4096);
        let c_swa = (0..model.config().n_layers).find(|&l| model.config().is_swa(l));
        Ok(ClEngine {
            inner: Arc::new(Inner {
                ctx,
                dev,
                queue,
                program,
                device: info,
                platform,
                config: c,
                weights,
                plan,
                dummy,
                profiling,
                canaries,
                attention: opts.attention,
                guard_size,
                build_options,
                inv_freq: model.rope_inv_freq().to_vec(),
                inv_freq_swa: c_swa.map(|l| model.rope_inv_freq_for(l).to_vec()),
            }),
        })
    }

    /// A new sequence on this device.
    pub fn session(&self, opts: SessionOptions) -> Result<ClForward> {
        ClForward::new(self.inner.clone(), opts)
    }

    /// The shared state of a batch: `sequences` KV rings of `max_seq_len` slots and passes
    /// of up to `max_rows` tokens ([`ClLane`] sessions run in it).
    pub fn batch(&self, sequences: usize, max_rows: usize, max_seq_len: usize) -> Result<ClCore> {
        ClCore::new(
            self.inner.clone(),
            SessionOptions {
                max_seq_len,
                max_batch: max_rows,
                ..Default::default()
            },
            sequences,
        )
    }

    pub fn summary(&self) -> ClSummary {
        let i = &self.inner;
        ClSummary {
            platform: i.platform.name.clone(),
            device: i.device.name.clone(),
            device_type: i.device.device_type.clone(),
            driver_version: i.device.driver_version.clone(),
            weights_import: i.weights.import,
            weight_bytes: i.weights.bytes,
            uploaded_bytes: i.weights.uploaded,
            tile_tokens: i.plan.tt,
            attention: i.attention,
            profiling: i.profiling,
            canaries: i.canaries,
        }
    }

    pub fn device(&self) -> &ClDeviceInfo {
        &self.inner.device
    }

    pub fn weights_import(&self) -> WeightImport {
        self.inner.weights.import
    }

    /// The `-D` options the kernels were built with.
    pub fn build_options(&self) -> &str {
        &self.inner.build_options
    }

    /// The engine's context and queue, for diagnostics that run their own kernels (the
    /// canary self-test).
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    pub fn queue(&self) -> &CommandQueue {
        &self.inner.queue
    }

    /// Bytes of each guard region in canary mode.
    pub fn guard_size(&self) -> usize {
        self.inner.guard_size
    }
}

#[allow(deprecated)]
fn create_queue(ctx: &Context, dev: &Device, props: u64) -> Result<CommandQueue> {
    // clCreateCommandQueue exists on every OpenCL version (1.2 phones included).
    // SAFETY: `dev` is the device the context was created from.
    unsafe { CommandQueue::create(ctx, dev.id(), props) }.map_err(cl_err("creating the queue"))
}

fn const_buffer(ctx: &Context, data: &[u8], what: &str) -> Result<Buffer<u8>> {
    // SAFETY: COPY_HOST_PTR copies `data.len()` bytes from a live slice before returning.
    unsafe {
        Buffer::<u8>::create(
            ctx,
            CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
            data.len(),
            data.as_ptr() as *mut c_void,
        )
    }
    .map_err(|e| Error::OpenCl(format!("uploading {what}: {e}")))
}

fn forms_of(w: &weights::Weights) -> program::Forms {
    let f = |i: usize| program::form_of(w.get(i).ty);
    let mut forms = program::Forms {
        head: vec![f(w.output)],
        ..Default::default()
    };
    for l in &w.layers {
        forms.qkv.extend([f(l.wq), f(l.wk), f(l.wv)]);
        forms.out.push(f(l.wo));
        forms.ffn.push(f(l.w_gate));
        forms.down.push(f(l.w_down));
    }
    forms
}
