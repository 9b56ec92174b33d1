#!/bin/bash
cd /work/main
run() { local name=$1 bin=$2 cfg=$3
  $bin tune --max-tokens 64 --runs 1 --max-spread 1 --corpus-dir /work/shared/corpora --no-progress --corpus sharegpt --configs $cfg --concurrency 64 --num-prompts 64 --warmup 4 --max-prompt-chars 1500 --out /tmp/t64c/n-$name > /tmp/t64c/n-$name.log 2>&1
  echo "$name $(grep '^sharegpt' /tmp/t64c/n-$name.log | tail -1 | awk '{print $3}')"
  rm -rf /tmp/t64c/n-$name
}
arms=(basenone none suffix)
for r in $(seq 1 ${ROUNDS:-8}); do
  for j in 0 1 2; do
    a=${arms[$(( (j + r) % 3 ))]}
    case $a in
      basenone) run basenone$r /tmp/wring-base nospec;;
      none) run none$r /tmp/wring-malloc nospec;;
      suffix) run suffix$r /tmp/wring-malloc suffix;;
    esac
  done
done
