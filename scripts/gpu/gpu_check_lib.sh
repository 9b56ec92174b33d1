# Sourced by the gpu_check scripts (gemv_check.sh, fused_norm_check.sh, gemv_multi_check.sh,
# quant_speed.sh): the `prepare` step they share, and their one-check runner.

# gpu_check_prepare DIR (here, no GPU): builds the gpu_check example (debug; PROFILE=release
# for host timings: a debug build's host work per launch is several times a release build's)
# and lays it out stripped and xz-compressed in DIR with the commit it was built from.
gpu_check_prepare() {
    local dir=$1 profile=${PROFILE:-debug}
    (
        set -e
        export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
        if [ "$profile" = release ]; then
            nice -n 19 cargo build --release -p wring-runtime --example gpu_check
        else
            nice -n 19 cargo build -p wring-runtime --example gpu_check
        fi
        rm -rf "$dir" && mkdir -p "$dir"
        strip -o "$dir/gpu_check" "$CARGO_TARGET_DIR/$profile/examples/gpu_check"
        xz -T2 -6 -f "$dir/gpu_check"
        git rev-parse HEAD > "$dir/commit"
        du -sh "$dir"/*
    )
}

# gpu_check_setup NAME (on the device, sourced from the repository root): unpacks
# $DIR/gpu_check.xz as $GPU_CHECK, sets the CUDA environment and WRING_HOME, and makes
# G=$OUT/NAME with a summary.md that names the commit.
gpu_check_setup() {
    OUT=${OUT:-/tmp/wring-out}
    G=$OUT/$1
    mkdir -p "$G"
    GPU_CHECK=/tmp/gpu_check
    xz -dc "$DIR/gpu_check.xz" > $GPU_CHECK && chmod +x $GPU_CHECK
    . scripts/gpu/cuda_env.sh
    export WRING_HOME=/tmp/wring-home
    echo "commit $(cat "$DIR/commit")" | tee "$G/summary.md"
}

# gpu_check_run LIMIT TAG ARGS... (on the device): one `$GPU_CHECK ARGS` under a time limit,
# its output in $G/TAG.md and .err; prints and appends to $G/summary.md its RESULT line, any
# failure lines, and the tail of stderr when it failed.
gpu_check_run() {
    local limit=$1 tag=$2
    shift 2
    local t0
    t0=$(date +%s)
    timeout "$limit" "$GPU_CHECK" "$@" > "$G/$tag.md" 2> "$G/$tag.err"
    local rc=$?
    {
        echo "== $tag rc=$rc in $(( $(date +%s) - t0 )) s: $(grep -h RESULT "$G/$tag.md" | tr '\n' ' ')"
        grep -h "DIFFERENT\|FAIL\|error\|UNEXPECTED" "$G/$tag.md" | head -8
        [ $rc -ne 0 ] && tail -3 "$G/$tag.err"
    } | tee -a "$G/summary.md"
}

# gpu_check_checks "NAMES" (on the device): the named correctness checks in parallel, then
# their table rows and reference comparisons appended to $G/summary.md. attention: every
# kernel vs float64 (deterministic, batch-invariant, mma-only = mma-serial bitwise);
# graphs-135m / graphs-8b: replay = eager bitwise, verify = plain greedy at every K, each
# kernel vs the per-head reference (the 135M shape; dummy llama-3.1-8b, where the prefill
# kernel runs); cpu-135m: against the f32 CPU backend, prefill included.
gpu_check_checks() {
    local checks=() c
    for c in $1; do
        case $c in
            attention) ( gpu_check_run 290 attention attention ) & checks+=($!) ;;
            graphs-135m) ( gpu_check_run 170 graphs-135m graphs dummy ) & checks+=($!) ;;
            graphs-8b) ( gpu_check_run 200 graphs-8b graphs dummy-8b ) & checks+=($!) ;;
            cpu-135m) ( gpu_check_run 170 cpu-135m cpu-compare dummy-gguf ) & checks+=($!) ;;
            *) echo "unknown check $c" | tee -a "$G/summary.md" ;;
        esac
    done
    wait "${checks[@]}"
    grep -h "^| 64 ×\|^| 128 ×\|^<!--" "$G/attention.md" 2>/dev/null | tee -a "$G/summary.md"
    grep -h "vs per-head kernel, q 40" "$G"/graphs-*.md 2>/dev/null | tee -a "$G/summary.md"
}
