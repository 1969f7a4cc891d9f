//! The OpenCL kernels' block decoding, one weight type at a time, against the CPU backend's
//! scalar reference (`quant::scalar`, `quant::kquants`): random blocks of Q5_0, Q4_K and Q6_K
//! (and Q4_0 as a control) dotted with activation rows staged the kernels' way (Q8_0 blocks
//! for Q4_0/Q5_0, Q8_K for the K-quants, a zero 256-block included), and every element
//! dequantized as the embedding kernel does. Both compared bit for bit. The test kernel is
//! built from the kernels' own `common.cl`.

use half::f16;
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{CL_DEVICE_TYPE_ALL, Device};
use opencl3::kernel::{ExecuteKernel, Kernel};
use opencl3::memory::{Buffer, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE};
use opencl3::program::Program;
use opencl3::types::CL_BLOCKING;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::quant::kquants;
use pocketperf_runtime::quant::scalar;
use pocketperf_runtime::quant::{BlockQ8_0, BlockQ8K, QK, QK_K};
use std::ffi::c_void;

const TT: usize = 4;
const ROWS: usize = 64;
const COLS: usize = 512;
/// Tokens staged: a partial tile.
const NT: usize = 3;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Bytes per block and where its f16 scales sit.
fn layout(ty: GgmlType) -> (usize, usize, &'static [usize]) {
    match ty {
        GgmlType::Q4_0 => (18, QK, &[0]),
        GgmlType::Q5_0 => (22, QK, &[0]),
        GgmlType::Q4K => (144, QK_K, &[0, 2]),
        GgmlType::Q6K => (210, QK_K, &[208]),
        other => panic!("no layout for {other:?}"),
    }
}

