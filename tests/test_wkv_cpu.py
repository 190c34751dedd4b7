"""The CPU wkv kernel (aegir.model.ops.wkv_cpu): against the literal loop, its determinism, its
build and cache, and how the layers choose it."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest
import torch

from aegir.errors import ConfigError
from aegir.model.checkpoint import load_checkpoint, save_checkpoint
from aegir.model.chunking import EMA_PROB_EPS, ema_sequential
from aegir.model.network import AegirModel, preset
from aegir.model.ops import wkv_chunked, wkv_cpu, wkv_naive, wkv_sequential
from aegir.model.rwkv import RWKVStack
from test_model import TABLES, make_batch
from test_wkv import NAMES, make_inputs, rel_err, run_with_grads

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Every preset runs the kernel (`wkv_kernel: true`); where it does not build the layers warn and
# fall back to the chunked form, and its tests skip, so a broken kernel would pass green. CI
# (.ci/run) sets AEGIR_REQUIRE_KERNEL=1: the kernel's tests then run whatever happened, and fail
# where it did not build.
KERNEL_REQUIRED = os.environ.get("AEGIR_REQUIRE_KERNEL") == "1"
needs_kernel = pytest.mark.skipif(not wkv_cpu.available() and not KERNEL_REQUIRED,
                                  reason=f"kernel not built: {wkv_cpu.failure()}")


def test_the_kernel_builds_where_it_is_required():
    """Under AEGIR_REQUIRE_KERNEL=1 the kernel must have built (the reason it did not, else);
    elsewhere a machine without a C compiler skips its tests."""
    if not KERNEL_REQUIRED and not wkv_cpu.available():
        pytest.skip(f"kernel not built: {wkv_cpu.failure()}")
    assert wkv_cpu.available(), f"the CPU kernel did not build: {wkv_cpu.failure()}"
    assert wkv_cpu.failure() is None


def float32_inputs(**kw):
    return [x.detach().float().requires_grad_() for x in make_inputs(dtype=torch.float64, **kw)]


@needs_kernel
@pytest.mark.parametrize("K", wkv_cpu.HEAD_SIZES)
@pytest.mark.parametrize("T,chunk_size", [(1, 32), (7, 4), (64, 32), (100, 32), (45, 12)])
def test_kernel_matches_naive(K, T, chunk_size):
    """Outputs, final state and the gradients of all seven inputs, against the loop (float32
    both: the same random cotangents)."""
    inputs = float32_inputs(B=3, T=T, H=2, K=K, V=K, seed=K + T)
    out_n, state_n, grads_n = run_with_grads(wkv_naive, inputs)
    out_s, state_s, grads_s = run_with_grads(wkv_sequential, inputs, chunk_size=chunk_size)
    assert out_s.dtype == state_s.dtype == torch.float32
    assert out_s.shape == (3, T, 2, K) and state_s.shape == (3, 2, K, K)
    assert rel_err(out_s, out_n) < 1e-5
    assert rel_err(state_s, state_n) < 1e-5
    for name, gs, gn in zip(NAMES, grads_s, grads_n):
        assert gn.abs().sum() > 0, name
        assert rel_err(gs, gn) < 1e-5, name


# x86-64 levels of the kernel's three vector widths (wkv_kernel.c: VW 4 with SSE only, 8 with
# AVX, 16 with AVX-512) and the CPU flags each needs
VECTOR_LEVELS = {4: ("x86-64", ()), 8: ("x86-64-v3", ("avx2", "fma")),
                 16: ("x86-64-v4", ("avx512f", "avx512bw", "avx512dq", "avx512vl"))}


@needs_kernel
@pytest.mark.parametrize("width", sorted(VECTOR_LEVELS))
def test_every_vector_width_matches_the_loop(width, tmp_path, monkeypatch):
    """The kernel built for each instruction level this CPU runs (x86-64: 4-float vectors,
    x86-64-v3: 8, x86-64-v4: 16), whatever `-march=native` picks here: the wkv's outputs and
    gradients against the loop, and the EMA's against its loop. A machine only ever runs its own
    width, so without this the other two would go untested wherever the suite runs."""
    level, needs = VECTOR_LEVELS[width]
    cpu = wkv_cpu._cpu_flags().split()
    if platform.machine() != "x86_64" or any(flag not in cpu for flag in needs):
        pytest.skip(f"{level} does not run on this CPU")
    monkeypatch.setenv("AEGIR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("AEGIR_CPU_MARCH", level)  # the knob a user sets to build another level
    assert f"-march={level}" in wkv_cpu.build_flags() and "-march=native" not in wkv_cpu.build_flags()
    probe = subprocess.run([os.environ.get("CC", "cc"), f"-march={level}", "-dM", "-E", "-x", "c", "/dev/null"],
                           capture_output=True, text=True)
    if probe.returncode != 0:  # a compiler too old to know the level; one that knows it must build the kernel
        pytest.skip(f"the compiler does not know -march={level}: {probe.stderr.strip()}")
    defines = probe.stdout
    lib = wkv_cpu._load()
    assert ("__AVX512F__" in defines, "__AVX__" in defines) == (width == 16, width >= 8)
    monkeypatch.setattr(wkv_cpu, "_library", lib)
    for K in wkv_cpu.HEAD_SIZES:
        inputs = float32_inputs(B=2, T=45, H=2, K=K, V=K, seed=K)
        out_n, state_n, grads_n = run_with_grads(wkv_naive, inputs)
        out_s, state_s, grads_s = run_with_grads(wkv_sequential, inputs, chunk_size=12)
        assert rel_err(out_s, out_n) < 1e-5 and rel_err(state_s, state_n) < 1e-5, K
        for name, gs, gn in zip(NAMES, grads_s, grads_n):
            assert rel_err(gs, gn) < 1e-5, (K, name)
    z, p, cotangent = ema_inputs(B=2, L=50, D=19, dtype=torch.float32)
    for got, want in zip(ema_with_grads(wkv_cpu.ema_sequential_cpu, z, p, cotangent),
                         ema_with_grads(ema_sequential, z, p, cotangent)):
        assert rel_err(got, want) < 1e-5


def test_cpu_march_names_a_level_or_fails_clearly(monkeypatch):
    """`AEGIR_CPU_MARCH` replaces `-march=native` and nothing else; unset or blank keeps the flags;
    a value that is no instruction level is an error naming it, before any compiler runs."""
    monkeypatch.delenv("AEGIR_CPU_MARCH", raising=False)
    assert wkv_cpu.build_flags() == wkv_cpu.FLAGS
    monkeypatch.setenv("AEGIR_CPU_MARCH", "  ")
    assert wkv_cpu.build_flags() == wkv_cpu.FLAGS
    monkeypatch.setenv("AEGIR_CPU_MARCH", "x86-64-v3")
    assert wkv_cpu.build_flags() == tuple("-march=x86-64-v3" if f == "-march=native" else f for f in wkv_cpu.FLAGS)
    monkeypatch.setenv("AEGIR_CPU_MARCH", "native; rm -rf /")
    with pytest.raises(OSError, match="AEGIR_CPU_MARCH='native; rm -rf /' is not an instruction level"):
        wkv_cpu.build_flags()


@needs_kernel
def test_kernel_clamps_tiny_decays_like_the_other_paths():
    inputs = float32_inputs(T=45, K=16, V=16, tiny_decay=True, seed=3)
    out_c, state_c, grads_c = run_with_grads(wkv_chunked, inputs, chunk_size=16)
    out_s, state_s, grads_s = run_with_grads(wkv_sequential, inputs, chunk_size=16)
    assert rel_err(out_s, out_c) < 1e-5 and rel_err(state_s, state_c) < 1e-5
    for name, gs, gc in zip(NAMES, grads_s, grads_c):
        assert rel_err(gs, gc) < 1e-4, name


@needs_kernel
def test_results_do_not_depend_on_threads_checkpoint_spacing_or_grad_mode():
    """Bit for bit: one thread or three (the batch rows split between calls), checkpoints every
    5 steps or every 32, and a forward that stores no checkpoints (no_grad)."""
    inputs = float32_inputs(B=5, T=70, H=3, K=16, V=16, seed=11)
    out, state, grads = run_with_grads(wkv_sequential, inputs, chunk_size=32)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        out3, state3, grads3 = run_with_grads(wkv_sequential, inputs, chunk_size=5)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(out, out3) and torch.equal(state, state3)
    assert all(torch.equal(g, g3) for g, g3 in zip(grads, grads3))
    with torch.no_grad():
        out_ng, state_ng = wkv_sequential(*inputs)
    assert torch.equal(out, out_ng) and torch.equal(state, state_ng)


@needs_kernel
def test_empty_batch_and_empty_sequence():
    for B, T in ((0, 9), (2, 0)):
        inputs = float32_inputs(B=B, T=T, K=16, V=16)
        out, state, grads = run_with_grads(wkv_sequential, inputs)
        assert out.shape == (B, T, 2, 16)
        assert torch.equal(state, inputs[-1].detach())  # nothing happened to the state
        assert [g.shape for g in grads] == [x.shape for x in inputs]


@needs_kernel
def test_kernel_refuses_what_it_does_not_support():
    inputs = make_inputs(K=8, V=8, dtype=torch.float32)  # head size 8: not compiled
    assert not wkv_cpu.takes(inputs[0], inputs[3])
    with pytest.raises(RuntimeError, match="K=8"):
        wkv_sequential(*inputs)
    float64 = make_inputs(K=16, V=16)
    assert not wkv_cpu.takes(float64[0], float64[3])  # float64 stays on the chunked form
    with pytest.raises(ValueError, match="chunk_size"):
        wkv_sequential(*float32_inputs(K=16, V=16), chunk_size=0)


def test_layers_take_the_kernel_only_when_their_config_asks(monkeypatch):
    """`wkv_auto` (the layers' op): the chunked form unless asked; asked, the kernel on CPU
    float32 at a compiled head size and still the chunked form for float64 or another head size.
    A model built with `wkv_kernel` runs it in every layer; its config says so."""
    calls = []

    def spy(name, op):
        def wrapped(*args, **kwargs):
            calls.append(name)
            return op(*args, **kwargs)
        return wrapped

    import aegir.model.ops as ops
    monkeypatch.setattr(ops, "wkv_sequential", spy("kernel", wkv_sequential))
    monkeypatch.setattr(ops, "wkv_chunked", spy("chunked", wkv_chunked))
    ops.wkv_auto(*float32_inputs(K=16, V=16))
    ops.wkv_auto(*float32_inputs(K=16, V=16), kernel=True)
    ops.wkv_auto(*make_inputs(K=16, V=16), kernel=True)  # float64
    ops.wkv_auto(*float32_inputs(K=8, V=8), kernel=True)  # head size 8: not compiled
    assert calls == ["chunked", "kernel" if wkv_cpu.available() else "chunked", "chunked", "chunked"]

    model = AegirModel(preset("tiny", wkv_kernel=True))
    assert all(block.att.wkv_kernel for stack in (model.encoder, model.main, model.decoder)
               for block in stack.blocks)
    model.set_wkv_kernel(False)
    assert not model.config.wkv_kernel
    assert not any(block.att.wkv_kernel for block in model.encoder.blocks)


@pytest.mark.parametrize("value", ["no", 1, None])
def test_a_wkv_kernel_setting_that_is_not_a_bool_is_refused_by_name(value):
    with pytest.raises(ConfigError, match=r"model\.wkv_kernel: must be true or false"):
        preset("tiny", wkv_kernel=value)


@needs_kernel
def test_a_model_on_the_kernel_matches_the_chunked_model_and_its_checkpoint_says_so(tmp_path):
    """The tiny model with `wkv_kernel`: the same outputs as with the chunked form, to rounding;
    its checkpoint records the setting and loads with it."""
    torch.manual_seed(0)
    model = AegirModel(preset("tiny", wkv_kernel=True))
    for p in model.parameters():  # the zero-initialised outputs would hide the wkv
        torch.nn.init.normal_(p, std=0.2)
    batch = make_batch(TABLES)
    with torch.no_grad():
        on_kernel = model(batch)
        model.set_wkv_kernel(False)
        chunked = model(batch)
        model.set_wkv_kernel(True)
    assert rel_err(on_kernel.cta_logits, chunked.cta_logits) < 1e-4
    assert rel_err(on_kernel.cpa_logits, chunked.cpa_logits) < 1e-4
    save_checkpoint(tmp_path / "ckpt", model)
    loaded, _ = load_checkpoint(tmp_path / "ckpt")
    assert loaded.config.wkv_kernel and loaded.main.blocks[0].att.wkv_kernel


@needs_kernel
def test_stack_with_the_kernel_matches_the_naive_stack_and_ignores_padding(monkeypatch):
    torch.manual_seed(0)
    stack = RWKVStack(n_layers=2, d_model=32, head_size=16, chunk_size=8, wkv_kernel=True)
    for p in stack.parameters():  # the zero-initialised outputs would hide the wkv
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(3, 21, 32)
    mask = torch.ones(3, 21, dtype=torch.bool)
    mask[1, 13:] = False
    calls = []
    sequential = wkv_cpu._SequentialWKV.apply
    monkeypatch.setattr(wkv_cpu._SequentialWKV, "apply", lambda *a: calls.append(1) or sequential(*a))
    y_k, states_k = stack(x, mask)
    assert len(calls) == 2  # one per layer: the kernel ran
    stack.set_naive_wkv(True)
    y_n, states_n = stack(x, mask)
    assert rel_err(y_k, y_n) < 1e-4
    for s_k, s_n in zip(states_k, states_n):
        assert rel_err(s_k.wkv, s_n.wkv) < 1e-4
    stack.set_naive_wkv(False)
    y_short, states_short = stack(x[1:2, :13])  # row 1 without its padding
    assert torch.allclose(y_short, y_k[1:2, :13], atol=1e-5)
    for s_short, s_k in zip(states_short, states_k):
        assert torch.allclose(s_short.wkv, s_k.wkv[1:2], atol=1e-5)


def test_build_is_cached_and_a_failed_build_falls_back_with_a_warning(tmp_path):
    """In fresh processes, the kernel asked for: the first use builds into AEGIR_CACHE_DIR, the
    second loads that file (its name hashes the source, flags, compiler and CPU); with a
    compiler that fails, the layers warn, name the failure and run the chunked form."""
    script = ("import warnings, torch\n"
              "from aegir.model.ops import wkv_cpu, wkv_auto\n"
              "with warnings.catch_warnings(record=True) as caught:\n"
              "    warnings.simplefilter('always')\n"
              "    x = torch.rand(1, 3, 1, 16)\n"
              "    out, state = wkv_auto(x, x, x, x, -x, x, torch.zeros(1, 1, 16, 16), kernel=True)\n"
              "print(wkv_cpu.available(), out.shape == (1, 3, 1, 16), sorted(str(w.message) for w in caught))\n")
    env = {**os.environ, "AEGIR_CACHE_DIR": str(tmp_path / "cache")}

    def run(**extra) -> str:
        proc = subprocess.run([sys.executable, "-c", script], env={**env, **extra}, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    if not wkv_cpu.available() and not KERNEL_REQUIRED:
        pytest.skip(f"no kernel on this machine: {wkv_cpu.failure()}")
    for attempt in range(2):
        shown = run()
        assert shown == "True True []"
        if attempt == 0:
            built = list((tmp_path / "cache").glob("wkv_kernel-*.so"))
            assert len(built) == 1
            stamp = built[0].stat().st_mtime_ns
    assert [p.stat().st_mtime_ns for p in (tmp_path / "cache").glob("wkv_kernel-*.so")] == [stamp]
    assert not list((tmp_path / "cache").glob(".wkv_kernel-*"))  # no temporary file left
    failed = run(CC="false", AEGIR_CACHE_DIR=str(tmp_path / "other"))
    assert failed.startswith("False True [") and "did not build" in failed and "chunked form" in failed
    assert not list((tmp_path / "other").glob("*.so"))


# ----------------------------------------------------------------------------- the dechunk EMA


def ema_inputs(B=3, L=40, D=7, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, L, D, generator=g, dtype=dtype)
    p = torch.rand(B, L, generator=g, dtype=dtype).clamp(EMA_PROB_EPS, 1 - EMA_PROB_EPS)
    cotangent = torch.randn(B, L, D, generator=g, dtype=dtype)
    return z, p, cotangent


def ema_with_grads(op, z, p, cotangent):
    z, p = z.detach().clone().requires_grad_(), p.detach().clone().requires_grad_()
    out = op(z, p)
    dz, dp = torch.autograd.grad((out * cotangent.to(out.dtype)).sum(), (z, p))
    return out, dz, dp


@needs_kernel
@pytest.mark.parametrize("B,L,D", [(1, 1, 1), (3, 40, 7), (2, 300, 96)])
def test_ema_kernel_matches_the_loop_with_gradients(B, L, D):
    """The kernel's EMA (float32) against `ema_sequential` in float64: output and both
    gradients (the routing's gradient flows through p)."""
    z, p, cotangent = ema_inputs(B, L, D, seed=L)
    out_ref, dz_ref, dp_ref = ema_with_grads(ema_sequential, z, p, cotangent)
    out, dz, dp = ema_with_grads(wkv_cpu.ema_sequential_cpu, z.float(), p.float(), cotangent)
    assert out.dtype == torch.float32 and out.shape == (B, L, D)
    assert dp_ref.abs().sum() > 0
    for mine, ref in ((out, out_ref), (dz, dz_ref), (dp, dp_ref)):
        assert rel_err(mine.double(), ref) < 1e-5


@needs_kernel
def test_ema_kernel_is_bit_equal_across_threads_and_handles_empty_inputs():
    z, p, cotangent = ema_inputs(B=5, L=33, D=12, seed=4, dtype=torch.float32)
    one = ema_with_grads(wkv_cpu.ema_sequential_cpu, z, p, cotangent)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        three = ema_with_grads(wkv_cpu.ema_sequential_cpu, z, p, cotangent)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, three))
    for B, L in ((0, 4), (2, 0)):
        z, p, cotangent = ema_inputs(B=B, L=L, D=3, dtype=torch.float32)
        out, dz, dp = ema_with_grads(wkv_cpu.ema_sequential_cpu, z, p, cotangent)
        assert out.shape == dz.shape == (B, L, 3) and dp.shape == (B, L)
    with pytest.raises(ValueError, match=r"\(B, L, D\)"):
        wkv_cpu.ema_sequential_cpu(torch.zeros(2, 3, 4), torch.zeros(2, 4))


