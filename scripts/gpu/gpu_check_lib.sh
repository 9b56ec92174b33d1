# Sourced by the gpu_check scripts (gemv_check.sh, fused_norm_check.sh, gemv_multi_check.sh,
# quant_speed.sh): the `prepare` step they share, and their one-check runner.

# gpu_check_prepare DIR (here, no GPU): builds the gpu_check example (debug) and lays it out
# stripped and xz-compressed in DIR with the commit it was built from.
gpu_check_prepare() {
    local dir=$1
    (
        set -e
        export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
        nice -n 19 cargo build -p wring-runtime --example gpu_check
        rm -rf "$dir" && mkdir -p "$dir"
        strip -o "$dir/gpu_check" "$CARGO_TARGET_DIR/debug/examples/gpu_check"
        xz -T2 -6 -f "$dir/gpu_check"
        git rev-parse HEAD > "$dir/commit"
        du -sh "$dir"/*
    )
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
