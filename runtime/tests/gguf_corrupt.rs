//! Corrupted, truncated and hostile GGUF files: every one must give `Error::Gguf` naming the
//! field and the byte offset where reading failed, never a panic, a huge allocation or UB.
//!
//! Inputs are synthetic files built with the project's writer and the real reference model.
//! A small independent walker (`tests/gguf_walker`) locates every field of a valid
//! file, so each test knows exactly which field and offset the reader must blame. The fuzz
//! target's body (`pocketperf_testkit::open_and_touch`, also compiled into `fuzz/`) is driven
//! here over thousands of mutated inputs, so CI runs it on the stable toolchain.

mod common;
mod gguf_walker;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use gguf_walker::{
    Layout_, blamed_field, expect_err, gguf_err, kv, put_u32, put_u64, rd_u64, walk,
};
use pocketperf_runtime::Error;
use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::{GgufFile, GgufWriter, MAX_STRING_LEN, MAX_TENSORS, Value};
use pocketperf_testkit::{Rng, TinyLlama, open_and_touch, seeds, synthetic_all_types, tiny_llama};

// ---------------------------------------------------------------------------------------------
// The largest single allocation made by the current thread, to prove hostile counts and
// lengths never buy a large allocation.

struct PeakAlloc;

thread_local! {
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: defers to the system allocator; the bookkeeping touches only a const-initialized
// thread-local `Cell` (no allocation, no destructor).
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = PEAK.try_with(|p| p.set(p.get().max(layout.size())));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = PEAK.try_with(|p| p.set(p.get().max(new_size)));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// Runs `f` and returns its result with the largest single allocation it made.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    PEAK.with(|p| p.set(0));
    let r = f();
    (r, PEAK.with(Cell::get))
}

// ---------------------------------------------------------------------------------------------
// Synthetic files.

/// Also writes the seeds as the fuzzer's starting corpus when `POCKETPERF_FUZZ_CORPUS` names
/// a directory (an absolute path: tests run in `runtime/`).
#[test]
fn the_synthetic_files_are_valid_and_fully_touched() {
    let corpus = std::env::var_os("POCKETPERF_FUZZ_CORPUS").map(std::path::PathBuf::from);
    for (name, bytes) in seeds() {
        if let Some(dir) = &corpus {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("{name}.gguf")), &bytes).unwrap();
        }
        let g = GgufFile::from_bytes(&name, bytes.clone()).unwrap();
        let l = walk(&bytes);
        assert_eq!(l.kvs.len(), g.metadata().len(), "{name}");
        assert_eq!(l.data_offset as u64, g.data_offset(), "{name}");
        for (t, w) in g.tensors().iter().zip(&l.tensors) {
            assert_eq!(
                (&t.name, t.offset, t.n_bytes),
                (&w.name, w.rel_offset, w.n_bytes)
            );
        }
        let touched = open_and_touch(&bytes);
        assert!(touched.parsed, "{name}");
        assert_eq!(touched.tensors, g.tensors().len(), "{name}");
        let elements: u64 = g.tensors().iter().map(|t| t.n_elements()).sum();
        assert_eq!(touched.elements, elements, "{name}: every element decoded");
        if name.starts_with("tiny_llama") {
            assert!(touched.tokenizer && touched.model, "{name}: {touched:?}");
        }
    }
}

#[test]
fn truncation_at_every_byte_names_the_field_it_cuts() {
    for (name, bytes) in seeds() {
        // The variants of the tiny model share its layout: every 5th byte is enough there.
        let step = if name.starts_with("tiny_llama_") {
            5
        } else {
            1
        };
        let l = walk(&bytes);
        assert_eq!(
            l.tensors
                .iter()
                .map(|t| l.data_offset as u64 + t.rel_offset + t.n_bytes)
                .max(),
            Some(bytes.len() as u64),
            "{name}: the last tensor ends the file"
        );
        for cut in (0..bytes.len()).step_by(step) {
            let (field, offset, reason, msg) = gguf_err(&name, bytes[..cut].to_vec());
            let want = blamed_field(&bytes, &l, cut);
            assert!(
                field.starts_with(&want),
                "{name} cut at {cut}: blamed {field:?}, expected {want:?}: {msg}"
            );
            assert!(offset <= cut as u64, "{name} cut at {cut}: {msg}");
            assert!(
                ["truncated", "past the end", "cannot fit", "too short"]
                    .iter()
                    .any(|w| reason.contains(w)),
                "{name} cut at {cut}: {msg}"
            );
        }
    }
}

