#!/usr/bin/env bash
# Quantized weights on the CUDA backend (fp8 W8A8, int4 and nvfp4 weight-only), on the
# device machine. The (gzipped) check binary travels in .devq/bin; the 98 MB default model
# is over one call's transfer limit, so it travels in two halves:
#
#   scripts/gpu/quant_check.sh prepare             # here: build, lay out .devq/{bin,p1,p2}
#   scripts/gpu/quant_check.sh quant:dummy quant-bench         # dummy weights only: carry .devq/bin
#   scripts/gpu/quant_check.sh stage               # call 1 of the golden check, carry .devq/bin .devq/p1
#   scripts/gpu/quant_check.sh quant               # call 2 right after (the staged half lives
#                                                  # in /tmp), carry .devq/bin .devq/p2
#
# `quant MODEL` (crates/runtime/examples/support/quant.rs): each scheme quantised at load
# versus the same scheme on the CPU backend (logits on the golden prompts, teacher-forced),
# greedy agreement with bf16. `quant-bench`: dummy llama-3.1-8b per scheme (load time,
# weight memory, decode step times vs the HBM roofline). Markdown goes to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
DEV=.devq
if [ "${1:-}" = prepare ]; then
    set -e
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target-q}
    nice -n 19 cargo build -p wring-runtime --example gpu_check
    model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
    shared=${WRING_SHARED:-$PWD/../shared}
    grep -qx "/$DEV/" .git/info/exclude 2>/dev/null || echo "/$DEV/" >> .git/info/exclude
    rm -rf $DEV && mkdir -p $DEV/bin $DEV/p1 $DEV/p2
    split -b 46M -d "$model" $DEV/model.part
    mv $DEV/model.part00 $DEV/p1/ && mv $DEV/model.part01 $DEV/p2/
    sha256sum "$model" | cut -c1-64 > $DEV/p2/model.sha256
    cp "$shared/golden/smollm2_q41_f32_greedy.jsonl" $DEV/p2/
    strip -o $DEV/gpu_check "$CARGO_TARGET_DIR/debug/examples/gpu_check"
    gzip -9 -c $DEV/gpu_check > $DEV/bin/gpu_check.gz
    rm $DEV/gpu_check
    du -sh $DEV/bin $DEV/p1 $DEV/p2
    exit 0
fi

STAGE=/tmp/wring-stage-q
OUT=${OUT:-/tmp/wring-out}
mkdir -p "$STAGE" "$OUT"
. "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"
export WRING_HOME=/tmp/wring-home
bin=/tmp/gpu_check_q
gunzip -c $DEV/bin/gpu_check.gz > $bin && chmod +x $bin || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"

# QUANT_MODEL / GOLDEN: a model already on the machine (e.g. staged by tune_gpu.sh) and its golden file.
model=${QUANT_MODEL:-$STAGE/SmolLM2-135M-Instruct.Q4_1.gguf}
golden=${GOLDEN:-$DEV/p2/smollm2_q41_f32_greedy.jsonl}
status=0
for part in "$@"; do
    name=${part%%:*}
    what=$model
    [ "$part" != "$name" ] && what=${part#*:}
    case $name in
        stage) cp $DEV/p1/model.part00 "$STAGE/" && ls -la "$STAGE"; continue ;;
        quant)
            args="quant $what"
            [ "$what" = "$model" ] && args="$args $golden" ;;
        quant-bench) args="quant-bench" ;;
        *) args="$name $what" ;;
    esac
    if [ "$name" = quant ] && [ "$what" = "$model" ] && [ ! -f "$model" ]; then
        cat "$STAGE/model.part00" $DEV/p2/model.part01 > "$model" || { echo "the staged first half is gone (machine not warm): run call 1 again"; exit 1; }
        echo "$(cat $DEV/p2/model.sha256)  $model" | sha256sum -c - || { rm -f "$model"; exit 1; }
    fi
    tag=${part//:/-}
    echo "=== $part"
    start=$(date +%s)
    timeout "${QUANT_TIMEOUT:-400}" $bin $args > "$OUT/$tag.md" 2> "$OUT/$tag.err"
    rc=$?
    echo "rc=$rc in $(( $(date +%s) - start )) s"
    cat "$OUT/$tag.md"
    tail -15 "$OUT/$tag.err"
    [ $rc -eq 0 ] || status=1
done
exit $status
