#!/usr/bin/env bash
# Phase 4's policy over 3 seeds and 3 prices of a critical step, as DVC experiments: queues
# `dvc exp run -S phase4.seed=S -S phase4.step_cost=C` for S in 0 1 2 and C in ×0.5 / ×1 / ×2 of
# params.yaml's `phase4.step_cost` (the default run, seed 0 at ×1, is main's own), runs the queue
# one at a time (each reruns phase4, calibrate and report; nothing before them), then prints the
# comparison. docs/experiments.md ("Phase 4 on tables no one had read") holds the study's figures.
#   bash scripts/phase4_seeds.sh            # queue, run, show
#   bash scripts/phase4_seeds.sh --show     # only show the experiments already run
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--show" ]; then
    if [ -n "$(git status --porcelain -- params.yaml dvc.yaml dvc.lock src)" ]; then
        echo "phase4_seeds.sh: commit params.yaml, dvc.yaml, dvc.lock and src/ first (experiments start from HEAD)" >&2
        exit 2
    fi
    cost=$(python -c "import yaml; print(yaml.safe_load(open('params.yaml'))['phase4']['step_cost'])")
    for c in $(python -c "c=$cost; print(c/2, c, c*2)"); do
        for s in 0 1 2; do
            if [ "$s" = 0 ] && [ "$c" = "$cost" ]; then continue; fi
            dvc exp run --queue -n "p4-s$s-c$c" -S "phase4.seed=$s" -S "phase4.step_cost=$c"
        done
    done
    dvc queue start -j 1
    # (grep reads the whole status: with pipefail, `grep -q` closing the pipe early ends the loop)
    while dvc queue status 2>/dev/null | grep -E "Queued|Running" >/dev/null; do sleep 30; done
    dvc queue status
fi
# the Phase 4 figures and the two params that vary, one row per experiment
dvc exp show --no-pager --md --keep 'Experiment|swarm|phase4.seed|phase4.step_cost' --drop '.'
