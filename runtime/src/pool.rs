//! Persistent fork/join thread pool for the kernels: workers spin briefly, then park; the
//! calling thread takes part as worker 0; running a job allocates nothing.
//!
//! Protocol: the caller publishes a type-erased pointer to the job, opens a gate tagged with
//! the new generation, then bumps the generation counter. A worker that sees a new
//! generation enters through the gate (one compare-and-swap that also counts it), runs the
//! job once and counts itself done. With [`ThreadPool::run`] the caller waits until every
//! worker has entered and finished. With [`ThreadPool::run_dynamic`] the caller closes the
//! gate as soon as its own call of the job returns and waits only for the workers that
//! entered before that: a worker the OS has descheduled never stalls the caller, it simply
//! finds the gate closed and skips the job without touching it. Jobs for `run_dynamic`
//! therefore share their work dynamically (an atomic counter of chunks), so that any subset
//! of workers completes it. Either way the caller returns only after every worker that
//! entered has finished, so the borrowed job outlives every use. Parking uses a mutex and
//! condvar guarded by a parked-worker count, so a busy pool makes no syscalls. A panic in any
//! worker is caught, the run completes, and the caller then panics with a message naming the
//! worker: no deadlock, no use of a dead job.
//!
//! Active threads: [`ThreadPool::set_active_threads`] lowers how many threads take part in
//! later runs (the thermal governor's thread-count actuator). The caller publishes a run's
//! participant count with its generation; workers above it do not enter, and a worker above
//! the active count parks at once instead of spinning between runs.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;

/// Spin iterations before a waiting worker parks (tens of microseconds).
const SPIN_ITERS: u32 = 1 << 14;

type Job = dyn Fn(usize, usize) + Sync;

struct Shared {
    n_threads: usize,
    /// Bumped once per `run` (and once at shutdown).
    generation: AtomicUsize,
    /// `tag << 32 | CLOSED | entered`: the generation (low 32 bits) whose job may be entered,
    /// whether entry is closed, and how many workers entered.
    gate: AtomicU64,
    /// Workers that entered the current generation and finished its job.
    done: AtomicUsize,
    /// Threads that take part in the next run (1..=n_threads).
    active: AtomicUsize,
    /// Participants of the current generation, written before its bump.
    parts: AtomicUsize,
    /// Index of the first worker that panicked in this generation, plus one (0 = none).
    panicked: AtomicUsize,
    shutdown: AtomicBool,
    parked: AtomicUsize,
    /// Workers whose loop has begun (their thread's start-up, with its allocations, is over).
    started: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    /// The current job. Written only by the caller while no worker reads it (before the
    /// generation bump and after `pending` reaches zero).
    job: UnsafeCell<Option<*const Job>>,
}

const CLOSED: u64 = 1 << 31;
const COUNT: u64 = CLOSED - 1;

