//! Every kernel module compiles with NVRTC for sm_80 and sm_90, and `ptxas -v` reports no
//! spill stores for any kernel; the resource table is kernels/ptxas.txt (regenerate it with
//! ZTREE_UPDATE_PTXAS_TABLE=1). Needs NVRTC (found by `nvrtc.rs`; the table is NVRTC
//! 12.9's) and ptxas in ZTREE_PTXAS (the Makefile points both at the pip wheels bootstrap
//! installs); without them the test is skipped, or fails in CI (`crate::test_require`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use super::sources;

const ARCHES: &[&str] = &["80", "90"];

fn tools() -> Option<PathBuf> {
    let ptxas = std::env::var_os("ZTREE_PTXAS").map(PathBuf::from);
    let nvrtc = super::nvrtc::version().is_ok();
    let ptxas = ptxas.filter(|p| p.exists());
    let present = nvrtc && ptxas.is_some();
    crate::test_require::require("NVRTC (libnvrtc.so.12 or .13) and ptxas (ZTREE_PTXAS; make test provides both)", present).then(|| ptxas.unwrap())
}

/// One kernel's resources from `ptxas -v`.
#[derive(Default)]
struct Usage {
    kernel: String,
    registers: u32,
    smem: u32,
    stack: u32,
    spill_stores: u32,
    spill_loads: u32,
}

fn number_before(line: &str, unit: &str) -> u32 {
    line.split(',').find_map(|part| part.trim().strip_suffix(unit)).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

fn parse(log: &str) -> Vec<Usage> {
    let mut out: Vec<Usage> = Vec::new();
    for line in log.lines() {
        let line = line.trim().trim_start_matches("ptxas info    :").trim();
        if let Some(rest) = line.strip_prefix("Compiling entry function '") {
            out.push(Usage { kernel: rest.split('\'').next().unwrap_or("").to_string(), ..Default::default() });
        } else if let Some(u) = out.last_mut() {
            if line.contains("stack frame") {
                u.stack = number_before(line, "bytes stack frame");
                u.spill_stores = number_before(line, "bytes spill stores");
                u.spill_loads = number_before(line, "bytes spill loads");
            } else if line.starts_with("Used ") {
                u.registers = line.trim_start_matches("Used ").split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0);
                u.smem = number_before(line, "bytes smem");
            }
        }
    }
    out
}

#[test]
fn every_kernel_compiles_for_sm80_and_sm90_without_spills() {
    let Some(ptxas) = tools() else { return };
    let dir = std::env::temp_dir().join(format!("ztree-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut table =
        String::from("# ptxas -v of every kernel (NVRTC 12.9, --fmad=false): regenerate with ZTREE_UPDATE_PTXAS_TABLE=1 make test-device\n");
    table.push_str("# module  kernel  arch  registers  smem_bytes  stack_bytes  spill_stores  spill_loads\n");
    let mut spills = Vec::new();
    for (module, _) in sources::MODULES {
        let src = sources::flattened(module).unwrap();
        for arch in ARCHES {
            let mut options: Vec<String> = sources::NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
            options.push(format!("--gpu-architecture=compute_{arch}"));
            let ptx = super::nvrtc::compile_ptx(&src, &format!("{module}.cu"), &options)
                .unwrap_or_else(|e| panic!("NVRTC, kernels/{module}.cu for sm_{arch}: {e}"));
            let file = dir.join(format!("{module}_{arch}.ptx"));
            std::fs::write(&file, &ptx).unwrap();
            let run = Command::new(&ptxas).args(["-v", &format!("-arch=sm_{arch}"), "-o", "/dev/null"]).arg(&file).output().expect("run ptxas");
            let log = String::from_utf8_lossy(&run.stderr).to_string() + &String::from_utf8_lossy(&run.stdout);
            assert!(run.status.success(), "ptxas failed on kernels/{module}.cu for sm_{arch}:\n{log}");
            let usage = parse(&log);
            assert!(!usage.is_empty(), "no kernels in ptxas output for {module}:\n{log}");
            for u in usage {
                writeln!(table, "{module}  {}  sm_{arch}  {}  {}  {}  {}  {}", u.kernel, u.registers, u.smem, u.stack, u.spill_stores, u.spill_loads)
                    .unwrap();
                if u.spill_stores > 0 {
                    spills.push(format!("{} on sm_{arch}: {} bytes spilled", u.kernel, u.spill_stores));
                }
            }
        }
    }
    // ZTREE_KEEP_PTX=1 keeps the PTX for a look with ptxas or cuobjdump.
    if std::env::var_os("ZTREE_KEEP_PTX").is_some() {
        eprintln!("PTX kept in {}", dir.display());
    } else {
        std::fs::remove_dir_all(&dir).ok();
    }
    let recorded = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/ptxas.txt");
    if std::env::var_os("ZTREE_UPDATE_PTXAS_TABLE").is_some() {
        std::fs::write(recorded, &table).unwrap();
    }
    assert!(spills.is_empty(), "register spills: {spills:?}");
    let old = std::fs::read_to_string(recorded).unwrap_or_default();
    assert_eq!(old, table, "kernels/ptxas.txt is stale: regenerate it with ZTREE_UPDATE_PTXAS_TABLE=1 make test-device");
}

/// The path the real device takes: NVRTC's own machine code (CUBIN) for a real
/// architecture, an ELF image, for every module.
#[test]
fn every_kernel_compiles_to_cubin_for_sm90() {
    if tools().is_none() {
        return;
    }
    for (module, _) in sources::MODULES {
        let src = sources::flattened(module).unwrap();
        let mut options: Vec<String> = sources::NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
        options.push("--gpu-architecture=sm_90".into());
        let cubin = super::nvrtc::compile_cubin(&src, &format!("{module}.cu"), &options)
            .unwrap_or_else(|e| panic!("NVRTC, kernels/{module}.cu to CUBIN for sm_90: {e}"));
        assert_eq!(&cubin[..4], b"\x7fELF", "kernels/{module}.cu: not an ELF image");
    }
}