#[test]
fn bad_magic_and_versions() {
    let good = synthetic_all_types();
    let mut b = good.clone();
    b[..4].copy_from_slice(b"GGML");
    expect_err(b, "header.magic", 0, "not a GGUF file");
    expect_err(b"PK\x03\x04 zip".to_vec(), "header.magic", 0, "bad magic");
    expect_err(Vec::new(), "header.magic", 0, "too short");
    for (v, why) in [
        (1u32, "version 1"),
        (0, "unsupported GGUF version 0"),
        (4, "unsupported GGUF version 4"),
        (u32::MAX, "unsupported GGUF version"),
        (3u32.swap_bytes(), "big-endian"),
    ] {
        let mut b = good.clone();
        put_u32(&mut b, 4, v);
        expect_err(b, "header.version", 4, why);
    }
    let mut b = good.clone();
    put_u32(&mut b, 4, 2);
    assert_eq!(GgufFile::from_bytes("v2", b).unwrap().version(), 2);
}

#[test]
fn huge_counts_are_refused_before_any_allocation() {
    let good = synthetic_all_types();
    for (at, field, values) in [
        (
            8,
            "header.tensor_count",
            [u64::MAX, MAX_TENSORS + 1, 1 << 19, 100_000],
        ),
        (16, "header.kv_count", [u64::MAX, 1 << 21, 1 << 19, 100_000]),
    ] {
        for v in values {
            let mut b = good.clone();
            put_u64(&mut b, at, v);
            let ((f, o, reason, msg), peak) = peak_of(|| gguf_err("counts", b));
            assert!(f.starts_with(field), "{msg}");
            assert_eq!(o, at as u64, "{msg}");
            assert!(
                reason.contains("exceeds the cap") || reason.contains("cannot fit"),
                "{msg}"
            );
            assert!(peak < 64 << 10, "{v}: a {peak}-byte allocation");
        }
    }
}

#[test]
fn huge_string_and_array_lengths() {
    let good = synthetic_all_types();
    let l = walk(&good);
    // A key length.
    let (i, k) = kv(&l, "t.u8");
    for v in [u64::MAX, MAX_STRING_LEN + 1, 1 << 29, good.len() as u64] {
        let mut b = good.clone();
        put_u64(&mut b, k.start, v);
        let ((f, o, _, msg), peak) = peak_of(|| gguf_err("klen", b));
        assert_eq!(f, format!("kv[{i}].key"), "{msg}");
        assert_eq!(o, k.start as u64, "{msg}");
        assert!(
            msg.contains("exceeds the cap") || msg.contains("runs past the end"),
            "{msg}"
        );
        assert!(peak < 64 << 10, "a {peak}-byte allocation");
    }
    // A string value's length.
    let (i, k) = kv(&l, "t.string");
    let mut b = good.clone();
    put_u64(&mut b, k.value_at, u64::MAX - 3);
    expect_err(
        b,
        &format!("kv[{i}].value (key t.string)"),
        k.value_at,
        "exceeds the cap",
    );
    // Array lengths: fixed-size, string and nested elements.
    for key in ["t.arr_u64", "t.arr_str", "t.arr_nested", "t.arr_bool"] {
        let (i, k) = kv(&l, key);
        let (_, len_at) = k.array.unwrap();
        for v in [u64::MAX, u64::MAX / 8 + 1, 1 << 40, good.len() as u64] {
            let mut b = good.clone();
            put_u64(&mut b, len_at, v);
            let ((f, o, _, msg), peak) = peak_of(|| gguf_err(key, b));
            assert!(
                f.starts_with(&format!("kv[{i}].value (key {key})")),
                "{msg}"
            );
            assert_eq!(o, len_at as u64, "{msg}");
            assert!(msg.contains("cannot fit"), "{msg}");
            assert!(peak < 64 << 10, "{key} = {v}: a {peak}-byte allocation");
        }
    }
    // A string element inside an array, and a tensor name.
    let (i, k) = kv(&l, "t.arr_str");
    let first_elem = k.value_at + 12;
    let mut b = good.clone();
    put_u64(&mut b, first_elem, 1 << 29);
    expect_err(
        b,
        &format!("kv[{i}].value (key t.arr_str)[0]"),
        first_elem,
        "runs past",
    );
    let t = &l.tensors[2];
    let mut b = good.clone();
    put_u64(&mut b, t.start, u64::MAX);
    expect_err(b, "tensor_infos[2].name", t.start, "exceeds the cap");
}

