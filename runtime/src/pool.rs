//! Persistent fork/join thread pool for the kernels: workers spin briefly, then park; the
//! calling thread takes part as worker 0; `run` allocates nothing.
//!
//! Protocol: the caller publishes a type-erased pointer to the job, sets the count of workers
//! still to finish, then bumps a generation counter. A worker that sees a new generation runs
//! the job once and decrements the count; the caller runs its own share, then waits for the
//! count to reach zero before returning (so the borrowed job outlives every use). Parking uses
//! a mutex and condvar guarded by a parked-worker count, so a busy pool makes no syscalls.
//! A panic in any worker is caught, the run completes, and the caller then panics with a
//! message naming the worker: no deadlock, no use of a dead job.
//!
//! Active threads: [`ThreadPool::set_active_threads`] lowers how many threads take part in
//! later runs (the thermal governor's thread-count actuator). The count of a run travels in
//! the low bits of its generation word, so a worker learns it with the generation in one
//! atomic load; workers above the active count take no part and sleep on the condvar (no
//! spinning) until the count is raised again.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;

/// Spin iterations before a waiting worker parks (tens of microseconds).
const SPIN_ITERS: u32 = 1 << 14;

type Job = dyn Fn(usize, usize) + Sync;

/// Low bits of the generation word: the number of threads taking part in that run.
const PART_BITS: u32 = 16;
const PART_MASK: u64 = (1 << PART_BITS) - 1;

/// The generation word after `word` for a run of `parts` threads.
fn next_generation(word: u64, parts: usize) -> u64 {
    (((word >> PART_BITS) + 1) << PART_BITS) | (parts as u64 & PART_MASK)
}

struct Shared {
    n_threads: usize,
    /// Bumped once per `run` (and once at shutdown); low `PART_BITS` bits: participants.
    generation: AtomicU64,
    /// Threads that take part in the next run (1..=n_threads).
    active: AtomicUsize,
    /// Workers (excluding the caller) that have not finished the current generation.
    pending: AtomicUsize,
    /// Index of the first worker that panicked in this generation, plus one (0 = none).
    panicked: AtomicUsize,
    shutdown: AtomicBool,
    parked: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    /// The current job. Written only by the caller while no worker reads it (before the
    /// generation bump and after `pending` reaches zero).
    job: UnsafeCell<Option<*const Job>>,
}

// SAFETY: `job` is written only by the thread holding `ThreadPool::run_lock`, strictly before
// the Release bump of `generation` and after all workers have signalled completion through
// `pending` (Release/Acquire); workers only read it after an Acquire load of the new
// generation. The pointed-to closure is `Sync`. All other fields are thread-safe types.
unsafe impl Sync for Shared {}
// SAFETY: see above; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// A persistent pool of `n_threads - 1` workers plus the calling thread.
pub struct ThreadPool {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
    run_lock: Mutex<()>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("n_threads", &self.shared.n_threads)
            .finish()
    }
}

impl ThreadPool {
    /// Starts `n_threads - 1` workers (`0` is treated as 1). If the OS refuses a thread, the
    /// pool runs with the workers it got.
    pub fn new(n_threads: usize) -> Self {
        let requested = n_threads.clamp(1, PART_MASK as usize);
        let shared = Arc::new(Shared {
            n_threads: requested,
            generation: AtomicU64::new(0),
            active: AtomicUsize::new(requested),
            pending: AtomicUsize::new(0),
            panicked: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            job: UnsafeCell::new(None),
        });
        let mut spawned = Vec::with_capacity(requested - 1);
        for idx in 1..requested {
            let s = Arc::clone(&shared);
            match std::thread::Builder::new()
                .name(format!("pocketperf-worker-{idx}"))
                .spawn(move || worker_loop(&s, idx))
            {
                Ok(h) => spawned.push(h),
                Err(_) => break,
            }
        }
        let got = spawned.len() + 1;
        if got != requested {
            // Stop the workers we did start, then rebuild with the count we can have.
            let tmp = ThreadPool {
                shared,
                handles: spawned,
                run_lock: Mutex::new(()),
            };
            drop(tmp);
            return ThreadPool::new(got);
        }
        ThreadPool {
            shared,
            handles: spawned,
            run_lock: Mutex::new(()),
        }
    }

    /// Threads taking part in `run`, the caller included.
    pub fn n_threads(&self) -> usize {
        self.shared.n_threads
    }

    /// Threads that take part in the next `run`, the caller included.
    pub fn active_threads(&self) -> usize {
        self.shared.active.load(Ordering::Relaxed)
    }

