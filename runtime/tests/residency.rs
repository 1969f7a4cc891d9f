//! Residency control against the kernel's own account: files of the test's own (on the
//! target directory's disk, never a tmpfs, whose pages cannot be evicted) are written and
//! fsync'd, dropped from the page cache with `POSIX_FADV_DONTNEED`, and read back with
//! `mincore`; then reading or prefaulting must bring them back.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use pocketperf_runtime::GgmlType;
use pocketperf_runtime::gguf::{GgufFile, GgufWriter, Value};
use pocketperf_runtime::residency::{
    LoadOptions, evict_file, file_residency, page_size, touch_pages,
};

const MIB: usize = 1 << 20;

fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch dir on the target disk")
}

/// A file of `n` bytes of a non-constant pattern, written and flushed to disk.
fn write_synced(path: &Path, n: usize) {
    let mut f = File::create(path).unwrap();
    let block: Vec<u8> = (0..MIB).map(|i| (i * 31 + i / 4096) as u8).collect();
    for _ in 0..n / MIB {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
}

fn evicted(path: &Path) -> f64 {
    evict_file(path).unwrap();
    file_residency(path).unwrap().fraction()
}

#[test]
fn eviction_drops_a_file_from_the_page_cache_and_reading_brings_it_back() {
    let dir = scratch_dir();
    let path = dir.path().join("blob.bin");
    write_synced(&path, 64 * MIB);
    let before = file_residency(&path).unwrap();
    assert_eq!(before.total_pages, (64 * MIB / page_size()) as u64);
    // Just written: the pages are still cached (clean after the fsync).
    assert!(before.fraction() > 0.9, "after writing: {before:?}");

    let after = evicted(&path);
    assert!(
        after < 0.10,
        "after eviction {:.1}% resident",
        after * 100.0
    );

    // Reading half of the file brings (at least) that half back.
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 64 * MIB);
    let back = file_residency(&path).unwrap().fraction();
    assert!(back > 0.9, "after reading {:.1}% resident", back * 100.0);
}

#[test]
fn touching_a_mapping_faults_its_pages_in() {
    let dir = scratch_dir();
    let path = dir.path().join("mapped.bin");
    write_synced(&path, 16 * MIB);
    assert!(evicted(&path) < 0.10);
    let file = File::open(&path).unwrap();
    // SAFETY: a read-only mapping of the test's own file, which nothing truncates.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let probe = |m: &[u8]| {
        pocketperf_runtime::residency::mapping_residency(m, &path)
            .unwrap()
            .fraction()
    };
    assert!(probe(&map) < 0.10, "mapping alone faults nothing in");
    // The first quarter only.
    touch_pages(&map[..4 * MIB]);
    let q = probe(&map);
    // Read-ahead may bring a little more than the quarter, never the whole file.
    assert!((0.24..0.75).contains(&q), "after a quarter {q}");
    touch_pages(&map);
    assert!(probe(&map) > 0.99);
}

/// A GGUF of one F32 tensor of `mib` MiB.
fn write_gguf(path: &Path, mib: usize) -> PathBuf {
    let n = mib * MIB / 4;
    let data: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()));
    w.add_tensor("blob", &[n as u64], GgmlType::F32, data)
        .unwrap();
    w.write(path).unwrap();
    File::open(path).unwrap().sync_all().unwrap();
    path.to_path_buf()
}

#[test]
fn prefault_makes_the_whole_model_mapping_resident_and_a_plain_open_does_not() {
    let dir = scratch_dir();
    let path = write_gguf(&dir.path().join("m.gguf"), 64);
    assert!(evicted(&path) < 0.10);
    let plain = GgufFile::open(&path).unwrap();
    let r = plain.residency().unwrap().expect("a mapped file");
    // Parsing reads the header and tensor infos, a page or two of 16 385; the kernel's
    // read-around on that fault brings in up to a few MiB more (1 024 pages seen on a clean
    // machine), far from the whole file.
    assert!(r.fraction() < 0.25, "plain open: {r:?}");
    drop(plain);

    assert!(evicted(&path) < 0.10);
    let opts = LoadOptions {
        prefault: true,
        mlock: false,
    };
    let pre = GgufFile::open_with(&path, &opts).unwrap();
    let r = pre.residency().unwrap().expect("a mapped file");
    assert_eq!(r.resident_pages, r.total_pages, "prefaulted: {r:?}");
    // And the data is the file's.
    let t = pre.tensor("blob").unwrap().clone();
    let v: &[f32] = pre.tensor_view(&t).unwrap();
    assert_eq!(v[12345], 12345.0);
}

#[test]
fn mlock_locks_the_mapping_when_allowed() {
    // Tests run as root (CAP_IPC_LOCK), so the lock succeeds; the refused case runs the
    // binary without the capability (harness/tests/cold_start.rs).
    let dir = scratch_dir();
    let path = write_gguf(&dir.path().join("l.gguf"), 4);
    let opts = LoadOptions {
        mlock: true,
        prefault: false,
    };
    let g = GgufFile::open_with(&path, &opts).unwrap();
    let r = g.residency().unwrap().expect("a mapped file");
    // mlock faults every page in.
    assert_eq!(r.resident_pages, r.total_pages);
}
