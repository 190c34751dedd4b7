#!/usr/bin/env bash
# Several GPU-preset variants through phase3 at once on one GPU (scripts/device_pipeline.py each,
# the specialists together after their primary), under one wall-clock budget; then the CUDA tests.
#   bash scripts/gpu_variants.sh OUT NAME='--set k=v --set ...' [NAME='...' ...]
# Each variant writes runs/<NAME>/ (its summary.json: seconds per stage, micro-F1 per model and
# split) and OUT/<NAME>.log. AEGIR_GPU_SECONDS (default 500) bounds the pipelines; a variant still
# running then is stopped and what it finished is kept. No resume states are saved (checkpoint_every=0).
# Packages a bare CUDA image lacks: `bash scripts/gpu_wheels.sh` puts their wheels in .whl/ (installed
# from there below); run it from a copy of the checkout without .git and .dvc (scripts/gpu_wheels.sh).
set -u
out=$(realpath -m "${1:?usage: gpu_variants.sh OUT NAME='--set ...' ...}"); shift
budget=${AEGIR_GPU_SECONDS:-500}
if ! [[ $budget =~ ^[0-9]+$ ]] || (( budget < 60 )); then
    echo "AEGIR_GPU_SECONDS: expected whole seconds, at least 60, got '$budget'" >&2
    exit 2
fi
(( $# > 0 )) || { echo "gpu_variants.sh: name at least one variant: NAME='--set key=value ...'" >&2; exit 2; }
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/aegir-site .whl/*.whl || exit 1
    export PYTHONPATH="$PYTHONPATH:/tmp/aegir-site"
fi
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; } 2>&1 | tee "$out/env.txt"
pids=()
for spec in "$@"; do
    name=${spec%%=*}; sets=${spec#*=}
    rm -rf "runs/$name"
    # shellcheck disable=SC2086
    timeout "$budget" python3 scripts/device_pipeline.py --root "runs/$name" --agents-together \
        --set launch.accelerate_config=workflow/accelerate/gpu1.yaml \
        --set phase1.checkpoint_every=0 --set phase3.checkpoint_every=0 $sets \
        --launch "accelerate launch --config_file workflow/accelerate/gpu1.yaml" >"$out/$name.log" 2>&1 &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; echo "variant pid $pid exit $?"; done
for spec in "$@"; do name=${spec%%=*}
    tar czf "$out/$name.tgz" --exclude='*.safetensors' "runs/$name" 2>/dev/null; tail -25 "$out/$name.log"; done
