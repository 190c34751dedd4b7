#!/usr/bin/env bash
# Wheels of the packages the training stages import that a bare CUDA image (PyTorch, accelerate,
# safetensors, pandas, pyarrow, … already there) lacks: DVCLive and the parts of DVC it imports,
# Faker and mimesis (the data generators the CUDA tests import). Downloaded into $1 (default
# .whl/) at this environment's versions, for CPython 3.12 on x86-64 Linux;
# scripts/gpu_check.sh and scripts/gpu_variants.sh install them from there on the GPU machine.
# Run the stages there from a copy without .git and .dvc: in a git repository DVCLive tries to
# initialise a DVC one, which needs far more of DVC.
set -eu
out=${1:-.whl}
packages="dvclive dvc dvc-render dvc-studio-client dvc-data dvc-http dvc-objects funcy flatten-dict pydot
  ruamel.yaml voluptuous wcwidth atpublic diskcache dpath dulwich flufl.lock orjson pygtrie scmrepo sqltrie
  zc.lockfile zstandard platformdirs Faker mimesis fla-core einops"
pins=""
for p in $packages; do
    v=$(python3 -m pip show "$p" 2>/dev/null | awk '/^Version/{print $2}')
    [ -n "$v" ] || { echo "gpu_wheels: $p is not installed here (pip install -r requirements.lock first)" >&2; exit 1; }
    pins="$pins $p==$v"
done
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$out" $pins
ls "$out" | wc -l
