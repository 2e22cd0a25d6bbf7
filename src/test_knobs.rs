//! Tests that set a process-wide knob (the SIMD level, the kNN leaf pass's forced guess
//! factor and kept-leaf count, the device node test's sizes) hold one lock while they run,
//! so no two of them change knobs under each other, and every knob is back at its default
//! when the guard goes, whether the test passed or panicked.

use std::sync::{Mutex, MutexGuard};

static KNOBS: Mutex<()> = Mutex::new(());

/// Held by a test for as long as it sets knobs; restores them all on drop.
pub(crate) struct Knobs {
    _lock: MutexGuard<'static, ()>,
}

/// Takes the knobs' lock (a test that panicked while holding it poisons nothing here:
/// every knob is restored by its guard).
pub(crate) fn hold() -> Knobs {
    Knobs { _lock: KNOBS.lock().unwrap_or_else(|e| e.into_inner()) }
}

impl Drop for Knobs {
    fn drop(&mut self) {
        crate::backend::cpu::reset_test_knobs();
        crate::backend::cuda::reset_test_knobs();
    }
}
