#!/usr/bin/env bash
# Load time, resident memory and decode cost of the default model on the CPU backend:
# f32 (GGUF dequantised at load), q8 (--cpu-weights q8), an f32 safetensors export, and
# every `wring quantize` scheme. Prints a markdown table.
#
#   scripts/quant_footprint.sh [WORKDIR]     (default WORKDIR: /tmp/wring-quant-footprint)
#
# Quantized directories are made in WORKDIR when missing (int4 uses AWQ+GPTQ with
# $CALIB_PROMPTS calibration prompts, default 64). Build first (shared dev profile):
#   cargo build -p wring -p wring-quant --example footprint
# Measurements run one at a time; load times are wall-clock and CPU seconds of one load,
# so run this on a quiet machine (memory figures do not depend on load).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/wring-quant-footprint}
T=${CARGO_TARGET_DIR:-target}/debug
WRING=$T/wring
FOOT=$T/examples/footprint
[[ -x $WRING && -x $FOOT ]] || { echo "build first: cargo build -p wring -p wring-quant --example footprint" >&2; exit 1; }
mkdir -p "$WORK"
for s in int8 int4 fp8 nvfp4; do
  if [[ ! -f $WORK/$s/model.safetensors ]]; then
    echo "quantizing $s into $WORK/$s" >&2
    "$WRING" quantize --scheme "$s" --out "$WORK/$s" --calib-prompts "${CALIB_PROMPTS:-64}" >&2
  fi
done
if [[ ! -f $WORK/f32/model.safetensors ]]; then
  # An unquantized safetensors export (same loader path as the quantized directories).
  "$T/examples/footprint" --export-f32 "$WORK/f32" >&2 2>/dev/null || true
fi
echo "| weights | file MiB | load wall s | load CPU s | peak RSS MiB | RSS after load MiB | decode CPU ms/token |"
echo "|---|---:|---:|---:|---:|---:|---:|"
row() { # label model cpu_weights file
  local j; j=$("$FOOT" "$2" "$3")
  local mib="-"; [[ -n $4 && -f $4 ]] && mib=$(( $(stat -c %s "$4") / 1048576 ))
  python3 - "$1" "$mib" "$j" <<'PY'
import json, sys
label, mib, j = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
print(f"| {label} | {mib} | {j['load_wall_s']:.2f} | {j['load_cpu_s']:.2f} | {j['peak_rss_mib']:.0f} | {j['rss_after_load_mib']:.0f} | {j['decode_cpu_ms_per_token']:.1f} |")
PY
}
GGUF=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
row "f32 (Q4_1 GGUF dequantised)" "$GGUF" f32 "$GGUF"
row "q8 (--cpu-weights q8, from GGUF)" "$GGUF" q8 "$GGUF"
[[ -f $WORK/f32/model.safetensors ]] && row "f32 safetensors export" "$WORK/f32" f32 "$WORK/f32/model.safetensors"
for s in int8 int4 fp8 nvfp4; do
  row "$s (wring quantize)" "$WORK/$s" f32 "$WORK/$s/model.safetensors"
done
