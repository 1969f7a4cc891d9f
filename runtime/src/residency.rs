//! Memory residency of model files: how much of a file or a mapping sits in memory, how to
//! drop a file from the page cache, and the load options that pin or prefetch the weights.
//!
//! - Residency: `mincore(2)` over a mapping (or a fresh read-only mapping of a file) counts
//!   the pages present in memory. For a file mapping Linux answers from the page cache even
//!   for pages this process has not touched, provided the caller owns the file or may write
//!   it (since Linux 5.2; otherwise only pages mapped into this process count).
//! - Eviction: `posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)` (POSIX.1-2001) asks the kernel
//!   to drop the file's clean, unmapped pages. No privilege is needed; pages some process
//!   has mapped or that are dirty stay, which is why callers read residency back.
//! - Load options ([`LoadOptions`]): `mlock` (`mlock(2)` of the whole mapping, bounded by
//!   `RLIMIT_MEMLOCK` unless the process holds `CAP_IPC_LOCK`) and `prefault`
//!   (`madvise(MADV_WILLNEED)`, then one read per page, so no page faults remain for the
//!   first token). [`crate::gguf::GgufFile::open_with`] applies them.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// How a model file's mapping is made resident when it is opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadOptions {
    /// Lock every page of the mapping in memory (`mlock`).
    pub mlock: bool,
    /// Read the whole mapping in before returning (`MADV_WILLNEED` and one touch per page).
    pub prefault: bool,
}

/// Pages of a range present in memory, as `mincore` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Residency {
    pub resident_pages: u64,
    pub total_pages: u64,
    pub page_bytes: u64,
}

impl Residency {
    /// Fraction of the pages in memory, 0..=1 (1 for an empty range).
    pub fn fraction(&self) -> f64 {
        if self.total_pages == 0 {
            1.0
        } else {
            self.resident_pages as f64 / self.total_pages as f64
        }
    }
}

/// The system's page size in bytes.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects; it only returns a configuration value.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

fn io_err(path: &Path, op: &'static str, source: std::io::Error) -> Error {
    Error::Residency {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Residency of `bytes`, which must be (part of) a mapping: `mincore` is asked about every
/// page the slice touches. `path` names the file in errors.
pub fn mapping_residency(bytes: &[u8], path: &Path) -> Result<Residency> {
    let page = page_size();
    if bytes.is_empty() {
        return Ok(Residency {
            resident_pages: 0,
            total_pages: 0,
            page_bytes: page as u64,
        });
    }
    let addr = bytes.as_ptr() as usize;
    let start = addr - addr % page;
    let end = addr + bytes.len();
    let len = end - start;
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `start..start + len` covers only pages of `bytes`, a live mapping borrowed for
    // the duration of the call; `vec` holds one byte per page of that range, as mincore
    // writes. mincore reads no memory of the range itself.
    let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, vec.as_mut_ptr()) };
    if rc != 0 {
        return Err(io_err(path, "mincore", std::io::Error::last_os_error()));
    }
    let resident = vec.iter().filter(|&&b| b & 1 != 0).count() as u64;
    Ok(Residency {
        resident_pages: resident,
        total_pages: pages as u64,
        page_bytes: page as u64,
    })
}

/// Residency of a whole file in the page cache, through a fresh read-only mapping that is
/// never read (mapping alone faults nothing in).
pub fn file_residency(path: &Path) -> Result<Residency> {
    let file = File::open(path).map_err(|e| io_err(path, "open", e))?;
    let len = file.metadata().map_err(|e| io_err(path, "stat", e))?.len();
    if len == 0 {
        return mapping_residency(&[], path);
    }
    // SAFETY: a read-only private mapping that this function only passes to mincore and
    // drops; no byte of it is read, so a concurrent truncation cannot fault here.
    let map =
        unsafe { memmap2::MmapOptions::new().map(&file) }.map_err(|e| io_err(path, "mmap", e))?;
    mapping_residency(&map, path)
}

/// Drops `path`'s clean pages from the page cache (`POSIX_FADV_DONTNEED` over the whole
/// file). Pages mapped by any process, or dirty, may stay: read [`file_residency`] back.
pub fn evict_file(path: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let file = File::open(path).map_err(|e| io_err(path, "open", e))?;
    // SAFETY: fadvise on a descriptor this function owns; it changes no memory of ours.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io_err(
            path,
            "posix_fadvise(POSIX_FADV_DONTNEED)",
            std::io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(())
}

/// `RLIMIT_MEMLOCK` of this process: (soft, hard) in bytes, `None` for unlimited.
pub fn memlock_limit() -> (Option<u64>, Option<u64>) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct, which `r` is.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    if rc != 0 {
        return (None, None);
    }
    // rlim_t is u64 here but narrower on some 32-bit targets.
    #[allow(clippy::unnecessary_cast)]
    let v = |x: libc::rlim_t| (x != libc::RLIM_INFINITY).then_some(x as u64);
    (v(r.rlim_cur), v(r.rlim_max))
}

/// Locks `map` in memory; on failure the error names `RLIMIT_MEMLOCK`, its current values and
/// the bytes the lock needed.
pub(crate) fn lock(map: &memmap2::Mmap, path: &Path) -> Result<()> {
    map.lock().map_err(|source| {
        let (soft, hard) = memlock_limit();
        Error::Mlock {
            path: path.to_path_buf(),
            bytes: map.len() as u64,
            soft: soft.map_or("unlimited".into(), |b| b.to_string()),
            hard: hard.map_or("unlimited".into(), |b| b.to_string()),
            source,
        }
    })
}

/// Asks for the whole mapping (`MADV_WILLNEED`) and reads one byte of every page, so every
/// page is in memory and mapped when this returns.
pub(crate) fn prefault(map: &memmap2::Mmap, path: &Path) -> Result<()> {
    map.advise(memmap2::Advice::WillNeed)
        .map_err(|e| io_err(path, "madvise(MADV_WILLNEED)", e))?;
    touch_pages(map);
    Ok(())
}

/// Reads one byte of every page of `bytes`; returns their wrapping sum so the reads stay.
pub fn touch_pages(bytes: &[u8]) -> u8 {
    let page = page_size();
    let mut sum = 0u8;
    for b in bytes.iter().step_by(page) {
        sum = sum.wrapping_add(std::hint::black_box(*b));
    }
    std::hint::black_box(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_range_is_fully_resident() {
        let r = mapping_residency(&[], Path::new("empty")).unwrap();
        assert_eq!(r.total_pages, 0);
        assert_eq!(r.fraction(), 1.0);
    }

    #[test]
    fn heap_memory_just_written_is_resident() {
        let page = page_size();
        let v = vec![1u8; page * 8];
        let r = mapping_residency(&v, Path::new("heap")).unwrap();
        // The vector may start mid-page, so it spans 8 or 9 pages, every one written.
        assert!(r.total_pages == 8 || r.total_pages == 9, "{r:?}");
        assert_eq!(r.resident_pages, r.total_pages);
    }

    #[test]
    fn a_missing_file_names_the_operation_and_path() {
        let e = evict_file(Path::new("/nonexistent/model.gguf")).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("/nonexistent/model.gguf") && s.contains("open"),
            "{s}"
        );
    }
}
