"""flash-linear-attention's RWKV-7 kernels (aegir.model.ops.wkv_fla, the optional CUDA path)
against the literal loop: outputs, final states and the gradients of all seven inputs, the
initial state included; and how `wkv_auto` chooses them.

* On the CPU, fla's Triton kernels run under Triton's interpreter (tests/fla_interpreter.py, in
  a process of its own, since TRITON_INTERPRET must be set before Triton is imported) at tiny
  shapes, against the loop in float64. Skipped where fla or Triton is not installed (the `gpu`
  extra: `pip install -e '.[gpu]'`) or where the interpreter cannot run fla's kernels at all.
* On CUDA, the same at larger shapes (skipped without a GPU or without fla).

AEGIR_REQUIRE_FLA=1 turns those skips into failures, as AEGIR_REQUIRE_KERNEL=1 does for the CPU
kernel (tests/test_wkv_cpu.py). docs/gpu.md, "The fla path", says where these ran.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from aegir.model import ops
from aegir.model.ops import wkv_fla, wkv_naive
from fla_interpreter import CASES
from test_wkv import NAMES, rel_err

FLA_REQUIRED = os.environ.get("AEGIR_REQUIRE_FLA") == "1"
MISSING = [name for name in ("fla", "triton") if importlib.util.find_spec(name) is None]
HARNESS = Path(__file__).with_name("fla_interpreter.py")

# Under the interpreter every product is a float32 numpy product: the kernels match the float64
# loop to float32 rounding (measured 0.8e-7 to 4.2e-7 relative, 2e-5 at most absolute, on
# values up to 35), so 1e-5 catches any wrong term, sign or scale by orders of magnitude.
INTERPRETER_TOLERANCE = 1e-5
# On CUDA Triton runs float32 products in TF32 (10-bit mantissa) by default, and fla keeps that
# default. fla's own tests of this kernel allow 0.007 (outputs) and 0.008 (gradients) relative,
# in fp16. Measured on an H200 (2026-11-28, docs/gpu.md): 6.6e-4 to 1.8e-3 at B 2, T 256, H 4, K 64.
CUDA_TOLERANCE_OUT = 5e-3
CUDA_TOLERANCE_GRAD = 1e-2


def skip_unless_required(reason: str, detail: str = "") -> None:
    if FLA_REQUIRED:
        pytest.fail(f"AEGIR_REQUIRE_FLA=1, but {reason}\n{detail}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def interpreter_results() -> dict:
    """tests/fla_interpreter.py's report, run once for the module (about 15 s on 2 cores)."""
    if MISSING:
        skip_unless_required(f"{' and '.join(MISSING)} not installed (pip install -e '.[gpu]')")
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(HARNESS)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, f"the interpreter run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in report:
        skip_unless_required(report["skip"], report["traceback"])
    return report["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fla_kernels_match_the_loop_under_the_interpreter(case, interpreter_results):
    name, B, T, H, K, V, initial, grad, _tiny_decay = case
    result = interpreter_results[name]
    # the kernel the adapter chose: the chunked one whenever a gradient is needed or T is long
    want_kernel = "chunk" if grad or T > wkv_fla.FUSED_MAX_T else "fused_recurrent"
    assert result["kernels"] == [want_kernel]
    assert result["shape"] == result["ref_shape"] == [[B, T, H, V], [B, H, K, V]]
    assert result["dtype"] == ["torch.float32", "torch.float32"]
    assert result["out"]["rel"] < INTERPRETER_TOLERANCE, result["out"]
    assert result["state"]["rel"] < INTERPRETER_TOLERANCE, result["state"]
    if grad:
        want = [n for n in NAMES if initial or n != "initial_state"]
        assert list(result["grads"]) == want
        for grad_name, errors in result["grads"].items():
            assert errors["ref_max_abs"] > 0, grad_name
            assert errors["rel"] < INTERPRETER_TOLERANCE, (grad_name, errors)


def cuda_inputs(B, T, H, K, V, seed, tiny_decay=False):
    """RWKV-7-shaped float64 inputs on the CPU (a = −κ̂, b = κ̂ ⊙ â), as tests/test_wkv.py's."""
    g = torch.Generator().manual_seed(seed)
    r, k, v = torch.randn(B, T, H, K, generator=g), torch.randn(B, T, H, K, generator=g) * 0.5, \
        torch.randn(B, T, H, V, generator=g)
    w = torch.exp(-0.6065 * torch.rand(B, T, H, K, generator=g))
    if tiny_decay:
        w = torch.where(torch.rand(B, T, H, K, generator=g) < 0.3, 1e-4, w)
    kk = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    lr = torch.rand(B, T, H, K, generator=g)
    state = torch.randn(B, H, K, V, generator=g)
    return [x.double() for x in (r, w, k, v, -kk, kk * lr, state)]


def with_grads(op, xs, cotangents):
    xs = [x.clone().requires_grad_() for x in xs]
    out, state = op(*xs)
    d_out, d_state = (c.to(out.device, out.dtype) for c in cotangents)
    loss = (out * d_out).sum() + (state * d_state.to(state.dtype)).sum()
    return out, state, torch.autograd.grad(loss, xs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("B,T,H,K,tiny_decay", [(2, 256, 4, 64, False), (3, 100, 2, 32, False),
                                                (1, 45, 2, 16, True)])
def test_fla_matches_the_loop_on_cuda(B, T, H, K, tiny_decay):
    """fla on CUDA (float32, through `wkv_auto`: it must choose fla) against the float64 loop
    on the CPU; then the fused recurrent kernel (no gradients, T ≤ FUSED_MAX_T)."""
    if not wkv_fla.available():
        skip_unless_required(f"fla does not import: {wkv_fla.failure()}")
    xs = cuda_inputs(B, T, H, K, K, seed=T + K, tiny_decay=tiny_decay)
    g = torch.Generator().manual_seed(1)
    cotangents = (torch.randn(B, T, H, K, generator=g, dtype=torch.float64),
                  torch.randn(B, H, K, K, generator=g, dtype=torch.float64))
    out_n, state_n, grads_n = with_grads(wkv_naive, xs, cotangents)
    cuda = [x.float().cuda() for x in xs]
    assert wkv_fla.takes(cuda[0], cuda[3])
    out_f, state_f, grads_f = with_grads(ops.wkv_auto, cuda, cotangents)
    assert out_f.is_cuda and out_f.dtype == state_f.dtype == torch.float32
    assert out_f.shape == (B, T, H, K) and state_f.shape == (B, H, K, K)
    errors = {"out": rel_err(out_f.cpu().double(), out_n), "state": rel_err(state_f.cpu().double(), state_n)}
    errors.update({f"d{name}": rel_err(gf.cpu().double(), gn) for name, gf, gn in zip(NAMES, grads_f, grads_n)})
    # the measured errors, for docs/gpu.md (pytest -s shows them)
    print(f"\nfla on CUDA, B={B} T={T} H={H} K={K}: " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    assert errors["out"] < CUDA_TOLERANCE_OUT and errors["state"] < CUDA_TOLERANCE_OUT
    for name, gn in zip(NAMES, grads_n):
        assert gn.abs().sum() > 0, name
        assert errors[f"d{name}"] < CUDA_TOLERANCE_GRAD, name
    T_fused = min(T, wkv_fla.FUSED_MAX_T)
    with torch.no_grad():
        out_r, state_r = wkv_fla.wkv_fla(*(x[:, :T_fused] for x in cuda[:6]), cuda[6])
        out_n, state_n = wkv_naive(*(x[:, :T_fused] for x in xs[:6]), xs[6])
    assert rel_err(out_r.cpu().double(), out_n) < CUDA_TOLERANCE_OUT
    assert rel_err(state_r.cpu().double(), state_n) < CUDA_TOLERANCE_OUT


def test_wkv_auto_takes_fla_for_cuda_tensors_only(monkeypatch):
    """The seam, without a GPU: `wkv_auto` calls fla exactly where `wkv_fla.takes` says yes (and
    the tensors are on CUDA), else the CPU kernel or the chunked form, as before."""
    calls = []
    monkeypatch.setattr(wkv_fla, "wkv_fla", lambda *args: calls.append("fla") or ("fla", None))
    xs = cuda_inputs(1, 5, 1, 16, 16, seed=0)
    monkeypatch.setattr(wkv_fla, "takes", lambda r, v: True)
    out, _ = ops.wkv_auto(*xs)  # CPU tensors: never fla, whatever `takes` says
    assert calls == [] and isinstance(out, torch.Tensor)

    class FakeCuda(torch.Tensor):  # a CPU tensor that says it is on CUDA
        @property
        def is_cuda(self):
            return True

    fake = [x.as_subclass(FakeCuda) for x in xs]
    assert ops.wkv_auto(*fake) == ("fla", None) and calls == ["fla"]
    monkeypatch.setattr(wkv_fla, "takes", lambda r, v: False)  # no fla: the chunked form
    out, state = ops.wkv_auto(*fake, chunk_size=4)
    assert calls == ["fla"] and rel_err(state, wkv_naive(*xs)[1]) < 1e-10


def test_takes_and_wkv_fla_refuse_what_fla_does_not_run(monkeypatch):
    xs = cuda_inputs(1, 3, 1, 16, 16, seed=0)
    assert not wkv_fla.takes(xs[0], xs[3])  # CPU tensors (and float64): never
    monkeypatch.setattr(wkv_fla, "_checked", True)
    monkeypatch.setattr(wkv_fla, "_ops", None)
    monkeypatch.setattr(wkv_fla, "_failure", "ModuleNotFoundError: No module named 'fla'")
    assert not wkv_fla.available() and "fla" in wkv_fla.failure()
    with pytest.raises(RuntimeError, match="fla does not import"):
        wkv_fla.wkv_fla(*(x.float() for x in xs))
    monkeypatch.setattr(wkv_fla, "_ops", (None, None))
    with pytest.raises(RuntimeError, match="float64"):
        wkv_fla.wkv_fla(*xs)


def test_aegir_fla_0_turns_the_path_off_and_says_so():
    """AEGIR_FLA=0 keeps CUDA tensors on the chunked form (benchmarks/bench_device.py compares the
    two that way); read once, in a process of its own here since the module caches its answer."""
    code = ("from aegir.model.ops import wkv_fla; import json; "
            "print(json.dumps([wkv_fla.available(), wkv_fla.failure()]))")
    env = {**os.environ, wkv_fla.SWITCH: "0"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    available, failure = json.loads(proc.stdout.strip().splitlines()[-1])
    assert available is False and failure == "AEGIR_FLA=0 turns the fla path off"
