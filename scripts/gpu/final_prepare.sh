#!/usr/bin/env bash
# Lays out what the session's two back-to-back device calls carry (run here, no GPU needed):
#   .dev/a: the first 45 MB of the default model, llama.cpp's source trimmed to the CPU and CUDA
#           backends and the two tools measured (tar.xz), gpu_check (debug build, xz), the
#           release `wring` (xz)                               -> scripts/gpu/final_a.sh
#   .dev/tp: what scripts/gpu/tp_check.sh needs besides the binaries (call A runs it with
#           the binaries of .dev/a): a vocab-only GGUF for the dummy shapes, the MBPP corpus
#   .dev/b: the rest of the model and its sha256, the corpora (ShareGPT cut to its first 1 MB:
#           the loader keeps every complete record), the golden file -> scripts/gpu/final_b.sh
# Each stays under the 64 MiB a call may carry (with the repository itself, ~5 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
nice -n 10 cargo build --release -p wring
nice -n 10 cargo build -p wring-runtime --example gpu_check
model=${WRING_HOME:-$HOME/.cache/wring}/models/SmolLM2-135M-Instruct.Q4_1.gguf
shared=${WRING_SHARED:-$PWD/../shared}
lcpp=${LLAMACPP_SDIST:?LLAMACPP_SDIST=path of llama_cpp_python-0.3.36.tar.gz (pip download --no-binary :all:)}
rm -rf .dev/a .dev/b .dev/tp && mkdir -p .dev/a .dev/b/corpora .dev/tp/corpora
head -c 45000000 "$model" > .dev/a/model.part00
tail -c +45000001 "$model" > .dev/b/model.part01
sha256sum "$model" | cut -c1-64 > .dev/b/model.sha256
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
strip -o "$tmp/wring" "$CARGO_TARGET_DIR/release/wring" && xz -T2 -6 -c "$tmp/wring" > .dev/a/wring.xz
strip -o "$tmp/gpu_check" "$CARGO_TARGET_DIR/debug/examples/gpu_check" && xz -T2 -6 -c "$tmp/gpu_check" > .dev/a/gpu_check.xz
# llama.cpp: the CPU and CUDA backends, llama-server and llama-batched-bench.
tar -xzf "$lcpp" -C "$tmp"
v=$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)
mkdir -p "$tmp/src"
for part in CMakeLists.txt cmake ggml src include common tools vendor licenses LICENSE app scripts; do
    [ -e "$v/$part" ] && cp -r "$v/$part" "$tmp/src/"
done
( cd "$tmp/src"
  for d in ggml/src/ggml-*/; do case $d in *ggml-cpu/|*ggml-cuda/) ;; *) rm -rf "$d" ;; esac; done
  rm -rf tools/ui/src tools/ui/tests tools/ui/static tools/ui/package-lock.json \
    tools/mtmd/test-* tools/mtmd/tests tools/server/tests tools/server/bench
  for t in tools/*/; do case $t in tools/batched-bench/|tools/ui/|tools/server/|tools/mtmd/) ;; *) rm -rf "$t" ;; esac; done
  python3 - <<'PY'
import re
p = 'tools/CMakeLists.txt'
keep = {'batched-bench', 'ui', 'server', 'mtmd'}
lines = [l for l in open(p).read().split('\n')
         if not (m := re.match(r'\s*add_subdirectory\(([\w-]+)\)', l)) or m.group(1) in keep]
open(p, 'w').write('\n'.join(lines))
PY
)
tar -cJf .dev/a/llamacpp-src.tar.xz -C "$tmp" src
cp "$shared"/corpora/*.json* .dev/b/corpora/
cp "$shared/golden/smollm2_q41_f32_greedy.jsonl" .dev/b/
cp "$HOME/.cache/wring/corpora/HumanEval.jsonl.gz" .dev/b/corpora/
head -c 1000000 "$HOME/.cache/wring/corpora/ShareGPT_V3_unfiltered_cleaned_split.json" \
    > .dev/b/corpora/ShareGPT_V3_unfiltered_cleaned_split.json
python3 scripts/gpu/vocab_gguf.py "$model" "$tmp/vocab.gguf" > /dev/null && xz -c "$tmp/vocab.gguf" > .dev/tp/vocab.gguf.xz
cp "$shared/corpora/mbpp_974.jsonl" .dev/tp/corpora/
du -sh .dev/a .dev/b .dev/tp
