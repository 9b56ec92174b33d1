set -uo pipefail
OUT=${OUT:-/tmp/wring-out}; mkdir -p $OUT/log
. scripts/gpu/cuda_env.sh
export WRING_HOME=/tmp/wring-home
bin=/tmp/gpu_check; cp .dev/v1/gpu_check $bin; chmod +x $bin
for spec in "graphs-135m graphs dummy" "graphs-gguf graphs dummy-gguf" "graphs-8b graphs dummy-8b" "cpu-135m cpu-compare dummy-gguf"; do
  set -- $spec; tag=$1; shift
  s=$(date +%s); timeout 200 $bin "$@" > $OUT/log/$tag.md 2> $OUT/log/$tag.err; echo "== $tag rc=$? $(( $(date +%s)-s ))s $(grep RESULT $OUT/log/$tag.md)"; tail -2 $OUT/log/$tag.err
  grep -h "Programmatic\|Small-step\|DIFFERENT\|token match\|^| [0-9]* |" $OUT/log/$tag.md | head -14
done
STEPS_VARIANTS=default,nosmall,nopdl timeout 300 $bin steps $OUT > $OUT/log/steps.md 2> $OUT/log/steps.err; echo "steps rc=$?"; tail -3 $OUT/log/steps.err
cat $OUT/log/steps.md
