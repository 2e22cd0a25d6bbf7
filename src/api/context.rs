//! The handle a simulation keeps across time steps: thread pool and configuration.

use super::Config;
use crate::error::{Error, Result};

/// Owns the worker threads. Create once, call every time step. Results do not depend on
/// the number of threads.
pub struct Context {
    pub(crate) pool: rayon::ThreadPool,
    pub(crate) config: Config,
}

impl Context {
    /// A context with `config`'s thread count and tree parameters (checked here).
    pub fn new(config: Config) -> Result<Self> {
        config.tree.validate()?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(if config.threads == 0 { default_threads() } else { config.threads })
            .thread_name(|i| format!("ztree-{i}"))
            .build()
            .map_err(|e| Error::ThreadPool(e.to_string()))?;
        Ok(Self { pool, config })
    }

    /// The configuration the context was made with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Number of worker threads in use.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

/// Threads when the configuration says 0: `OMP_NUM_THREADS` (its first entry) when set,
/// so ztree follows the host code's OpenMP setting; otherwise the cores this process may
/// run on (its affinity mask and cgroup quota, so MPI ranks bound to a few cores of a node
/// do not oversubscribe it).
pub(crate) fn default_threads() -> usize {
    let omp = std::env::var("OMP_NUM_THREADS").ok();
    omp_threads(omp.as_deref()).unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn omp_threads(v: Option<&str>) -> Option<usize> {
    v?.split(',').next()?.trim().parse::<usize>().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::omp_threads;

    #[test]
    fn omp_num_threads_first_entry_wins() {
        assert_eq!(omp_threads(Some("4")), Some(4));
        assert_eq!(omp_threads(Some(" 3 ,2")), Some(3));
        assert_eq!(omp_threads(Some("0")), None);
        assert_eq!(omp_threads(Some("abc")), None);
        assert_eq!(omp_threads(None), None);
    }
}
