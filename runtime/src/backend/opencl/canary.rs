//! Device buffers with optional guard regions (buffer canaries).
//!
//! In canary mode every buffer a kernel writes is a sub-buffer in the middle of a larger
//! allocation whose two guard regions (before and after) are filled with a known byte
//! pattern. After each kernel the session reads the guards back; any changed byte means a
//! kernel wrote outside its buffer, and the error names the kernel, the buffer and the offset.
//! Out of canary mode a buffer is a plain allocation and checking is free.

use crate::error::{Error, Result};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::memory::{Buffer, CL_MEM_READ_WRITE};
use opencl3::types::CL_BLOCKING;
use std::ptr;

/// The guard pattern byte.
pub const GUARD_BYTE: u8 = 0xCD;

/// A device buffer of `len` bytes, optionally between two guard regions.
pub struct DevBuf {
    name: &'static str,
    buf: Buffer<u8>,
    len: usize,
    guard: Option<Guard>,
}

struct Guard {
    parent: Buffer<u8>,
    /// Bytes of each guard region (a multiple of the device's base-address alignment).
    size: usize,
    scratch: Vec<u8>,
}

fn cl(what: String) -> impl FnOnce(opencl3::error_codes::ClError) -> Error {
    move |e| Error::OpenCl(format!("{what}: {e}"))
}

impl DevBuf {
    /// Allocates `len` bytes (at least 1). With `guard_size > 0` the buffer is a sub-buffer at
    /// offset `guard_size` of an allocation of `len + 2 * guard_size` bytes filled with
    /// [`GUARD_BYTE`]; `guard_size` must be a multiple of the device's base-address alignment.
    pub fn new(
        ctx: &Context,
        queue: &CommandQueue,
        name: &'static str,
        len: usize,
        guard_size: usize,
    ) -> Result<Self> {
        let len = len.max(1);
        if guard_size == 0 {
            // SAFETY: no host pointer is passed; the driver allocates `len` bytes.
            let buf = unsafe { Buffer::<u8>::create(ctx, CL_MEM_READ_WRITE, len, ptr::null_mut()) }
                .map_err(cl(format!("allocating `{name}` ({len} bytes)")))?;
            return Ok(DevBuf {
                name,
                buf,
                len,
                guard: None,
            });
        }
        let total = len + 2 * guard_size;
        // SAFETY: as above.
        let mut parent =
            unsafe { Buffer::<u8>::create(ctx, CL_MEM_READ_WRITE, total, ptr::null_mut()) }
                .map_err(cl(format!("allocating guarded `{name}` ({total} bytes)")))?;
        let fill = vec![GUARD_BYTE; total];
        // SAFETY: blocking write of `total` bytes from a live host vector into a buffer of
        // exactly `total` bytes.
        unsafe { queue.enqueue_write_buffer(&mut parent, CL_BLOCKING, 0, &fill, &[]) }
            .map_err(cl(format!("filling the guards of `{name}`")))?;
        // SAFETY: the region [guard_size, guard_size + len) lies inside the parent and its
        // origin is a multiple of the base-address alignment (checked by the caller's choice of
        // `guard_size`; the driver rejects it otherwise).
        let buf = unsafe { parent.create_sub_buffer(CL_MEM_READ_WRITE, guard_size, len) }
            .map_err(cl(format!("creating the guarded view of `{name}`")))?;
        Ok(DevBuf {
            name,
            buf,
            len,
            guard: Some(Guard {
                parent,
                size: guard_size,
                scratch: vec![0; guard_size],
            }),
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn buffer(&self) -> &Buffer<u8> {
        &self.buf
    }

    pub fn buffer_mut(&mut self) -> &mut Buffer<u8> {
        &mut self.buf
    }

    pub fn guarded(&self) -> bool {
        self.guard.is_some()
    }

    /// Reads both guard regions back; an error names `after` (the kernel just run), this
    /// buffer and the first changed byte. Waits for the queue.
    pub fn check(&mut self, queue: &CommandQueue, after: &str) -> Result<()> {
        let Some(g) = &mut self.guard else {
            return Ok(());
        };
        for (region, origin) in [("before", 0usize), ("after", g.size + self.len)] {
            // SAFETY: blocking read of `g.size` bytes at `origin` into a host vector of
            // `g.size` bytes; `origin + g.size` is the parent's length at most.
            unsafe {
                queue.enqueue_read_buffer(&g.parent, CL_BLOCKING, origin, &mut g.scratch, &[])
            }
            .map_err(cl(format!("reading the guards of `{}`", self.name)))?;
            if let Some(i) = g.scratch.iter().position(|&b| b != GUARD_BYTE) {
                let at = if region == "before" {
                    format!("start-{}", g.size - i)
                } else {
                    format!("end+{i}")
                };
                return Err(Error::OpenCl(format!(
                    "buffer canary: kernel `{after}` wrote outside buffer `{}` ({} bytes): the \
                     byte at {at} is {:#04x}, not the guard's {GUARD_BYTE:#04x}",
                    self.name, self.len, g.scratch[i]
                )));
            }
        }
        Ok(())
    }
}
