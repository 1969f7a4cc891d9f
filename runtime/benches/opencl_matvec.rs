//! Criterion benchmarks of the OpenCL matrix kernels, one per weight format and shape, so that
//! a regression shows where it happens:
//!
//! - `cl_matvec/<type>/<rows>x<cols>/<tokens>`: activation staging (RMSNorm-free: quantized to
//!   Q8_0 blocks, or Q8_K for the K-quants) and the tiled row dot of `common.cl`, 64 rows per
//!   work-group, for one token (decode) and a tile of four (prefill), at the shapes of the
//!   Qwen2.5-0.5B and Gemma 3 270M matrices that carry each format; throughput in weight
//!   bytes. Time is enqueue to `clFinish`.
//!
//! Run with `cargo bench -p pocketperf-runtime --bench opencl_matvec` on a machine with an
//! OpenCL device (the first device of the first platform; PoCL in CI). Without one the bench
//! says so and measures nothing.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use half::f16;
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{CL_DEVICE_TYPE_ALL, CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT, Device};
use opencl3::kernel::{ExecuteKernel, Kernel};
use opencl3::memory::{Buffer, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE};
use opencl3::program::Program;
use pocketperf_runtime::GgmlType;
use std::ffi::c_void;
use std::time::Duration;

const TT: usize = 4;
const WG: usize = 64;

const KERNEL: &str = "
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
matvec(__global const uchar *w, int wtype, int rows, int cols, __global const float *x, int nt,
       __global float *out) {
    __local float st[STAGE_T];
    stage_rows(SRC_PLAIN, x, 0, 0, cols, 0, nt, 0, 0, 0, 0, 0, st, form_of(wtype));
    int row = get_global_id(0);
    if (row >= rows) return;
    float acc[TT];
    row_dot_tile(w, wtype, row, cols, st, nt, acc);
    for (int t = 0; t < nt; t++) out[t * rows + row] = acc[t];
}
";

/// Pseudo-random blocks of `ty` with small finite f16 scales.
fn weights(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let (bb, halves): (usize, &[usize]) = match ty {
        GgmlType::Q4K => (144, &[0, 2]),
        GgmlType::Q6K => (210, &[208]),
        _ => (ty.block_bytes(), &[0]),
    };
    let n = ty.row_bytes(cols as u64).unwrap_or(0) as usize * rows;
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut w: Vec<u8> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    let d = f16::from_f32(0.01).to_bits().to_le_bytes();
    for b in 0..n / bb {
        for &o in halves {
            w[b * bb + o..b * bb + o + 2].copy_from_slice(&d);
        }
    }
    w
}

struct Cl {
    ctx: Context,
    queue: CommandQueue,
    kernel: Kernel,
}

fn open(max_cols: usize) -> Option<Cl> {
    let platforms = opencl3::platform::get_platforms().ok()?;
    let id = *platforms
        .first()?
        .get_devices(CL_DEVICE_TYPE_ALL)
        .ok()?
        .first()?;
    let dev = Device::new(id);
    let ctx = Context::from_device(&dev).ok()?;
    #[allow(deprecated)]
    // SAFETY: the device the context was created from.
    let queue = unsafe { CommandQueue::create(&ctx, id, 0) }.ok()?;
    let stage = TT * max_cols / 4 + 2 * TT * (max_cols / 32);
    let mut opts = format!(
        "-cl-std=CL1.2 -DTT={TT} -DWG={WG} -DSTAGE_T={stage} -DHEAD_DIM=64 -DN_HEADS=1 \
         -DNSPLIT_MAX=1"
    );
    if dev
        .single_fp_config()
        .is_ok_and(|c| c & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT != 0)
    {
        opts += " -cl-fp32-correctly-rounded-divide-sqrt";
    }
    let src = format!(
        "{}\n{KERNEL}",
        include_str!("../src/backend/opencl/kernels/common.cl")
    );
    let prog = Program::create_and_build_from_source(&ctx, &src, &opts).ok()?;
    let kernel = Kernel::create(&prog, "matvec").ok()?;
    Some(Cl { ctx, queue, kernel })
}

fn buffer<T>(ctx: &Context, data: Option<&[T]>, n: usize) -> Buffer<T> {
    let (flags, ptr) = match data {
        Some(d) => (
            CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
            d.as_ptr() as *mut c_void,
        ),
        None => (CL_MEM_READ_WRITE, std::ptr::null_mut()),
    };
    // SAFETY: COPY_HOST_PTR copies `n` elements from a live slice of that length.
    unsafe { Buffer::<T>::create(ctx, flags, n, ptr) }.expect("allocating a buffer")
}

fn bench_matvec(c: &mut Criterion) {
    // (type, rows, cols): Qwen2.5-0.5B and Gemma 3 270M matrices of each format
    let shapes: [(GgmlType, usize, usize); 8] = [
        (GgmlType::Q5_0, 4864, 896),
        (GgmlType::Q5_0, 896, 896),
        (GgmlType::Q8_0, 128, 896),
        (GgmlType::Q4K, 896, 4864),
        (GgmlType::Q4K, 640, 1024),
        (GgmlType::Q6K, 896, 4864),
        (GgmlType::Q6K, 640, 2048),
        (GgmlType::Q4_0, 4864, 896),
    ];
    let max_cols = shapes.iter().map(|s| s.2).max().unwrap_or(32);
    let Some(cl) = open(max_cols) else {
        eprintln!("cl_matvec: no OpenCL device (or the kernels do not build there); skipped");
        return;
    };
    let mut g = c.benchmark_group("cl_matvec");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (ty, rows, cols) in shapes {
        let w = weights(ty, rows, cols);
        let x: Vec<f32> = (0..TT * cols)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let (wb, xb) = (
            buffer(&cl.ctx, Some(&w), w.len()),
            buffer(&cl.ctx, Some(&x), x.len()),
        );
        let ob = buffer::<f32>(&cl.ctx, None, TT * rows);
        g.throughput(Throughput::Bytes(w.len() as u64));
        for nt in [1usize, TT] {
            let id = BenchmarkId::new(format!("{}/{rows}x{cols}", ty.name()), nt);
            g.bench_function(id, |b| {
                b.iter(|| {
                    // SAFETY: the arguments match the kernel's signature; the buffers hold
                    // what it indexes (rows, nt tokens of cols).
                    unsafe {
                        ExecuteKernel::new(&cl.kernel)
                            .set_arg(&wb)
                            .set_arg(&(ty.id() as i32))
                            .set_arg(&(rows as i32))
                            .set_arg(&(cols as i32))
                            .set_arg(&xb)
                            .set_arg(&(nt as i32))
                            .set_arg(&ob)
                            .set_global_work_size(rows.div_ceil(WG) * WG)
                            .set_local_work_size(WG)
                            .enqueue_nd_range(&cl.queue)
                            .expect("launching matvec");
                    }
                    cl.queue.finish().expect("running matvec");
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_matvec);
criterion_main!(benches);