// SAFETY: `job` is written only by the thread holding `ThreadPool::run_lock`, strictly before
// the SeqCst bump of `generation` and after every worker that entered the previous job has
// signalled completion through `done` (Release/Acquire); workers only read it after entering
// through the gate (Acquire), which they can only do for the generation it was written for.
// The pointed-to closure is `Sync`. All other fields are thread-safe types.
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
        let requested = n_threads.max(1);
        let shared = Arc::new(Shared {
            n_threads: requested,
            generation: AtomicUsize::new(0),
            gate: AtomicU64::new(CLOSED),
            done: AtomicUsize::new(0),
            active: AtomicUsize::new(requested),
            parts: AtomicUsize::new(requested),
            panicked: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            started: AtomicUsize::new(0),
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
        // Return only once every worker runs its loop: a thread's start-up allocates (its
        // name, thread-locals), and a worker the OS starts late would otherwise do that in
        // the middle of the first decode steps, which promise no heap allocation.
        while shared.started.load(Ordering::Acquire) < spawned.len() {
            std::thread::sleep(std::time::Duration::from_micros(50));
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

    /// Threads that take part in the next run, the caller included.
    pub fn active_threads(&self) -> usize {
        self.shared.active.load(Ordering::Relaxed)
    }

    /// Lets only `n` threads (clamped to `1..=n_threads`) take part in later runs; the others
    /// park until a run needs them again. Returns the count in effect. Jobs see the smaller
    /// count as their `n_workers`, so work splits over the active threads only.
    pub fn set_active_threads(&self, n: usize) -> usize {
        let n = n.clamp(1, self.shared.n_threads);
        self.shared.active.store(n, Ordering::SeqCst);
        n
    }

    /// Runs `f(worker_idx, n_workers)` once on each active worker, the caller as worker 0, and
    /// returns when all have finished. A nested or concurrent call runs `f(0, 1)` inline instead.
    ///
    /// # Panics
    /// If `f` panicked on any worker (after every worker has finished).
    pub fn run<F: Fn(usize, usize) + Sync>(&self, f: F) {
        self.run_inner(&f, true);
    }

    /// Runs `f(worker_idx, n_workers)` on the caller (as worker 0) and on every worker that
    /// starts before the caller's own call returns; returns when those have finished. `f`
    /// must share its work dynamically (each call takes chunks from a shared counter until
    /// none are left), since any subset of the workers may take part. A nested or concurrent
    /// call runs `f(0, 1)` inline instead.
    ///
    /// # Panics
    /// If `f` panicked on any worker that ran it (after those have finished).
    pub fn run_dynamic<F: Fn(usize, usize) + Sync>(&self, f: F) {
        self.run_inner(&f, false);
    }

    /// Runs `f(lo, hi)` over `0..total` in chunks of `chunk` items (the last one shorter),
    /// shared out dynamically ([`ThreadPool::run_dynamic`]) through an atomic counter; on the
    /// calling thread alone when there is one chunk or one thread.
    pub fn run_chunks(&self, total: usize, chunk: usize, f: impl Fn(usize, usize) + Sync) {
        if total == 0 {
            return;
        }
        let chunk = chunk.max(1);
        let n_chunks = total.div_ceil(chunk);
        if n_chunks == 1 || self.n_threads() == 1 {
            let mut lo = 0;
            while lo < total {
                f(lo, (lo + chunk).min(total));
                lo += chunk;
            }
            return;
        }
        let next = AtomicUsize::new(0);
        self.run_dynamic(|_, _| {
            loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= n_chunks {
                    break;
                }
                let lo = c * chunk;
                f(lo, (lo + chunk).min(total));
            }
        });
    }

    fn run_inner(&self, f: &(dyn Fn(usize, usize) + Sync), all: bool) {
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
        // SAFETY: erasing the lifetime is sound because this function does not return (or
        // unwind) before every worker that entered has finished with the job: see below.
        let job: *const Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync + '_), &'static Job>(f) };
        // SAFETY: no worker reads `job` now: the previous job's entrants all finished and the
        // gate is closed until the store below.
        unsafe { *s.job.get() = Some(job) };
        s.panicked.store(0, Ordering::Relaxed);
        s.done.store(0, Ordering::Relaxed);
        s.parts.store(n, Ordering::Relaxed);
        let g = s.generation.load(Ordering::Relaxed).wrapping_add(1);
        s.gate
            .store((g as u64 & 0xFFFF_FFFF) << 32, Ordering::Relaxed);
        s.generation.store(g, Ordering::SeqCst);
        if s.parked.load(Ordering::SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0, n)));
        let entered = if all {
            spin_until(|| s.gate.load(Ordering::Acquire) & COUNT == (n - 1) as u64);
            n - 1
        } else {
            (s.gate.fetch_or(CLOSED, Ordering::AcqRel) & COUNT) as usize
        };
        spin_until(|| s.done.load(Ordering::Acquire) == entered);
        if all {
            s.gate.fetch_or(CLOSED, Ordering::AcqRel);
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

/// Spins on `cond`, then yields the CPU between checks.
fn spin_until(cond: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !cond() {
        if spins < SPIN_ITERS {
            std::hint::spin_loop();
            spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

fn worker_loop(s: &Shared, idx: usize) {
    s.started.fetch_add(1, Ordering::Release);
    let mut seen = 0usize;
    loop {
        // Wait for a new generation: spin, then park.
        let mut spins = 0u32;
        let g = loop {
            let g = s.generation.load(Ordering::Acquire);
            if g != seen {
                break g;
            }
            // A worker above the active count parks at once.
            if spins < SPIN_ITERS && idx < s.active.load(Ordering::Relaxed) {
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
        // The participant count of generation g (written before its bump, which the Acquire
        // load above saw); if the caller has moved on, `enter` refuses anyway.
        let parts = s.parts.load(Ordering::Acquire);
        if idx >= parts || !enter(s, g) {
            continue;
        }
        // SAFETY: entering through the gate of generation g (Acquire) orders this read after
        // the caller's write of g's job; the caller keeps it alive until `done` counts us.
        let job = unsafe { *s.job.get() };
        if let Some(job) = job {
            // SAFETY: see above: the closure outlives this call.
            let f: &Job = unsafe { &*job };
            if catch_unwind(AssertUnwindSafe(|| f(idx, parts))).is_err() {
                let _ =
                    s.panicked
                        .compare_exchange(0, idx + 1, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
        s.done.fetch_add(1, Ordering::Release);
    }
}

/// Enters generation `g`'s job if its gate is still open; false if it closed (or moved on).
fn enter(s: &Shared, g: usize) -> bool {
    let tag = (g as u64 & 0xFFFF_FFFF) << 32;
    let mut cur = s.gate.load(Ordering::Acquire);
    loop {
        if cur & !(CLOSED | COUNT) != tag || cur & CLOSED != 0 {
            return false;
        }
        match s
            .gate
            .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return true,
            Err(now) => cur = now,
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, Ordering::SeqCst);
        s.generation.fetch_add(1, Ordering::SeqCst);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_chunks_covers_every_item_once() {
        for threads in [1, 2, 3] {
            let pool = ThreadPool::new(threads);
            for (total, chunk) in [(0, 4), (1, 4), (10, 3), (12, 4), (7, 0), (100, 7)] {
                let hits: Vec<AtomicUsize> = (0..total).map(|_| AtomicUsize::new(0)).collect();
                pool.run_chunks(total, chunk, |lo, hi| {
                    assert!(
                        lo < hi && hi <= total && hi - lo <= chunk.max(1),
                        "{lo}..{hi}"
                    );
                    for h in &hits[lo..hi] {
                        h.fetch_add(1, Ordering::Relaxed);
                    }
                });
                for (i, h) in hits.iter().enumerate() {
                    let n = h.load(Ordering::Relaxed);
                    assert_eq!(
                        n, 1,
                        "{threads} threads, {total}/{chunk}: item {i} {n} times"
                    );
                }
            }
        }
    }

    #[test]
    fn run_calls_every_worker_once() {
        let pool = ThreadPool::new(3);
        for _ in 0..200 {
            let seen = [
                AtomicUsize::new(0),
                AtomicUsize::new(0),
                AtomicUsize::new(0),
            ];
            pool.run(|w, n| {
                assert_eq!(n, 3);
                seen[w].fetch_add(1, Ordering::Relaxed);
            });
            assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn run_dynamic_finishes_shared_work_with_any_subset() {
        let pool = ThreadPool::new(2);
        for round in 0..500 {
            let next = AtomicUsize::new(0);
            let sum = AtomicUsize::new(0);
            let callers = AtomicUsize::new(0);
            pool.run_dynamic(|_, _| {
                callers.fetch_add(1, Ordering::Relaxed);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= 100 {
                        break;
                    }
                    sum.fetch_add(i, Ordering::Relaxed);
                }
            });
            assert_eq!(sum.load(Ordering::Relaxed), 4950, "round {round}");
            let c = callers.load(Ordering::Relaxed);
            assert!((1..=2).contains(&c), "round {round}: {c} calls");
        }
    }

    #[test]
    fn worker_panic_reaches_the_caller_and_the_pool_survives() {
        let pool = ThreadPool::new(2);
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            pool.run(|w, _| {
                if w == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(|_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }
}
