//! The kernel program: `.cl` sources embedded at build time, specialised to the model's
//! dimensions and the device's local memory with `-D` constants, compiled once per engine.
//! PoCL caches the compiled binaries under `POCL_CACHE_DIR`.

use super::device::ClDeviceInfo;
use crate::GgmlType;
use crate::error::{Error, Result};
use crate::model::{FfnAct, ModelConfig, RopeLayout};
use opencl3::context::Context;
use opencl3::program::Program;

/// The whole program: helpers, attention, layer kernels (one string: cl3 0.13 passes a
/// slice of several sources to clCreateProgramWithSource incorrectly).
pub(crate) const SOURCE: &str = concat!(
    include_str!("kernels/common.cl"),
    "\n",
    include_str!("kernels/attention.cl"),
    "\n",
    include_str!("kernels/layer.cl"),
);

/// Work-items (rows) per work-group of the matrix kernels.
pub(crate) const WG: usize = 64;
/// Most splits of the sequence one attention launch uses.
pub(crate) const NSPLIT_MAX: usize = 16;
/// Slots per split below which fewer splits are used.
pub(crate) const SPLIT_MIN_SLOTS: usize = 64;
/// Local memory the kernels plan for at most (keeps the tiling GPU-sized on PoCL too, where
/// local memory is emulated and nearly unlimited).
const LOCAL_BUDGET: u64 = 32 * 1024;

/// How a matrix wants its activations staged (mirrors `form_of` in common.cl).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// Q8_0/Q8_1-style 32-blocks (Q4_0, Q4_1, Q5_0, Q8_0 matrices).
    Int8,
    /// Q8_K 256-blocks (K-quant matrices); staged in the Int8 layout (see common.cl).
    Q8K,
    F16,
    F32,
}

pub(crate) fn form_of(ty: GgmlType) -> Form {
    match ty {
        GgmlType::F16 => Form::F16,
        GgmlType::F32 => Form::F32,
        GgmlType::Q4K | GgmlType::Q6K => Form::Q8K,
        _ => Form::Int8,
    }
}

/// Floats of local memory that staging `tt` tokens of `cols` activations takes.
fn stage_floats(tt: usize, cols: usize, form: Form) -> usize {
    match form {
        Form::Int8 | Form::Q8K => tt * cols / 4 + 2 * tt * (cols / 32),
        Form::F16 | Form::F32 => tt * cols,
    }
}

/// The staging forms each kernel must hold (over every layer).
#[derive(Clone, Debug, Default)]
pub(crate) struct Forms {
    pub qkv: Vec<Form>,
    pub out: Vec<Form>,
    pub ffn: Vec<Form>,
    pub down: Vec<Form>,
    pub head: Vec<Form>,
}

/// Compile-time constants of one build.
#[derive(Clone, Debug)]
pub(crate) struct BuildPlan {
    /// Tokens per tile of the matrix kernels.
    pub tt: usize,
    pub stage_qkv: usize,
    pub stage_out: usize,
    pub stage_ffn: usize,
    pub stage_down: usize,
    pub stage_head: usize,
}

impl BuildPlan {
    /// Largest tile (8, 4, 2 or 1 tokens) whose local memory fits the device.
    pub fn new(c: &ModelConfig, forms: &Forms, dev: &ClDeviceInfo) -> Result<Self> {
        let budget = dev.local_mem_bytes.min(LOCAL_BUDGET) as usize;
        let need = |v: &[Form], tt: usize, cols: usize| {
            v.iter()
                .map(|&f| stage_floats(tt, cols, f))
                .max()
                .unwrap_or(1)
                .max(1)
        };
        let hd = c.head_dim;
        for tt in [8usize, 4, 2, 1] {
            let p = BuildPlan {
                tt,
                stage_qkv: need(&forms.qkv, tt, c.n_embd),
                stage_out: need(&forms.out, tt, c.q_dim()),
                stage_ffn: need(&forms.ffn, tt, c.n_embd),
                stage_down: need(&forms.down, tt, c.n_ff),
                stage_head: need(&forms.head, tt, c.n_embd),
            };
            let bytes = [
                p.stage_qkv + 3 * tt * hd + 2 * tt,
                p.stage_out,
                p.stage_ffn + 2 * tt * WG + 2 * tt,
                p.stage_down,
                p.stage_head + 2 * tt * WG + 2 * tt,
                3 * hd,
            ]
            .into_iter()
            .max()
            .unwrap_or(0)
                * 4;
            if bytes <= budget {
                return Ok(p);
            }
        }
        Err(Error::OpenCl(format!(
            "device `{}` has {} bytes of local memory, too little to stage one token of this \
             model (width {}, feed-forward {})",
            dev.name, dev.local_mem_bytes, c.n_embd, c.n_ff
        )))
    }
}