/// `ROWS` rows of random blocks: random quants and scale bytes, finite f16 scales.
fn random_rows(ty: GgmlType, rng: &mut Rng) -> Vec<u8> {
    let (bytes, elems, scales) = layout(ty);
    let n = ROWS * COLS / elems;
    let mut w: Vec<u8> = (0..n * bytes).map(|_| rng.next() as u8).collect();
    for b in 0..n {
        for &off in scales {
            let d = f16::from_f32(0.002 + 0.03 * rng.unit().abs()).to_bits();
            w[b * bytes + off..b * bytes + off + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    w
}

/// What the CPU's scalar tier computes for row `r` with activation row `x`.
fn cpu_dot(ty: GgmlType, row: &[u8], x: &[f32]) -> f32 {
    match ty {
        GgmlType::Q4K | GgmlType::Q6K => {
            let mut a: Vec<BlockQ8K> = vec![bytemuck::Zeroable::zeroed(); COLS / QK_K];
            kquants::quantize_q8k(x, &mut a);
            kquants::vec_dot(ty, row, &a)
        }
        _ => {
            let mut a = vec![BlockQ8_0::default(); COLS / QK];
            scalar::quantize_q8_0(x, &mut a);
            if ty == GgmlType::Q5_0 {
                scalar::vec_dot_q5_0_q8_0(row, &a)
            } else {
                scalar::vec_dot_q4_0_q8_0(row, &a)
            }
        }
    }
}

fn cpu_dequant(ty: GgmlType, w: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0f32; ROWS * COLS];
    match ty {
        GgmlType::Q4K | GgmlType::Q6K => kquants::dequantize(ty, w, &mut out),
        GgmlType::Q5_0 => scalar::dequantize_q5_0(w, &mut out),
        _ => scalar::dequantize_q4_0(w, &mut out),
    }
    out
}

const KERNEL: &str = "
__kernel void dots(__global const uchar *w, int wtype, int rows, int cols,
                   __global const float *x, int nt, __global float *out, __global float *deq) {
    __local float st[STAGE_T];
    stage_rows(SRC_PLAIN, x, 0, 0, cols, 0, nt, 0, 0, 0, 0, 0, st, form_of(wtype));
    int row = get_global_id(0);
    if (row >= rows) return;
    float acc[TT];
    row_dot_tile(w, wtype, row, cols, st, nt, acc);
    for (int t = 0; t < nt; t++) out[t * rows + row] = acc[t];
    for (int i = 0; i < cols; i++) deq[(ulong)row * cols + i] = dequant_elem(w, wtype, cols, row, i);
}
";

fn buffer<T>(ctx: &Context, flags: u64, data: Option<&[T]>, n: usize) -> Buffer<T> {
    let (flags, ptr) = match data {
        Some(d) => (flags | CL_MEM_COPY_HOST_PTR, d.as_ptr() as *mut c_void),
        None => (flags, std::ptr::null_mut()),
    };
    // SAFETY (test): COPY_HOST_PTR copies `n` elements from a live slice of that length.
    unsafe { Buffer::<T>::create(ctx, flags, n, ptr) }.unwrap()
}

#[test]
fn q5_0_q4_k_and_q6_k_dots_and_dequantization_equal_the_cpu_scalar_tier_bit_for_bit() {
    let platforms = opencl3::platform::get_platforms().expect("an OpenCL platform (PoCL)");
    let id = platforms[0].get_devices(CL_DEVICE_TYPE_ALL).unwrap()[0];
    let dev = Device::new(id);
    let ctx = Context::from_device(&dev).unwrap();
    #[allow(deprecated)]
    // SAFETY (test): the device the context was created from.
    let queue = unsafe { CommandQueue::create(&ctx, id, 0) }.unwrap();
    let stage = TT * COLS / 4 + 2 * TT * (COLS / QK);
    let mut opts = format!(
        "-cl-std=CL1.2 -DTT={TT} -DSTAGE_T={stage} -DHEAD_DIM=64 -DN_HEADS=1 -DNSPLIT_MAX=1"
    );
    if dev
        .single_fp_config()
        .is_ok_and(|c| c & opencl3::device::CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT != 0)
    {
        opts += " -cl-fp32-correctly-rounded-divide-sqrt";
    }
    let src = format!(
        "{}\n{KERNEL}",
        include_str!("../src/backend/opencl/kernels/common.cl")
    );
    let prog = Program::create_and_build_from_source(&ctx, &src, &opts).unwrap();
    let k = Kernel::create(&prog, "dots").unwrap();

    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // three activation rows: spread values, one large outlier, and a zero first 256-block
    let mut x: Vec<f32> = (0..NT * COLS).map(|_| rng.unit() * 2.0).collect();
    x[COLS + 300] = -9.5;
    x[2 * COLS..2 * COLS + QK_K].fill(0.0);
    let xb = buffer(&ctx, CL_MEM_READ_ONLY, Some(&x), x.len());
    for ty in [GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4K, GgmlType::Q6K] {
        let w = random_rows(ty, &mut rng);
        let wb = buffer(&ctx, CL_MEM_READ_ONLY, Some(&w), w.len());
        let ob = buffer::<f32>(&ctx, CL_MEM_READ_WRITE, None, NT * ROWS);
        let db = buffer::<f32>(&ctx, CL_MEM_READ_WRITE, None, ROWS * COLS);
        let (mut out, mut deq) = (vec![0f32; NT * ROWS], vec![0f32; ROWS * COLS]);
        // SAFETY (test): the arguments match the kernel's signature; the buffers hold what
        // the kernel indexes (rows < ROWS, tokens < NT, elements < COLS).
        unsafe {
            ExecuteKernel::new(&k)
                .set_arg(&wb)
                .set_arg(&(ty.id() as i32))
                .set_arg(&(ROWS as i32))
                .set_arg(&(COLS as i32))
                .set_arg(&xb)
                .set_arg(&(NT as i32))
                .set_arg(&ob)
                .set_arg(&db)
                .set_global_work_size(ROWS)
                .set_local_work_size(ROWS)
                .enqueue_nd_range(&queue)
                .unwrap();
            queue
                .enqueue_read_buffer(&ob, CL_BLOCKING, 0, &mut out, &[])
                .unwrap();
            queue
                .enqueue_read_buffer(&db, CL_BLOCKING, 0, &mut deq, &[])
                .unwrap();
        }
        let rb = w.len() / ROWS;
        for t in 0..NT {
            for r in 0..ROWS {
                let want = cpu_dot(ty, &w[r * rb..(r + 1) * rb], &x[t * COLS..(t + 1) * COLS]);
                let got = out[t * ROWS + r];
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{ty:?} token {t} row {r}: device {got}, cpu {want}"
                );
            }
        }
        // the zero block contributes nothing; the other rows are not trivially zero
        assert!(out[..ROWS].iter().any(|&v| v != 0.0), "{ty:?}");
        let want = cpu_dequant(ty, &w);
        let bad = deq
            .iter()
            .zip(&want)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(bad, None, "{ty:?}: dequantized element differs");
    }
}
