//! Which vector instruction set the hot loops are compiled for, chosen at run time.
//!
//! The shipped library targets baseline x86-64 (SSE2). The kNN leaf kernel is compiled a
//! second and third time with AVX2 and AVX-512 enabled (`#[target_feature]` wrappers
//! around one `#[inline(always)]` body), the FoF leaf passes a second time with AVX2 (run
//! at both levels), and `level()` picks AVX2 where the CPU has it.
//! The AVX-512 build keeps a query's best candidates in registers (`TopK16`) and runs
//! for 2 <= k <= 16 (other k run the AVX2 build, faster there; the candidate buffer's
//! sorting networks, k > 28, are AVX2 code at both levels). It is the default on
//! AMD CPUs that have AVX-512 (Zen 4: kNN walk 13-20% shorter than the AVX2 build at
//! k = 16); elsewhere only when asked for (`ZTREE_SIMD=avx512`):
//! on an Emerald Rapids Xeon the AVX-512 build was 10-18% slower before `TopK16`, and
//! no Intel CPU has been measured with it since (BENCHMARKS.md).
//! The same IEEE operations run in every version (Rust never fuses a multiply and an
//! add on its own), so results are bit-identical at every level.
//! `ZTREE_SIMD=base|avx2|avx512` sets the level, capped by what the CPU has (read once
//! per process).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Simd {
    Base = 0,
    Avx2 = 1,
    Avx512 = 2,
}

impl Simd {
    /// Every level this CPU can run, lowest first.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn available() -> Vec<Simd> {
        [Simd::Base, Simd::Avx2, Simd::Avx512].into_iter().filter(|&l| l <= detected()).collect()
    }
}

fn detected() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        // The AVX2 level also enables what every AVX2 CPU has (FMA — never used unasked —,
        // BMI1/2, POPCNT, LZCNT: the mask loops' bit scans); check them all.
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("bmi2")
            && std::arch::is_x86_feature_detected!("popcnt")
            && std::arch::is_x86_feature_detected!("lzcnt");
        if avx2 && std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512vl") {
            return Simd::Avx512;
        }
        if avx2 {
            return Simd::Avx2;
        }
    }
    Simd::Base
}

/// Whether the CPU is AMD's (the vendor string of CPUID leaf 0).
fn amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let r = std::arch::x86_64::__cpuid(0);
        (r.ebx, r.edx, r.ecx) == (u32::from_le_bytes(*b"Auth"), u32::from_le_bytes(*b"enti"), u32::from_le_bytes(*b"cAMD"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A level forced by tests (255: none).
static FORCED: AtomicU8 = AtomicU8::new(255);

/// The level the kernels run at: AVX-512 on AMD CPUs that have it, else AVX2 where the
/// CPU has it (else the baseline), or what `ZTREE_SIMD` asks for, capped by the CPU.
#[inline]
pub(crate) fn level() -> Simd {
    match FORCED.load(Ordering::Relaxed) {
        0 => return Simd::Base,
        1 => return Simd::Avx2,
        2 => return Simd::Avx512,
        _ => {}
    }
    static LEVEL: OnceLock<Simd> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let cap = match std::env::var("ZTREE_SIMD").as_deref() {
            Ok("base") => Simd::Base,
            Ok("avx512") => Simd::Avx512,
            Ok("avx2") => Simd::Avx2,
            _ if amd() => Simd::Avx512,
            _ => Simd::Avx2,
        };
        detected().min(cap)
    })
}

/// Runs the kernels of this process at `l` (tests: results must not depend on it).
#[cfg(test)]
pub(crate) fn force(l: Option<Simd>) {
    FORCED.store(l.map_or(255, |l| l as u8), Ordering::Relaxed);
}
