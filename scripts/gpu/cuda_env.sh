# shellcheck shell=bash
# Sourced on the device (scripts/gpu/lib.sh, study_scale.sh): puts the driver's libcuda and
# nvrtc/cublas/nccl (from the toolkit or the PyPI wheels) on LD_LIBRARY_PATH.
cuda_libdirs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for sp in site.getsitepackages():
    for lib in glob.glob(os.path.join(sp, "nvidia", "**", "lib*.so*"), recursive=True):
        if any(n in lib for n in ("nvrtc", "cublas", "nccl")):
            dirs.add(os.path.dirname(lib))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH="${cuda_libdirs}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
