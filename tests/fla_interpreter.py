"""aegir.model.ops.wkv_fla against the reference loop on the CPU, fla's Triton kernels run by
Triton's interpreter; for tests/test_wkv_fla.py, which runs it in a process of its own
(TRITON_INTERPRET must be set before Triton is first imported) and checks what it prints: one
JSON object, {"skip": reason} where fla, Triton or the interpreter cannot run fla's kernels at
all, else the errors of every case ({"cases": {name: {"out": …, "state": …, "grads": {…}}}},
relative errors ‖x − ref‖/‖ref‖ and max abs differences, the reference in float64).

Three shims make Triton 3.7's interpreter run fla 0.6's RWKV-7 kernels (set before fla is
imported, in this process only); none changes what a kernel computes:

* the autotuner benchmarks every config through the GPU driver, which does not exist here:
  its benchmark returns equal timings without running anything, so the first config runs;
* the interpreter runs a kernel as Python, so a loop counter is a Python int where compiled
  Triton has a tensor, and fla calls `.to(tl.int64)` on one: each `for` loop's counter is
  turned into a tensor at the top of its body (the interpreter already does that to every
  assigned value);
* fla binds `tl.gather` to a name of its own, which the interpreter (it patches `triton.language`
  while a kernel runs) never sees: those names get a function that looks `tl.gather` up at call
  time.

Run by hand: `python tests/fla_interpreter.py` (it sets TRITON_INTERPRET itself). Importing it
(tests/test_wkv_fla.py reads CASES) imports neither Triton nor fla.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import time
import traceback

import torch  # does not import Triton
import torch.nn.functional as F

# (name, B, T, H, K, V, initial state, gradients, tiny decays): 45 steps are 2 full chunks of fla's
# 16 and a partial one; ≤ 64 steps without gradients take the fused recurrent kernel
CASES = [
    ("chunk", 2, 45, 2, 16, 16, True, True, False),
    ("chunk_k32_v16", 1, 20, 1, 32, 16, True, True, False),
    ("chunk_no_initial_state", 1, 20, 2, 16, 16, False, True, False),
    ("chunk_clamped_decay", 1, 33, 1, 16, 16, True, True, True),
    ("chunk_long_no_grad", 1, 70, 1, 16, 16, True, False, False),
    ("fused", 2, 45, 2, 16, 16, True, False, False),
    ("fused_no_initial_state", 1, 7, 1, 16, 32, False, False, False),
]


def shim() -> None:
    import triton.language as tl
    import triton.runtime.autotuner as autotuner
    import triton.runtime.interpreter as interpreter

    autotuner.Autotuner.do_bench = property(lambda self: lambda fn, quantiles: [0.0, 0.0, 0.0])

    def visit_For(self, node):
        self.generic_visit(node)
        if isinstance(node.target, ast.Name):
            name = node.target.id
            node.body.insert(0, self.visit(ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                                                      value=ast.Name(id=name, ctx=ast.Load()))))
        return node

    interpreter.ASTTransformer.visit_For = visit_For
    original = getattr(tl, "gather", None)

    def gather(*args, **kwargs):
        return tl.gather(*args, **kwargs)

    import fla.ops.rwkv7  # noqa: F401  (imports every module whose names are rebound below)

    if original is not None:
        for name, module in list(sys.modules.items()):
            if name.startswith("fla.") and getattr(module, "gather", None) is original:
                module.gather = gather


def inputs(B, T, H, K, V, initial, tiny_decay, seed):
    """RWKV-7-shaped float32 inputs (as tests/test_wkv.py's make_inputs): a = −κ̂, b = κ̂ ⊙ â."""
    g = torch.Generator().manual_seed(seed)
    r, k, v = (torch.randn(B, T, H, n, generator=g) * s for n, s in ((K, 1.0), (K, 0.5), (V, 1.0)))
    w = torch.exp(-0.6065 * torch.rand(B, T, H, K, generator=g))
    if tiny_decay:  # decays far below the clamp: every path clamps them alike
        w = torch.where(torch.rand(B, T, H, K, generator=g) < 0.3, 1e-4, w)
    kk = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    lr = torch.rand(B, T, H, K, generator=g)
    state = torch.randn(B, H, K, V, generator=g) if initial else None
    return [r, w, k, v, -kk, kk * lr, state]


def errors(got: torch.Tensor, want: torch.Tensor) -> dict:
    diff = got.double() - want
    return {"rel": (diff.norm() / want.norm().clamp(min=1e-30)).item(), "max_abs": diff.abs().max().item(),
            "ref_max_abs": want.abs().max().item()}


def run_case(B, T, H, K, V, initial, grad, tiny_decay, seed) -> dict:
    from aegir.model.ops import wkv_fla as module
    from aegir.model.ops.wkv import wkv_naive

    xs = inputs(B, T, H, K, V, initial, tiny_decay, seed)
    names = ["r", "w", "k", "v", "a", "b", "initial_state"]
    present = [i for i, x in enumerate(xs) if x is not None]
    g = torch.Generator().manual_seed(seed + 1)
    d_out, d_state = torch.randn(B, T, H, V, generator=g, dtype=torch.float64), \
        torch.randn(B, H, K, V, generator=g, dtype=torch.float64)

    def run(op, dtype):
        args = [None if x is None else x.to(dtype).requires_grad_(grad) for x in xs]
        with torch.set_grad_enabled(grad):
            out, state = op(*args)
        result = {"out": out, "state": state, "dtype": (str(out.dtype), str(state.dtype)),
                  "shape": (list(out.shape), list(state.shape))}
        if grad:
            loss = (out * d_out.to(out.dtype)).sum() + (state * d_state.to(state.dtype)).sum()
            result["grads"] = torch.autograd.grad(loss, [args[i] for i in present])
        return result

    want = run(wkv_naive, torch.float64)
    chunk, fused = module._kernels()
    used = []  # which of fla's two kernels the adapter called

    def spy(name, fn):
        def call(*args, **kwargs):
            used.append(name)
            return fn(*args, **kwargs)
        return call

    module._ops = (spy("chunk", chunk), spy("fused_recurrent", fused))
    started = time.perf_counter()
    try:
        got = run(module.wkv_fla, torch.float32)
    finally:
        module._ops = (chunk, fused)
    report = {"seconds": time.perf_counter() - started, "kernels": used, "dtype": got["dtype"],
              "shape": got["shape"], "ref_shape": want["shape"], "out": errors(got["out"], want["out"]),
              "state": errors(got["state"], want["state"])}
    if grad:
        report["grads"] = {names[i]: errors(gx, wx) for i, gx, wx in zip(present, got["grads"], want["grads"])}
    return report


def main() -> None:
    started = time.perf_counter()
    try:
        shim()
        # the probe: fla's own chunked kernel, forward and backward, on what the cases use; if this
        # fails the interpreter cannot run fla here (a skip), and the adapter is not to blame
        from fla.ops.rwkv7 import chunk_rwkv7

        x = [t.requires_grad_() for t in (torch.randn(1, 16, 1, 16) for _ in range(6))]
        out, state = chunk_rwkv7(x[0], -torch.rand(1, 16, 1, 16) * x[1].sigmoid(), *x[2:], scale=1.0,
                                 output_final_state=True)
        (out.sum() + state.sum()).backward()
    except Exception as error:
        print(json.dumps({"skip": f"Triton's interpreter does not run fla's RWKV-7 kernels here: "
                                  f"{type(error).__name__}: {error}"[:2000],
                          "traceback": traceback.format_exc()[-4000:]}))
        return
    probe = time.perf_counter() - started
    cases = {name: run_case(*shape, seed=i) for i, (name, *shape) in enumerate(CASES)}
    print(json.dumps({"cases": cases, "probe_seconds": probe, "seconds": time.perf_counter() - started}))


if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports Triton (tests/test_wkv_fla.py sets it too)
    main()
