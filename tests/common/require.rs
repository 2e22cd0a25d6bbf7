//! The one rule for tests whose prerequisites may be missing, shared by the unit tests
//! (`crate::test_require`) and the integration tests (`common::require`); the CMake
//! tests follow the same rule (`cmake/ZTreeTestRequire.cmake`).
//!
//! - Data and tools (the GADGET-4 snapshot, scipy, NVRTC, ptxas): a test without them is
//!   skipped with a message on a developer's machine and fails in CI (`CI` set to anything
//!   but empty, `0` or `false`), where a skip would hide a missing install step.
//! - Hardware a machine may lack (a GPU, AVX-512): the test is skipped with a message,
//!   and fails where `ZTREE_REQUIRE_HARDWARE` lists the feature (`gpu`, `avx512`;
//!   comma-separated, or `all`), as on a machine lent for those checks.

/// Whether this run is CI's.
pub fn in_ci() -> bool {
    ci_value(std::env::var("CI").ok().as_deref())
}

fn ci_value(v: Option<&str>) -> bool {
    v.is_some_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Whether a test's data or tool `what` is `present`; missing: a skip with a message, or a
/// failure in CI.
pub fn require(what: &str, present: bool) -> bool {
    if present {
        return true;
    }
    if in_ci() {
        panic!("missing in CI: {what} (CI must provide it; run through `make test`)");
    }
    eprintln!("SKIPPED: {what} not found");
    false
}

/// Whether hardware `what` (feature name `feature`) is `present`; missing: a skip with a
/// message, or a failure where `ZTREE_REQUIRE_HARDWARE` lists `feature`.
pub fn require_hardware(what: &str, feature: &str, present: bool) -> bool {
    if present {
        return true;
    }
    let wanted = std::env::var("ZTREE_REQUIRE_HARDWARE").unwrap_or_default();
    if wanted.split(',').map(str::trim).any(|f| f == feature || f == "all") {
        panic!("missing: {what} (ZTREE_REQUIRE_HARDWARE={wanted})");
    }
    eprintln!("SKIPPED: no {what}");
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn ci_is_any_value_but_empty_zero_or_false() {
        for v in ["true", "1", "yes", "TRUE"] {
            assert!(super::ci_value(Some(v)), "{v}");
        }
        for v in [None, Some(""), Some("0"), Some("false"), Some("False")] {
            assert!(!super::ci_value(v), "{v:?}");
        }
    }
}