#[test]
fn unknown_value_and_tensor_types() {
    let good = synthetic_all_types();
    let l = walk(&good);
    let (i, k) = kv(&l, "t.i16");
    for id in [13u32, 99, u32::MAX] {
        let mut b = good.clone();
        put_u32(&mut b, k.type_at, id);
        expect_err(
            b,
            &format!("kv[{i}].type"),
            k.type_at,
            &format!("unknown value type id {id}"),
        );
    }
    let (i, k) = kv(&l, "t.arr_u8");
    let (et_at, _) = k.array.unwrap();
    let mut b = good.clone();
    put_u32(&mut b, et_at, 13);
    expect_err(
        b,
        &format!("kv[{i}].value (key t.arr_u8) (element type)"),
        et_at,
        "unknown value type id 13",
    );
    for (ti, t) in l.tensors.iter().enumerate() {
        // 4 and 5 are ggml's removed Q4_2/Q4_3; 31+ do not exist.
        for id in [4u32, 5, 39, 1000, u32::MAX] {
            let mut b = good.clone();
            put_u32(&mut b, t.type_at, id);
            expect_err(
                b,
                &format!("tensor_infos[{ti}].type (tensor {})", t.name),
                t.type_at,
                &format!("unknown ggml tensor type id {id}"),
            );
        }
    }
    // A bool that is neither 0 nor 1, and a key that is not UTF-8.
    let (i, k) = kv(&l, "t.bool");
    let mut b = good.clone();
    b[k.value_at] = 2;
    expect_err(b, &format!("kv[{i}].value"), k.value_at, "neither 0 nor 1");
    let mut b = good.clone();
    b[k.key_at + 1] = 0xff;
    expect_err(b, &format!("kv[{i}].key"), k.key_at + 1, "not valid UTF-8");
}

#[test]
fn bad_dimensions() {
    let good = synthetic_all_types();
    let l = walk(&good);
    let t = l.tensors[0].clone(); // t0.f32, dims [16, 4]
    for nd in [0u32, 5, u32::MAX] {
        let mut b = good.clone();
        put_u32(&mut b, t.ndims_at, nd);
        expect_err(
            b,
            "tensor_infos[0].n_dims",
            t.ndims_at,
            "dimensions (must be 1..=4)",
        );
    }
    let mut b = good.clone();
    put_u64(&mut b, t.dims_at[1], 0);
    expect_err(b, "tensor_infos[0].dims[1]", t.dims_at[1], "dimension is 0");
    // 2^40 x 2^40 elements overflow the element count.
    let mut b = good.clone();
    put_u64(&mut b, t.dims_at[0], 1 << 40);
    put_u64(&mut b, t.dims_at[1], 1 << 40);
    expect_err(b, "tensor_infos[0].dims[1]", t.dims_at[1], "overflow");
    // A count that fits i64 but whose byte size does not fit the file.
    let mut b = good.clone();
    put_u64(&mut b, t.dims_at[1], 1 << 50);
    expect_err(
        b,
        "tensor_infos[0].offset",
        t.offset_at,
        "runs past the end",
    );
    // A quantized row that is not a whole number of blocks.
    let q = l.tensors[2].clone(); // t2.q8_0, dims [32, 2]
    let mut b = good.clone();
    put_u64(&mut b, q.dims_at[0], 33);
    expect_err(
        b,
        "tensor_infos[2].dims[0]",
        q.ndims_at + 4,
        "not a whole number of Q8_0 blocks",
    );
}

