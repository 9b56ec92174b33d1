#!/usr/bin/env bash
# Issue 14, session 11: how attention_mma should split keys (WRING_CUDA_MMA_SPLITS), swept in
# one call with this build's gpu_check, eager steps at context 1024 (GPU_CHECK_STEPS=4,
# profiler off, each setting twice, interleaved):
#   prefill 1 x 1024: prefill key splits (0 = unsplit, 512, 1024) x row tiles a block (6, 3);
#   decode 32 x 1 and verify 32 x 5: keys per split per query token (64, 128, 256) x grid
#   (fill, all);
# then graph-replay steps (gpu_check steps, both models) for the previous defaults and the
# sweep's best. Writes /tmp/wring-splits (`export WRING_CUDA_MMA_SPLITS=best`) for
# scripts/gpu/split_serve.sh, and stages the model's first half and wring for it
# (carry .dev/s11b: gpu_check.xz, wring.xz, model.part00). Writes $OUT/sweep.tgz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/gpu/gpu_check_lib.sh
DIR=${DIR:-.dev/s11b}
gpu_check_setup sweep
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
mkdir -p /tmp/wring-stage && cp "$DIR/model.part00" /tmp/wring-stage/
xz -dc "$DIR/wring.xz" > /tmp/wring && chmod +x /tmp/wring && : > /tmp/wring-flags
BASE="per_q=128,prefill=0,grid=fill,prefill_nt=6"
step_ms() { # splits batch q ctx
    local s=$1; shift
    WRING_CUDA_MMA_SPLITS=$s GPU_CHECK_STEPS=4 timeout 60 /tmp/gpu_check profile dummy "$@" 2>> "$G/profile.err" \
        | grep -o "eager step [0-9.]*" | grep -o "[0-9.]*$"
}
# sweep NAME "B Q CTX [B Q CTX ...]" SETTINGS...: each setting twice (interleaved); its score
# is the sum over the shapes of the mean. Appends a table to the summary; the best in $best.
sweep() {
    local name=$1 shapes=$2; shift 2
    local settings=("$@") rows=() round s t
    local sh=($shapes)
    echo "### $name ($shapes)" | tee -a "$G/summary.md"
    echo "| splits | ms (shape: run 1 / run 2) | score |" | tee -a "$G/summary.md"
    echo "|---|---|---:|" | tee -a "$G/summary.md"
    for round in 1 2; do
        for s in "${settings[@]}"; do
            for ((i = 0; i + 2 < ${#sh[@]}; i += 3)); do
                t=$(step_ms "$s" "${sh[i]}" "${sh[i+1]}" "${sh[i+2]}")
                rows+=("$s|${sh[i]}x${sh[i+1]}@${sh[i+2]}|${t:-999}")
            done
        done
    done
    best=$(printf '%s\n' "${rows[@]}" | python3 -c '
import sys, collections
t = collections.defaultdict(lambda: collections.defaultdict(list)); order = []
for line in sys.stdin:
    s, shape, ms = line.strip().split("|")
    if s not in order: order.append(s)
    t[s][shape].append(float(ms))
# 999 = the step did not run: a shape that failed for every setting is left out of the
# scores, a setting that failed where others ran is out of the running.
shapes = [k for k in t[order[0]] if any(999.0 not in t[s][k] for s in order)]
best, base = None, float("inf")
for s in order:
    if any(999.0 in t[s][k] for k in shapes):
        print(f"| {s} | failed | - |", file=sys.stderr)
        continue
    score = sum(sum(t[s][k]) / len(t[s][k]) for k in shapes)
    cells = "; ".join(k + " " + " / ".join(f"{x:.3f}" for x in v) for k, v in t[s].items())
    print(f"| {s} | {cells} | {score:.3f} |", file=sys.stderr)
    if best is None or score < best[1]: best = (s, score)
    if s == order[0]: base = score
# A setting must beat the first (the previous defaults) by 3 % to replace it.
print(best[0] if best and best[1] < 0.97 * base else order[0])' 2> "$G/table.tmp")
    tee -a "$G/summary.md" < "$G/table.tmp"
    echo "best: $best" | tee -a "$G/summary.md"
}
sweep prefill "1 1024 1024 2 700 700" "$BASE" "prefill_nt=3" "prefill=512" "prefill=1024" "prefill=512,prefill_nt=3" "prefill=1024,prefill_nt=3"
best_prefill=$best
sweep decode "32 1 1024 32 5 1024" "$BASE" "grid=all" "per_q=256" "per_q=256,grid=all" "per_q=512" "per_q=64" "per_q=64,grid=all"
best_decode=$best
# The decode winner's per_q/grid with the prefill winner's prefill/prefill_nt.
chosen=$(python3 -c '
import sys
base, dec, pre = (dict(kv.split("=") for kv in a.split(",")) for a in sys.argv[1:4])
base.update({k: v for k, v in dec.items() if k in ("per_q", "grid")})
base.update({k: v for k, v in pre.items() if k in ("prefill", "prefill_nt")})
print(",".join(f"{k}={v}" for k, v in base.items()))' "$BASE" "$best_decode" "$best_prefill")
echo "chosen: $chosen" | tee -a "$G/summary.md"
echo "export WRING_CUDA_MMA_SPLITS=$chosen" > /tmp/wring-splits
echo "sweep done at $(el) s" | tee -a "$G/summary.md"
for s in "$BASE" "$chosen"; do
    tag=steps-$(echo "$s" | tr ',=' '_-')
    WRING_CUDA_MMA_SPLITS=$s STEPS_VARIANTS=default STEPS_SHAPES=1x1,8x1,32x1,32x5,32x9,32x13 \
        GPU_CHECK=/tmp/gpu_check gpu_check_run 100 "$tag" steps "$G/$tag"
    echo "$s:" | tee -a "$G/summary.md"
    grep -h "^| default |\|^### " "$G/$tag.md" | tee -a "$G/summary.md"
done
echo "done at $(el) s" | tee -a "$G/summary.md"
cd "$OUT" && tar czf sweep.tgz sweep && rm -rf sweep