    /// Lets only `n` threads (clamped to `1..=n_threads`) take part in later runs; the others
    /// sleep until the count is raised. Returns the count in effect. Jobs see the smaller
    /// count as their `n_workers`, so work splits over the active threads only.
    pub fn set_active_threads(&self, n: usize) -> usize {
        let s = &*self.shared;
        let n = n.clamp(1, s.n_threads);
        s.active.store(n, Ordering::SeqCst);
        let _g = s.lock.lock().unwrap_or_else(|p| p.into_inner());
        s.wake.notify_all();
        n
    }

    /// Runs `f(worker_idx, n_workers)` once on each worker, the caller as worker 0, and returns
    /// when all have finished. A nested or concurrent call runs `f(0, 1)` inline instead.
    ///
    /// # Panics
    /// If `f` panicked on any worker (after every worker has finished).
    pub fn run<F: Fn(usize, usize) + Sync>(&self, f: F) {
        let n = self
            .shared
            .active
            .load(Ordering::Relaxed)
            .clamp(1, self.shared.n_threads);
        if n == 1 {
            f(0, 1);
            return;
        }
        let _guard = match self.run_lock.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                f(0, 1);
                return;
            }
        };
        let s = &*self.shared;
        let job: &(dyn Fn(usize, usize) + Sync + '_) = &f;
        // SAFETY: erasing the lifetime is sound because this function does not return (or
        // unwind) before every worker has finished with the job: see the wait below.
        let job: *const Job = unsafe {
            std::mem::transmute::<&(dyn Fn(usize, usize) + Sync + '_), &'static Job>(job)
        };
        // SAFETY: no worker reads `job` now: the previous generation completed (pending == 0)
        // and the next one is not yet published.
        unsafe { *s.job.get() = Some(job) };
        s.panicked.store(0, Ordering::Relaxed);
        s.pending.store(n - 1, Ordering::Relaxed);
        // Only the thread holding `run_lock` (or `drop`) writes the generation word.
        let word = s.generation.load(Ordering::Relaxed);
        s.generation
            .store(next_generation(word, n), Ordering::SeqCst);
        if s.parked.load(Ordering::SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0, n)));
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            if spins < SPIN_ITERS {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
        if let Err(payload) = mine {
            resume_unwind(payload);
        }
        let p = s.panicked.load(Ordering::Acquire);
        if p != 0 {
            panic!("thread pool worker {} panicked while running a job", p - 1);
        }
    }
}

fn worker_loop(s: &Shared, idx: usize) {
    let mut seen = 0u64;
    loop {
        // Wait for a new generation: spin, then park.
        let mut spins = 0u32;
        let g = loop {
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                break g;
            }
            if spins < SPIN_ITERS {
                std::hint::spin_loop();
                spins += 1;
                continue;
            }
            let mut guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.parked.fetch_add(1, Ordering::SeqCst);
            while s.generation.load(Ordering::SeqCst) == seen {
                guard = s.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
            }
            s.parked.fetch_sub(1, Ordering::SeqCst);
            drop(guard);
            spins = 0;
        };
        seen = g;
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        let parts = (g & PART_MASK) as usize;
        if idx < parts {
            // SAFETY: the Acquire load of the new generation orders this read after the
            // caller's write; this worker is counted in `pending`, so the caller keeps the job
            // alive (and unchanged) until it decrements.
            let job = unsafe { *s.job.get() };
            if let Some(job) = job {
                // SAFETY: see above: the closure outlives this call.
                let f: &Job = unsafe { &*job };
                if catch_unwind(AssertUnwindSafe(|| f(idx, parts))).is_err() {
                    let _ = s.panicked.compare_exchange(
                        0,
                        idx + 1,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                }
            }
            s.pending.fetch_sub(1, Ordering::Release);
        }
        if idx >= s.active.load(Ordering::SeqCst) {
            // Not needed for now: sleep without spinning until the count is raised.
            let mut guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            while !s.shutdown.load(Ordering::SeqCst) && idx >= s.active.load(Ordering::SeqCst) {
                guard = s.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, Ordering::SeqCst);
        let word = s.generation.load(Ordering::Relaxed);
        s.generation
            .store(next_generation(word, 0), Ordering::SeqCst);
        {
            let _g = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.wake.notify_all();
        }
        for h in self.handles.drain(..) {
            // A worker never panics outside `catch_unwind`; nothing to report if it did.
            let _ = h.join();
        }
    }
}