/// Build options: the model's dimensions and the plan as `-D` constants.
pub(crate) fn build_options(c: &ModelConfig, plan: &BuildPlan, dev: &ClDeviceInfo) -> String {
    let mut o = String::from("-cl-std=CL1.2");
    if dev.correctly_rounded_div_sqrt {
        o += " -cl-fp32-correctly-rounded-divide-sqrt";
    }
    let defs: [(&str, usize); 21] = [
        ("N_EMBD", c.n_embd),
        ("N_FF", c.n_ff),
        ("Q_DIM", c.q_dim()),
        ("KV_DIM", c.kv_dim()),
        ("HEAD_DIM", c.head_dim),
        ("N_HEADS", c.n_heads),
        ("N_KV_HEADS", c.n_kv_heads),
        ("ROPE_HALF", c.rope_dims / 2),
        ("ROPE_NEOX", usize::from(c.rope_layout == RopeLayout::Neox)),
        ("TT", plan.tt),
        ("WG", WG),
        ("NSPLIT_MAX", NSPLIT_MAX),
        ("STAGE_QKV", plan.stage_qkv),
        ("STAGE_OUT", plan.stage_out),
        ("STAGE_FFN", plan.stage_ffn),
        ("STAGE_DOWN", plan.stage_down),
        ("STAGE_HEAD", plan.stage_head),
        ("ATT_BLOCK", crate::model::attention::BLOCK),
        ("ATT_CHUNK", crate::model::attention::CHUNK),
        ("QK_NORM", usize::from(c.qk_norm)),
        ("GELU", usize::from(c.ffn_act == FfnAct::GeluTanh)),
    ];
    for (k, v) in defs {
        o += &format!(" -D{k}={v}");
    }
    o
}

/// Compiles the embedded sources; a failure carries the compiler's log.
pub(crate) fn build(ctx: &Context, options: &str) -> Result<Program> {
    Program::create_and_build_from_source(ctx, SOURCE, options)
        .map_err(|log| Error::OpenCl(format!("building the kernels ({options}): {log}")))
}

/// Checks the model dimensions the kernels assume.
pub(crate) fn check_shape(c: &ModelConfig, dev: &ClDeviceInfo) -> Result<()> {
    let bad = |what: &str, v: usize, why: &str| {
        Err(Error::OpenCl(format!(
            "the OpenCL kernels need {what} {why} (this model has {v})"
        )))
    };
    for (what, v) in [
        ("the width", c.n_embd),
        ("the feed-forward width", c.n_ff),
        ("the head size", c.head_dim),
    ] {
        if v % 32 != 0 {
            return bad(what, v, "to be a multiple of 32");
        }
    }
    if c.head_dim > dev.max_work_group_size || WG > dev.max_work_group_size {
        return bad(
            "work-groups of the head size and 64",
            c.head_dim,
            &format!("to fit the device's {}", dev.max_work_group_size),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_stage_is_a_quarter_of_the_float_one_plus_scales() {
        // 8 tokens x 576: 4608 bytes of q, 2 x 8 x 18 floats of d and s.
        assert_eq!(stage_floats(8, 576, Form::Int8), 4608 / 4 + 288);
        assert_eq!(stage_floats(8, 576, Form::F32), 4608);
    }
}
