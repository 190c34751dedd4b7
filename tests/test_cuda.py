"""The model, a training step and the Phase 3/4 forward paths on a CUDA device: the same
function as on the CPU, and fp32 recurrences under bf16/fp16 autocast on the GPU itself.

Skipped where torch sees no GPU (CI, the 2-core development machines); run on a GPU machine with
`pytest -q -n 0 tests/test_cuda.py`. docs/gpu.md, "GPU: first run", says where and when it
last ran.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from aegir.data.dataset import collate, make_example
from aegir.model.network import AegirModel, preset
from aegir.model.ops import wkv_chunked, wkv_naive
from aegir.model.rwkv import LayerState
from aegir.train.step import whole_batch_step

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

CUDA = torch.device("cuda")


def tiny_batch(copies: int = 3):
    stream = b"Hotel Adlon\x1eThe Ritz\x1f+49 30 2261 0\x1e+44 20 7493\x1f" * 4
    spans = [(0, 20), (21, 41)]
    example = make_example("t", "Hotel", stream[:42], spans, ["Hotel/name", "telephone"], [None, "telephone"], "test")
    return collate([example] * copies)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def test_wkv_on_cuda_matches_the_cpu_reference():
    g = torch.Generator().manual_seed(1)
    B, T, H, K = 2, 256, 2, 32
    r, k, v = (torch.randn(B, T, H, K, generator=g) for _ in range(3))
    w = torch.rand(B, T, H, K, generator=g) * 0.4 + 0.55
    kk = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    ref_out, ref_state = wkv_naive(*(x.double() for x in (r, w, k, v, -kk, kk * 0.5)))
    out, state = wkv_chunked(*(x.to(CUDA) for x in (r, w, k, v, -kk, kk * 0.5)), chunk_size=64)
    assert out.device.type == CUDA.type and state.dtype == torch.float32
    assert relative_error(out.cpu(), ref_out) < 1e-3
    assert relative_error(state.cpu(), ref_state) < 1e-3


def test_model_on_cuda_equals_the_cpu_model():
    """On weights where the recurrences reach the logits (`perturbed_model`: at initialisation
    the time-mix outputs are zero and any wkv would pass): a perturbed main-network wkv state
    moves the CPU logits far beyond the tolerance, and the GPU gives the CPU's logits."""
    from test_model import perturbed_model

    model = perturbed_model().eval()
    batch = tiny_batch()
    g = torch.Generator().manual_seed(7)
    state = [LayerState(torch.randn(s.wkv.shape, generator=g), s.shift_time, s.shift_channel)
             for s in model.main.zero_state(batch.batch_size)]
    with torch.no_grad():
        cpu = model(batch)
        moved = model(batch, main_initial_state=state)
        gpu = model.to(CUDA)(batch.to(CUDA))
    assert relative_error(moved.cta_logits, cpu.cta_logits) > 1e-2  # 10× the tolerance below, or more
    # tf32 matmuls are off by default for fp32 in torch; differences are float rounding
    assert relative_error(gpu.cta_logits.cpu(), cpu.cta_logits) < 1e-3
    assert relative_error(gpu.cpa_logits.cpu(), cpu.cpa_logits) < 1e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_training_step_under_cuda_autocast(dtype):
    torch.manual_seed(0)
    model = AegirModel(preset("tiny")).to(CUDA)
    batch = tiny_batch().to(CUDA)
    with torch.autocast("cuda", dtype=dtype):
        output = model(batch)
    assert all(s.wkv.dtype == torch.float32 for s in output.main_final_state)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        result = whole_batch_step(model, batch, autocast=lambda: torch.autocast("cuda", dtype=dtype))
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(result.loss))
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]  # five steps on one batch fit it


def test_phase3_and_phase4_sampling_on_cuda_draws_what_the_cpu_draws():
    # Phase 3/4 seed a CPU generator; their draws are made on it and moved beside the model
    from test_draws import label_samples, spawn_decision

    cpu_labels, gpu_labels = label_samples(torch.device("cpu")), label_samples(CUDA)
    assert gpu_labels[0].device.type == "cuda" and torch.equal(gpu_labels[0].cpu(), cpu_labels[0])
    cpu, gpu = spawn_decision(torch.device("cpu")), spawn_decision(CUDA)
    assert gpu.count.device.type == "cuda"
    assert torch.equal(gpu.count.cpu(), cpu.count) and torch.equal(gpu.specialist.cpu(), cpu.specialist)


def test_phase3_scoring_on_cuda_equals_the_cpu_scoring():
    # every variant Phase 3 scores (fused, control, phase1, ensemble, specialists), batches moved to
    # the models' device; the 2026-11-26 GPU run failed here before the batches were moved
    from aegir.orchestrator.evaluation import measure_survival, predict_variants, stage_seconds
    from test_swarm import scoring_models

    fused, control, primary, examples = scoring_models()
    cpu = predict_variants(fused, control, primary, examples, batch_size=2)
    cpu_survival = measure_survival(fused, examples[:4])
    cpu_seconds = stage_seconds(fused, examples[:4], 2)
    fused.to(CUDA), control.to(CUDA), primary.to(CUDA)
    gpu = predict_variants(fused, control, primary, examples, batch_size=2)
    assert set(gpu) == set(cpu)
    agree = [(a.cta_ids == b.cta_ids).mean() for name in cpu for a, b in zip(gpu[name], cpu[name])]
    assert sum(agree) / len(agree) > 0.95  # float rounding may flip a near-tie
    # the fused states' survival: the CPU's figures (each rounded to 4 places)
    survival = measure_survival(fused, examples[:4])
    assert survival["tables_with_column"] == cpu_survival["tables_with_column"]
    assert sum(survival["tables_with_column"]) == sum(len(e.column_spans) for e in examples[:4])
    for key in ("share_by_layer_and_column", "gate_abs_mean_by_layer_head"):
        assert torch.allclose(torch.tensor(survival[key]), torch.tensor(cpu_survival[key]), atol=2e-3), key
    assert survival["routing_hidden_norm"] == pytest.approx(cpu_survival["routing_hidden_norm"], rel=1e-3)
    # the routed forward's stages, each timed once per batch: the CPU's stages, and together no
    # more than the wall-clock of the whole call
    start = time.perf_counter()
    seconds = stage_seconds(fused, examples[:4], 2)
    elapsed = time.perf_counter() - start
    assert set(seconds) == set(cpu_seconds) >= {"prefix", "fusion", "rest"}
    assert sum(seconds.values()) * 4 <= elapsed + 1e-5 * len(seconds)