#[test]
fn offsets_out_of_the_file_misaligned_or_overlapping() {
    let good = synthetic_all_types();
    let l = walk(&good);
    let last = l.tensors.len() - 1;
    let t = l.tensors[last].clone();
    let span = (good.len() - l.data_offset) as u64;
    for off in [
        u64::MAX - 31,
        span.next_multiple_of(32),
        span - t.n_bytes + 32,
        1 << 62,
    ] {
        let mut b = good.clone();
        put_u64(&mut b, t.offset_at, off);
        expect_err(
            b,
            &format!("tensor_infos[{last}].offset"),
            t.offset_at,
            "runs past the end",
        );
    }
    for off in [t.rel_offset + 1, t.rel_offset + 16, 7] {
        let mut b = good.clone();
        put_u64(&mut b, t.offset_at, off);
        expect_err(
            b,
            &format!("tensor_infos[{last}].offset"),
            t.offset_at,
            "not a multiple of the alignment 32",
        );
    }
    // Tensor 1 moved onto tensor 0's data.
    let mut b = good.clone();
    put_u64(&mut b, l.tensors[1].offset_at, l.tensors[0].rel_offset);
    expect_err(
        b,
        "tensor_infos[1].offset",
        l.tensors[1].offset_at,
        "overlaps tensor `t0.f32`",
    );
}

#[test]
fn duplicate_names() {
    let good = synthetic_all_types();
    let l = walk(&good);
    // "t1.f16" renamed "t0.f32": same length, so the layout is unchanged.
    let t = &l.tensors[1];
    let mut b = good.clone();
    b[t.start + 8..t.start + 8 + 6].copy_from_slice(b"t0.f32");
    expect_err(
        b,
        "tensor_infos[1].name",
        t.start,
        "duplicate tensor name `t0.f32`",
    );
    let (i, k) = kv(&l, "t.u16");
    let mut b = good.clone();
    b[k.key_at..k.key_at + 5].copy_from_slice(b"t.i16");
    // The first occurrence (t.i16 comes after t.u16) is kept; the second is blamed.
    let (j, k2) = kv(&l, "t.i16");
    assert!(j > i);
    expect_err(
        b,
        &format!("kv[{j}].key"),
        k2.start,
        "duplicate metadata key `t.i16`",
    );
}

#[test]
fn bad_general_alignment() {
    let build = |v: Value| {
        let mut w = GgufWriter::new();
        w.add_metadata("general.alignment", v)
            .add_tensor("w", &[8], GgmlType::F32, vec![0u8; 32])
            .unwrap();
        w.to_bytes()
    };
    for (v, why) in [
        (Value::U32(0), "power of two"),
        (Value::U32(3), "power of two"),
        (Value::U32(48), "power of two"),
        (Value::U64(1 << 31), "power of two"),
        (Value::I32(-32), "power of two"),
        (Value::String("32".into()), "STRING"),
        (Value::F32(32.0), "FLOAT32"),
    ] {
        let b = build(v.clone());
        let l = walk(&b);
        let (_, k) = kv(&l, "general.alignment");
        expect_err(b, "kv[0].value (key general.alignment)", k.value_at, why);
    }
    // A valid alignment that the tensor offsets do not honour: the writer lays tensors out
    // at 32, so claiming 64 makes tensor b's offset 32 misaligned.
    let mut w = GgufWriter::new();
    w.add_tensor("a", &[8], GgmlType::F32, vec![0u8; 32])
        .unwrap();
    w.add_tensor("b", &[8], GgmlType::F32, vec![0u8; 32])
        .unwrap();
    w.add_metadata("general.alignment", Value::U32(64));
    let b = w.to_bytes();
    let l = walk(&b);
    assert_eq!(l.tensors[1].rel_offset, 32);
    expect_err(
        b,
        "tensor_infos[1].offset",
        l.tensors[1].offset_at,
        "not a multiple of the alignment 64",
    );
    // Alignment 1 is a power of two, but an F32 tensor must still sit on a 4-byte boundary
    // for a zero-copy view.
    let mut refused = 0;
    for pad in 1..=4u64 {
        let mut w = GgufWriter::new();
        w.set_alignment(1).unwrap();
        w.add_tensor("pad", &[pad], GgmlType::I8, vec![7u8; pad as usize])
            .unwrap();
        w.add_tensor("f", &[2], GgmlType::F32, vec![0u8; 8])
            .unwrap();
        let b = w.to_bytes();
        let l = walk(&b);
        if (l.data_offset as u64 + pad).is_multiple_of(4) {
            let g = GgufFile::from_bytes("aligned", b).unwrap();
            let t = g.tensor("f").unwrap();
            assert_eq!(g.tensor_view::<f32>(t).unwrap(), &[0.0, 0.0]);
        } else {
            refused += 1;
            expect_err(
                b,
                "tensor_infos[1].offset",
                l.tensors[1].offset_at,
                "not 4-byte aligned",
            );
        }
    }
    assert_eq!(refused, 3);
}

