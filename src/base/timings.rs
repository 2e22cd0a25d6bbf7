//! What a call measures of itself: stage times and walk sizes.

/// Wall-clock time per stage of one call, in call order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timings {
    /// (stage name, seconds), in call order; a name may repeat (its times add up).
    pub stages: Vec<(&'static str, f64)>,
}

impl Timings {
    pub(crate) fn time<R>(&mut self, name: &'static str, f: impl FnOnce() -> R) -> R {
        let t = std::time::Instant::now();
        let r = f();
        self.stages.push((name, t.elapsed().as_secs_f64()));
        r
    }
    /// Seconds over all stages.
    pub fn total(&self) -> f64 {
        self.stages.iter().map(|s| s.1).sum()
    }
    /// Seconds of every stage named `name`.
    pub fn get(&self, name: &str) -> f64 {
        self.stages.iter().filter(|s| s.0 == name).map(|s| s.1).sum()
    }
}

/// Statistics of one walk.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WalkStats {
    /// Interaction-list entries per plane, from the top (super) plane down to the leaves
    /// (the leaf entry counts the candidate pairs handed to the leaf pass).
    pub list_entries: Vec<u64>,
}