def test_the_model_takes_the_kernel_ema_only_with_wkv_kernel(monkeypatch):
    """The dechunk EMA: the kernel's with `wkv_kernel` (where it is built), the closed form
    without, the loop in reference mode."""
    calls = []
    real = wkv_cpu.ema_sequential_cpu
    monkeypatch.setattr(wkv_cpu, "ema_sequential_cpu", lambda z, p: calls.append("kernel") or real(z, p))
    batch = make_batch(TABLES)
    for kernel in (False, True):
        torch.manual_seed(0)
        AegirModel(preset("tiny", wkv_kernel=kernel))(batch)
    assert calls == (["kernel"] if wkv_cpu.available() else [])
    model = AegirModel(preset("tiny", wkv_kernel=True))
    model.set_reference(True)
    model(batch)
    assert len(calls) == (1 if wkv_cpu.available() else 0)


_ROUNDING_PROBE = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from aegir.model.network import AegirModel, preset
from aegir.model.ops import wkv_cpu
from test_model import TABLES, make_batch
torch.set_num_threads(1)
torch.manual_seed(0)
model = AegirModel(preset("tiny"))
out = model(make_batch(TABLES))
loss = out.cta_logits.square().mean() + out.cpa_logits.square().mean()
loss.backward()
grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "kernel": wkv_cpu.available(),
                  "flags": list(wkv_cpu.build_flags()), "logits": out.cta_logits.flatten().tolist(),
                  "grads": grads.tolist()}))
