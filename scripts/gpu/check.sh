#!/usr/bin/env bash
# GPU check of the CUDA backend, run on the device machine from the repository root.
#
#   scripts/gpu/check.sh stage cpu-compare:dummy graphs:dummy    # call 1, carries .dev/p1
#   scripts/gpu/check.sh golden graphs cpu-compare bench          # call 2, carries .dev/p2
#
# The 98 MB model is over one call's transfer limit, so its first half travels in call 1
# (`stage` keeps it under /tmp) and the second in call 2. scripts/gpu/prepare.sh builds
# the check binary and lays out .dev/p1 and .dev/p2. A part `NAME:dummy` runs on random
# weights of the default model's shape (no model file needed). Markdown goes to $OUT.
set -uo pipefail
STAGE=/tmp/wring-stage
OUT=${OUT:-/tmp/wring-out}
mkdir -p "$STAGE" "$OUT"

. "$(dirname "${BASH_SOURCE[0]}")/cuda_env.sh"
export WRING_HOME=/tmp/wring-home
for d in .dev/p1 .dev/p2; do [ -f $d/gpu_check ] && bin=$d/gpu_check; done
cp "$bin" /tmp/gpu_check && chmod +x /tmp/gpu_check && bin=/tmp/gpu_check
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"

model=$STAGE/SmolLM2-135M-Instruct.Q4_1.gguf
status=0
for part in "$@"; do
    name=${part%%:*}
    what=$model
    [ "$part" != "$name" ] && what=${part#*:}
    case $name in
        stage) cp .dev/p1/model.part00 "$STAGE/" && ls -la "$STAGE"; continue ;;
        golden) args="golden $what .dev/p2/smollm2_q41_f32_greedy.jsonl" ;;
        *) args="$name $what" ;;
    esac
    if [ "$what" = "$model" ] && [ ! -f "$model" ]; then
        cat "$STAGE/model.part00" .dev/p2/model.part01 > "$model" || exit 1
        echo "$(cat .dev/p2/model.sha256)  $model" | sha256sum -c - || { rm -f "$model"; exit 1; }
    fi
    tag=${part//:/-}
    echo "=== $part"
    start=$(date +%s)
    timeout 300 "$bin" $args > "$OUT/$tag.md" 2> "$OUT/$tag.err"
    rc=$?
    echo "rc=$rc in $(( $(date +%s) - start )) s"
    cat "$OUT/$tag.md"
    tail -15 "$OUT/$tag.err"
    [ $rc -eq 0 ] || status=1
done
exit $status