#[test]
fn arrays_nested_too_deep() {
    use pocketperf_runtime::gguf::Array;
    let mut a = Array::I32(vec![1]);
    for _ in 0..5 {
        a = Array::Array(vec![a]);
    }
    let mut w = GgufWriter::new();
    w.add_metadata("deep", Value::Array(a));
    let b = w.to_bytes();
    let l = walk(&b);
    // Depth 0 is the value itself; the fifth nested array header is refused.
    let at = l.kvs[0].value_at + 4 * 12;
    expect_err(
        b,
        "kv[0].value (key deep)[0][0][0][0]",
        at,
        "nested deeper than 4",
    );
}

#[test]
fn random_mutations_never_panic() {
    // The fuzz target's body over mutated seeds: bit flips, random bytes, interesting integers
    // written at field starts, truncations and splices.
    let seeds = seeds();
    let layouts: Vec<Layout_> = seeds.iter().map(|(_, b)| walk(b)).collect();
    let interesting: [u64; 10] = [
        0,
        1,
        2,
        31,
        32,
        u32::MAX as u64,
        1 << 31,
        u64::MAX,
        u64::MAX - 1,
        i64::MAX as u64,
    ];
    let mut rng = Rng::new(0x5eed);
    let mut parsed = 0;
    for round in 0..3000 {
        let s = round % seeds.len();
        let (name, good) = &seeds[s];
        let l = &layouts[s];
        let mut field_starts: Vec<usize> = vec![8, 16];
        for k in &l.kvs {
            field_starts.extend([k.start, k.type_at, k.value_at]);
            if let Some((a, b)) = k.array {
                field_starts.extend([a, b]);
            }
        }
        for t in &l.tensors {
            field_starts.extend([t.start, t.ndims_at, t.type_at, t.offset_at]);
            field_starts.extend(&t.dims_at);
        }
        let mut b = good.clone();
        for _ in 0..1 + rng.below(3) {
            if b.is_empty() {
                break;
            }
            let header = (l.header_end as u64).min(b.len() as u64);
            match rng.below(6) {
                0 => {
                    let at = rng.below(header) as usize;
                    b[at] ^= 1 << rng.below(8);
                }
                1 => {
                    let at = rng.below(b.len() as u64) as usize;
                    b[at] = rng.next_u64() as u8;
                }
                2 | 3 => {
                    let at = field_starts[rng.below(field_starts.len() as u64) as usize];
                    let v = interesting[rng.below(interesting.len() as u64) as usize];
                    let w = if rng.below(2) == 0 { 4 } else { 8 };
                    if at + w <= b.len() {
                        b[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
                    }
                }
                4 => {
                    let cut = rng.below(b.len() as u64) as usize;
                    b.truncate(cut);
                }
                _ => {
                    let at = rng.below(b.len() as u64) as usize;
                    let n = 1 + rng.below(16) as usize;
                    let from = rng.below(b.len() as u64) as usize;
                    let piece: Vec<u8> = b[from..(from + n).min(b.len())].to_vec();
                    let tail = b.split_off(at);
                    b.extend(piece);
                    b.extend(tail);
                }
            }
        }
        let len = b.len();
        let (touched, peak) = peak_of(|| open_and_touch(&b));
        parsed += usize::from(touched.parsed);
        assert!(
            peak <= 16 * len + (1 << 20),
            "{name} round {round}: a {peak}-byte allocation for a {len}-byte input"
        );
    }
    // Some mutations leave a valid file (a flipped weight byte): they went all the way.
    assert!(parsed > 100, "only {parsed} mutated inputs parsed");
}

#[test]
fn tiny_llama_loads_and_its_corruptions_fail_cleanly() {
    let b = tiny_llama(TinyLlama::default());
    let t = open_and_touch(&b);
    assert!(t.parsed && t.tokenizer && t.model, "{t:?}");
    let l = walk(&b);
    let (i, k) = kv(&l, "tokenizer.ggml.tokens");
    let (_, len_at) = k.array.unwrap();
    let mut m = b.clone();
    put_u64(&mut m, len_at, u64::MAX / 8);
    expect_err(
        m,
        &format!("kv[{i}].value (key tokenizer.ggml.tokens)"),
        len_at,
        "cannot fit",
    );
}

// ---------------------------------------------------------------------------------------------
// The real reference model.

fn real_model() -> Vec<u8> {
    let p = common::model_path();
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn real_model_truncated_at_section_boundaries() {
    let full = real_model();
    let l = walk(&full);
    assert_eq!((l.kvs.len(), l.tensors.len()), (33, 272));
    let mut cuts: Vec<usize> = vec![0, 3, 4, 8, 16, 23, 24, 25];
    for k in &l.kvs {
        cuts.extend([k.start, k.start + 3, k.type_at, k.value_at, k.end - 1]);
        if let Some((a, b)) = k.array {
            cuts.extend([a + 2, b, b + 9]);
        }
    }
    // Each cut re-reads the 98k vocabulary strings before the tensor infos (~10 ms): every
    // field of a spread of tensor infos.
    for (i, t) in l.tensors.iter().enumerate() {
        if i < 4 || i % 45 == 0 || i + 4 >= l.tensors.len() {
            cuts.push(t.start);
            cuts.extend([t.ndims_at, t.dims_at[0] + 5, t.type_at, t.offset_at + 7]);
        }
    }
    cuts.extend([l.header_end, l.data_offset - 1]);
    let header_cuts = cuts.len();
    // Data section: start and end of a spread of tensors, and random offsets.
    for i in [0, 1, 50, 135, 200, 270, 271] {
        let t = &l.tensors[i];
        let start = l.data_offset + t.rel_offset as usize;
        cuts.extend([start, start + t.n_bytes as usize - 1]);
    }
    let mut rng = Rng::new(42);
    for _ in 0..8 {
        cuts.push(l.data_offset + rng.below((full.len() - l.data_offset) as u64) as usize);
    }
    for _ in 0..24 {
        cuts.push(24 + rng.below(l.header_end as u64 - 24) as usize);
    }
    for (n, &cut) in cuts.iter().enumerate() {
        let (field, offset, _, msg) = gguf_err("model", full[..cut].to_vec());
        let want = blamed_field(&full, &l, cut);
        assert!(
            field.starts_with(&want),
            "cut {n} at {cut}: blamed {field:?}, expected {want:?}: {msg}"
        );
        assert!(offset <= cut as u64, "{msg}");
    }
    assert!(header_cuts > 200, "{header_cuts}");
}

#[test]
fn real_model_mutations_name_field_and_offset() {
    let full = real_model();
    let l = walk(&full);
    let header = full[..l.data_offset].to_vec();
    // Errors found while reading the header need only the header bytes.
    let mut b = header.clone();
    b[0] = b'X';
    expect_err(b, "header.magic", 0, "bad magic");
    let mut b = header.clone();
    put_u64(&mut b, 8, u64::MAX);
    expect_err(b, "header.tensor_count", 8, "exceeds the cap");
    let (i, k) = kv(&l, "tokenizer.ggml.tokens");
    let (et_at, len_at) = k.array.unwrap();
    let mut b = header.clone();
    put_u64(&mut b, len_at, 1 << 40);
    let ((f, o, _, msg), peak) = peak_of(|| gguf_err("tokens", b));
    assert!(
        f.starts_with(&format!("kv[{i}].value")) && o == len_at as u64,
        "{msg}"
    );
    assert!(peak < 4 << 20, "a {peak}-byte allocation");
    let mut b = header.clone();
    put_u32(&mut b, et_at, 77);
    expect_err(b, &format!("kv[{i}]"), et_at, "unknown value type id 77");
    // The 1000th token's length made enormous.
    let mut p = len_at + 8;
    for _ in 0..1000 {
        p += 8 + rd_u64(&header, p) as usize;
    }
    let mut b = header.clone();
    put_u64(&mut b, p, u64::MAX);
    expect_err(
        b,
        &format!("kv[{i}].value (key tokenizer.ggml.tokens)[1000]"),
        p,
        "exceeds the cap",
    );
    // `llama.block_count` (17 bytes) renamed `general.alignment`: a value of 30 is refused.
    let (i, k) = kv(&l, "llama.block_count");
    let mut b = header.clone();
    b[k.key_at..k.key_at + 17].copy_from_slice(b"general.alignment");
    expect_err(
        b,
        &format!("kv[{i}].value (key general.alignment)"),
        k.value_at,
        "power of two",
    );
    // Tensor infos.
    let q = l
        .tensors
        .iter()
        .position(|t| t.name == "blk.0.attn_q.weight")
        .unwrap();
    let t = l.tensors[q].clone();
    let kq = l
        .tensors
        .iter()
        .position(|t| t.name == "blk.0.attn_k.weight")
        .unwrap();
    let mut b = header.clone();
    b[t.start + 8 + 11] = b'k'; // blk.0.attn_q.weight becomes blk.0.attn_k.weight
    let second = q.max(kq);
    expect_err(
        b,
        &format!("tensor_infos[{second}].name"),
        l.tensors[second].start,
        "duplicate tensor name `blk.0.attn_k.weight`",
    );
    let mut b = header.clone();
    put_u32(&mut b, t.type_at, 23);
    expect_err(
        b,
        &format!("tensor_infos[{q}].type"),
        t.type_at,
        "unknown ggml tensor type id 23",
    );
    let mut b = header.clone();
    put_u64(&mut b, t.dims_at[1], u64::MAX);
    expect_err(
        b,
        &format!("tensor_infos[{q}].dims[1]"),
        t.dims_at[1],
        "overflow",
    );
    let mut b = header.clone();
    put_u64(&mut b, t.offset_at, t.rel_offset + 8);
    expect_err(
        b,
        &format!("tensor_infos[{q}].offset"),
        t.offset_at,
        "not a multiple",
    );
    // Offsets are checked against the whole file.
    let mut b = full.clone();
    put_u64(&mut b, t.offset_at, (full.len() - l.data_offset) as u64);
    expect_err(
        b,
        &format!("tensor_infos[{q}].offset"),
        t.offset_at,
        "runs past the end",
    );
    // Random single-byte corruptions anywhere in the header: errors or clean parses only.
    let mut rng = Rng::new(9);
    for _ in 0..40 {
        let mut b = header.clone();
        let at = rng.below(l.header_end as u64) as usize;
        b[at] = rng.next_u64() as u8;
        if let Err(e) = GgufFile::from_bytes("model", b) {
            assert!(matches!(e, Error::Gguf { .. }), "{e}");
        }
    }
}

#[test]
fn real_model_is_fully_touched_by_the_fuzz_body() {
    let full = real_model();
    let t = open_and_touch(&full);
    assert!(t.parsed && t.tokenizer && t.model, "{t:?}");
    assert_eq!((t.metadata, t.tensors), (33, 272));
}

#[test]
fn open_refuses_directories_and_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let e = GgufFile::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let e = GgufFile::open(&dir.path().join("none.gguf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("none.gguf") && e.contains("No such file"), "{e}");
    let p = dir.path().join("empty.gguf");
    std::fs::write(&p, b"").unwrap();
    let e = GgufFile::open(&p).unwrap_err().to_string();
    assert!(
        e.contains("empty.gguf: invalid GGUF: header.magic at offset 0"),
        "{e}"
    );
}