"""


@needs_kernel
def test_another_cpus_rounding_switches_change_the_bits_not_the_model(tmp_path):
    """docs/pipeline.md's recipe for another CPU's rounding on this one: ATEN_CPU_CAPABILITY=default
    and AEGIR_CPU_MARCH=x86-64 must reach torch's dispatch and the kernels' build (were a switch
    renamed, the recipe would rerun the same bits and check nothing), and give the same model to
    rounding: a forward and backward of the tiny model in two fresh processes, the plain one and
    the switched one."""
    def probe(extra: dict[str, str]) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "AEGIR_CPU_MARCH")}
        if extra:  # the x86-64 build in a cache of its own; the plain one reuses the suite's
            env.update(extra, AEGIR_CACHE_DIR=str(tmp_path))
        proc = subprocess.run([sys.executable, "-c", _ROUNDING_PROBE, os.path.dirname(__file__)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    plain = probe({})
    if platform.machine() != "x86_64" or plain["capability"] == "DEFAULT":
        pytest.skip(f"torch already runs its default kernels here ({plain['capability']})")
    switched = probe({"ATEN_CPU_CAPABILITY": "default", "AEGIR_CPU_MARCH": "x86-64"})
    assert switched["capability"] == "DEFAULT" and switched["kernel"]
    assert "-march=x86-64" in switched["flags"] and "-march=native" in plain["flags"]
    for key in ("logits", "grads"):
        a, b = torch.tensor(plain[key]), torch.tensor(switched[key])
        assert not torch.equal(a, b), f"the switches left the {key} bit-identical"
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-5), f"{key}: max difference {float((a - b).abs().max())}"
