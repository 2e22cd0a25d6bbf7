//! Benchmark helpers: seeded data sets, a peak-memory-counting allocator, and the Python
//! peers (scipy, pykdtree, scikit-learn) run on the same points.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct CountingAlloc;
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let c = CURRENT.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(c, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        CURRENT.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new > l.size() {
                let c = CURRENT.fetch_add(new - l.size(), Ordering::Relaxed) + new - l.size();
                PEAK.fetch_max(c, Ordering::Relaxed);
            } else {
                CURRENT.fetch_sub(l.size() - new, Ordering::Relaxed);
            }
        }
        q
    }
}

/// Starts a peak measurement; returns the baseline.
pub fn mem_mark() -> usize {
    let c = CURRENT.load(Ordering::Relaxed);
    PEAK.store(c, Ordering::Relaxed);
    c
}

/// Peak bytes allocated above the baseline since `mem_mark`.
pub fn mem_peak_since(base: usize) -> usize {
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x2545_F491_4F6C_DD1D)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    pub fn normal(&mut self) -> f64 {
        let u = self.f64().max(1e-300);
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * self.f64()).cos()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dist {
    Uniform,
    /// Like a cosmological snapshot: 35% smooth background, 65% in halos whose masses
    /// follow a power law and whose profiles are steep (NFW-like cusps), in the unit box.
    Clustered,
    /// A unit-variance-ish Gaussian blob with a few points 1e6 standard deviations away.
    Outliers,
}

impl Dist {
    pub fn name(&self) -> &'static str {
        match self {
            Dist::Uniform => "uniform",
            Dist::Clustered => "clustered",
            Dist::Outliers => "outliers",
        }
    }
}

pub fn generate(dist: Dist, n: usize, seed: u64) -> Vec<[f64; 3]> {
    let mut rng = Rng::new(seed);
    let mut pts = Vec::with_capacity(n);
    match dist {
        Dist::Uniform => {
            for _ in 0..n {
                pts.push([rng.f64(), rng.f64(), rng.f64()]);
            }
        }
        Dist::Clustered => {
            let n_bg = n * 35 / 100;
            for _ in 0..n_bg {
                pts.push([rng.f64(), rng.f64(), rng.f64()]);
            }
            // Halo masses ~ m^-1.9 between 20 and n/200 particles.
            while pts.len() < n {
                let lo = 20.0f64;
                let hi = (n as f64 / 200.0).max(40.0);
                let e = 1.0f64 - 1.9; // dN/dm ~ m^-1.9, inverse CDF
                let u = rng.f64();
                let m = (lo.powf(e) + u * (hi.powf(e) - lo.powf(e))).powf(1.0 / e) as usize;
                let m = m.min(n - pts.len()).max(1);
                let c = [rng.f64(), rng.f64(), rng.f64()];
                // Virial radius ~ m^(1/3) in units of the mean spacing; cuspy profile.
                let rv = 0.4 * (m as f64).cbrt() / (n as f64).cbrt();
                for _ in 0..m {
                    let r = rv * rng.f64().powf(2.0);
                    let (x, y, z) = (rng.normal(), rng.normal(), rng.normal());
                    let s = r / (x * x + y * y + z * z).sqrt().max(1e-12);
                    pts.push([(c[0] + x * s).rem_euclid(1.0), (c[1] + y * s).rem_euclid(1.0), (c[2] + z * s).rem_euclid(1.0)]);
                }
            }
            // Keep every coordinate strictly inside [0, 1) after rounding.
            for p in pts.iter_mut() {
                for v in p.iter_mut() {
                    if *v >= 1.0 {
                        *v = 0.0;
                    }
                }
            }
        }
        Dist::Outliers => {
            for i in 0..n {
                if i % 100_000 == 7 {
                    pts.push([1e6 * (rng.f64() - 0.5) * 2.0, 1e6 * (rng.f64() - 0.5) * 2.0, 1e6 * (rng.f64() - 0.5) * 2.0]);
                } else {
                    pts.push([rng.normal(), rng.normal(), rng.normal()]);
                }
            }
        }
    }
    pts
}

/// Runs `scripts/peers.py MODE FILE N ...` on points written to a temp file, and parses
/// lines `name seconds`. Returns an empty list (with a note) when the venv is missing.
pub fn python_peers(mode: &str, pts: &[[f64; 3]], extra: &[String]) -> Vec<(String, f64)> {
    let py = std::path::Path::new(".venv/bin/python");
    if !py.exists() {
        eprintln!("note: .venv missing, Python peers skipped (run `make bootstrap`)");
        return Vec::new();
    }
    let path = std::env::temp_dir().join(format!("ztree-bench-{}.f64", std::process::id()));
    let bytes: Vec<u8> = pts.iter().flat_map(|p| p.iter().flat_map(|v| v.to_le_bytes())).collect();
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new(py)
        .arg("scripts/peers.py")
        .arg(mode)
        .arg(&path)
        .arg(pts.len().to_string())
        .args(extra)
        .env_remove("OPENBLAS_CORETYPE")
        .env_remove("OPENBLAS_L2_SIZE")
        .output();
    let _ = std::fs::remove_file(&path);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("note: Python peers failed to start: {e}");
            return Vec::new();
        }
    };
    if !out.status.success() {
        eprintln!("note: Python peers failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?.to_string();
            let t: f64 = it.next()?.parse().ok()?;
            Some((name, t))
        })
        .collect()
}
