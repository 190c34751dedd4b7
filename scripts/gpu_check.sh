#!/usr/bin/env bash
# One timed pass of the GPU checks, for a machine with a CUDA GPU, the code and data/prepared
# (no DVC cache needed), writing its logs and results under $1 (default runs/gpu-check):
#   1. the fla path's CUDA tests (tests/test_wkv_fla.py -k cuda, AEGIR_REQUIRE_FLA=1) and the CUDA
#      tests (tests/test_cuda.py); where the fla tests fail, the steps below run with AEGIR_FLA=0
#      (the chunked wkv), so a wrong kernel cannot train the models;
#   2. the whole training pipeline with the `gpu` preset for every agent and its schedule
#      (the ladder's rule, aegir.train.ladder; docs/gpu.md) through phase3 on one GPU (scripts/device_pipeline.py,
#      workflow/accelerate/gpu1.yaml, the specialists at once after the primary);
#   3. the training-throughput benchmark (benchmarks/bench_device.py) of the `cpu` and `gpu`
#      presets in bf16, once on fla and once with AEGIR_FLA=0.
# Each part gets a share of a wall-clock budget (AEGIR_GPU_CHECK_SECONDS, default 560), so a
# slow part is stopped and what finished is still written. No resume states are saved during
# training (checkpoint_every=0).
# The GPU figures of docs/gpu.md came from it.
# Where the machine lacks packages (DVCLive and its dependencies, fla-core), put their wheels in
# .whl/ (scripts/gpu_wheels.sh) and run it from a copy of the checkout without .git and .dvc.
set -u
budget=${AEGIR_GPU_CHECK_SECONDS:-560}
if ! [[ $budget =~ ^[0-9]+$ ]] || (( budget < 120 )); then
    echo "AEGIR_GPU_CHECK_SECONDS: expected whole seconds, at least 120, got '$budget'" >&2
    exit 2
fi
out=$(realpath -m "${1:-runs/gpu-check}")
mkdir -p "$out"
started=$(date +%s)
left() { echo $(( budget - ($(date +%s) - started) )); }
# seconds for a part that must leave $1 s to the parts after it (at least 1: `timeout 0` never stops)
limit() { local s=$(( $(left) - $1 )); echo $(( s < 1 ? 1 : s )); }
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/aegir-site .whl/*.whl || exit 1
    export PYTHONPATH="$PYTHONPATH:/tmp/aegir-site"
fi
{
    date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c "from importlib.metadata import version as v; import torch; print('torch', torch.__version__, '| accelerate', v('accelerate'), '| dvclive', v('dvclive'), '|', torch.cuda.get_device_name())"
    nproc
} 2>&1 | tee "$out/env.txt"

echo "== fla and CUDA tests ($(left) s left)"
timeout 120 env AEGIR_REQUIRE_FLA=1 python3 -m pytest -q -s -n 0 -p no:cacheprovider \
    tests/test_wkv_fla.py -k cuda 2>&1 | tee "$out/test_fla.log"
if [ "${PIPESTATUS[0]}" != 0 ]; then
    echo "fla tests failed: the steps below run on the chunked wkv (AEGIR_FLA=0)" | tee -a "$out/test_fla.log"
    export AEGIR_FLA=0
fi
timeout 100 python3 -m pytest -q -n 0 -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$out/test_cuda.log"

echo "== pipeline, gpu preset, through phase3 ($(left) s left)"
rm -rf runs/gpu
sets="--set primary.preset=gpu --set specialists.places.preset=gpu --set specialists.media.preset=gpu"
# the gpu preset's schedule from the ladder's rule (aegir.train.ladder: lr 0.0015, 100 warm-up steps, 2 epochs)
sets="$sets $(python3 -c 'from aegir.config import load_params; from aegir.train.ladder import schedule
rule = schedule(int(load_params("params.yaml").presets["gpu"]["d_model"]))
print(" ".join(f"--set {key}={value}" for key, value in rule.overrides().items()))')" || exit 1
# shellcheck disable=SC2086
timeout "$(limit 70)" python3 scripts/device_pipeline.py --root runs/gpu --agents-together $sets \
    --set launch.accelerate_config=workflow/accelerate/gpu1.yaml \
    --set phase1.checkpoint_every=0 --set phase3.checkpoint_every=0 \
    --launch "accelerate launch --config_file workflow/accelerate/gpu1.yaml" 2>&1 | tee "$out/pipeline.log"
echo "pipeline exit ${PIPESTATUS[0]} at $(( $(date +%s) - started )) s"
tar czf "$out/gpu-run.tar.gz" --exclude='*.safetensors' runs/gpu 2>/dev/null

echo "== benchmark ($(left) s left)"
for wkv in fla chunked; do
    if [ "$wkv" = chunked ]; then flag=0; else flag=${AEGIR_FLA:-1}; fi
    timeout "$(limit 2)" env AEGIR_FLA="$flag" python3 benchmarks/bench_device.py --presets cpu gpu \
        --precisions bf16 --batch-sizes 16 --steps 10 --json "$out/bench-$wkv.json" 2>&1 | tee "$out/bench-$wkv.log"
done
echo "done at $(( $(date +%s) - started )) s"
