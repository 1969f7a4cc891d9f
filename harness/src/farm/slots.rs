//! The host-side device slots of a farm run (`max_parallel_host`): devices whose work runs on
//! this host's cores (`local`, `sim:*`) take a slot for their whole run, so no more than the
//! inventory allows share the cores at once.

/// A counting semaphore over the host-side device slots.
pub(super) struct HostSlots {
    free: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

/// A held host slot, given back when dropped.
pub(super) struct HostSlot<'a>(&'a HostSlots);

impl HostSlots {
    pub(super) fn new(n: usize) -> Self {
        Self {
            free: std::sync::Mutex::new(n),
            freed: std::sync::Condvar::new(),
        }
    }

    pub(super) fn acquire(&self) -> HostSlot<'_> {
        // A poisoned lock only means another device's thread panicked; the count is intact.
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        HostSlot(self)
    }
}

impl Drop for HostSlot<'_> {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(|e| e.into_inner());
        *free += 1;
        self.0.freed.notify_one();
    }
}
