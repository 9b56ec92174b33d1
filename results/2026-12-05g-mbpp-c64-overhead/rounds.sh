#!/bin/bash
# rotating arms: none, suffix (m=0), suffix m=$M
cd /work/main
C=$1; N=$2; W=$3; CH=$4; CORPUS=$5; OUTF=$6
run() { local name=$1 cfg=$2 m=$3
  WRING_TMP_BUY_MARGIN=$m /tmp/wring-margin tune --max-tokens 64 --runs 1 --max-spread 1 --corpus-dir /work/shared/corpora --no-progress --corpus $CORPUS --configs $cfg --concurrency $C --num-prompts $N --warmup $W --max-prompt-chars $CH --out /tmp/mg/n-$name > /tmp/mg/n-$name.log 2>&1
  echo "$name $(grep "^$CORPUS" /tmp/mg/n-$name.log | tail -1 | awk '{print $3}')" >> $OUTF
  rm -rf /tmp/mg/n-$name
}
arms=(none suffix margin)
for r in $(seq 1 ${ROUNDS:-8}); do
  for j in 0 1 2; do
    a=${arms[$(( (j + r) % 3 ))]}
    case $a in
      none) run none$r nospec 0;;
      suffix) run suffix$r suffix 0;;
      margin) run margin$r suffix ${M:-0.05};;
    esac
  done
done
