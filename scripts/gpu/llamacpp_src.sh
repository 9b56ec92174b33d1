#!/usr/bin/env bash
# llama.cpp's source from the llama-cpp-python sdist (PyPI; its vendor/llama.cpp), trimmed to
# what the peer runs on the device need: the CPU and CUDA backends, llama-server and
# llama-batched-bench (~3 MB as tar.xz). Usage: llamacpp_src.sh SOURCE OUT.tar.xz, SOURCE the
# sdist (`pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`, or the file from
# https://pypi.org/simple/llama-cpp-python/) or a llama.cpp source directory.
set -euo pipefail
src=${1:?usage: llamacpp_src.sh SOURCE OUT.tar.xz}
out=$(realpath -m "${2:?usage: llamacpp_src.sh SOURCE OUT.tar.xz}")
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
if [ -d "$src" ]; then
    v=$src
else
    tar -xzf "$src" -C "$tmp"
    v=$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)
fi
mkdir -p "$tmp/src"
for part in CMakeLists.txt cmake ggml src include common tools vendor licenses LICENSE app scripts; do
    [ -e "$v/$part" ] && cp -r "$v/$part" "$tmp/src/"
done
cd "$tmp/src"
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
tar -cJf "$out" -C "$tmp" src
