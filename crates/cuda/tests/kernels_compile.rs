//! Every kernel source compiles with NVRTC for Hopper (sm_90) and Ampere (sm_80) and
//! exports the kernels the backend loads. Runs without a GPU: NVRTC comes from the
//! PyPI wheel `nvidia-cuda-nvrtc` (its lib directory on LD_LIBRARY_PATH). CI sets
//! WRING_REQUIRE_NVRTC=1 so a missing NVRTC fails instead of skipping.

use wring_cuda::kernels::{compile, entry_names, SOURCES};

fn nvrtc_available() -> bool {
    match wring_cuda::ensure_nvrtc() {
        Ok(()) => true,
        Err(e) => {
            assert!(
                std::env::var("WRING_REQUIRE_NVRTC").is_err(),
                "WRING_REQUIRE_NVRTC is set but {e}"
            );
            eprintln!("skipping: {e}");
            false
        }
    }
}

#[test]
fn every_kernel_compiles_for_sm90_and_sm80() {
    if !nvrtc_available() {
        return;
    }
    for arch in [(9, 0), (8, 0)] {
        for (name, src) in SOURCES {
            let ptx = compile(name, src, arch).unwrap_or_else(|e| panic!("{e:#}"));
            // WRING_PTX_DUMP=DIR keeps the PTX (for ptxas -v: registers, spills, shared memory).
            if let Ok(dir) = std::env::var("WRING_PTX_DUMP") {
                let path = format!(
                    "{dir}/{}.sm{}{}.ptx",
                    name.replace('/', "_"),
                    arch.0,
                    arch.1
                );
                std::fs::write(&path, &ptx).unwrap_or_else(|e| panic!("{path}: {e}"));
            }
            for entry in entry_names(src) {
                assert!(
                    ptx.contains(&format!(".entry {entry}(")),
                    "{name}: kernel {entry} missing from the PTX for {arch:?}"
                );
            }
        }
    }
}

#[test]
fn a_broken_kernel_reports_the_compiler_log() {
    if !nvrtc_available() {
        return;
    }
    let err = compile(
        "broken.cu",
        "extern \"C\" __global__ void k() { undefined_thing(); }",
        (9, 0),
    )
    .expect_err("must not compile");
    assert!(format!("{err:#}").contains("undefined_thing"), "{err:#}");
}

#[test]
fn opening_a_gpu_errors_cleanly_without_cuda() {
    // With no driver this must be an error naming the library, not a loader panic;
    // on a GPU machine it must open the device.
    let r = std::panic::catch_unwind(|| {
        wring_cuda::CudaBackend::new(0, Default::default()).map(|_| ())
    });
    match r {
        Err(_) => panic!("CudaBackend::new panicked"),
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            let msg = format!("{e:#}");
            assert!(
                msg.contains("libcuda") || msg.contains("CUDA"),
                "unexpected error: {msg}"
            );
        }
    }
}
