"""Kernel-alignment benchmark (issue 23 "Scale"): time and peak memory of the per-layer alignment.

Prints figures, asserts nothing. Two cases:

1. **28-layer step of the bundled example** (``tilake.synth``: Qwen3-0.6B, Megatron actor+ref, vLLM
   rollout; the real torch_npu DB schema): the example runs once through the real pipeline (ingest →
   dbt build) into ``--workdir``; then, ``--repeat`` times, the kernels are read from the warehouse
   (:func:`tilake.pipeline.align.load_kernels`) and aligned (:func:`tilake.diagnosis.kernel_align.align_step`:
   forward windows, layer split of both sides, 28 layer alignments). Figures: kernels in the step per
   side, kernels of the aligned forward per side, median wall time of the read and of the alignment,
   peak traced memory of the alignment (``tracemalloc``: Python objects and numpy buffers).
2. **94-layer MoE step** (synthetic :class:`~tilake.diagnosis.kernel_align.Kernel` lists, no capture: the
   catalog columns set as ``int_kernels_categorised`` sets them): per layer an attention block, a router
   and ``--experts`` experts; training runs each expert unfused (Gather, MatMul, Swish, Mul, MatMul, Mul,
   IndexAdd, Cast), inference fused (Gather, MatMul, SwiGlu, MatMul, Mul, IndexAdd, Cast), with the
   residual add fused into the norm on inference. Figures: kernels per side (≈ 200k in all with the
   default 140 experts), wall time, peak traced memory, the largest layer's traceback size
   (``(n+1)·(m+1)`` bytes) and the process' peak RSS (``ru_maxrss``).

Usage::

    python bench/bench_align.py [--workdir DIR] [--repeat 5] [--experts 140] [--layers 94] [--skip-example]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import List

from tilake.diagnosis.kernel_align import Kernel, align_step


def _timed(fn, repeat: int):
    """``(result, median seconds of `repeat` plain runs, (peak, kept) traced bytes of one more run)``: kept
    is what the result holds when the call returns (the aligned groups), peak − kept the transient working
    memory. tracemalloc slows numpy-heavy code several times, so it only runs for the memory figures."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    del out
    tracemalloc.start()
    out = fn()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return out, statistics.median(times), (peak, kept)


def example_case(workdir: Path, repeat: int) -> None:
    from tilake.lake.store import Lake
    from tilake.pipeline.align import load_kernels
    from tilake.pipeline.example import EXAMPLE_RUN_ID, run_example

    lake = Lake(workdir / "example" / "lake")
    if not lake.warehouse.exists():
        print("running the bundled example once (ingest + dbt build) ...", file=sys.stderr)
        run_example(workdir / "example", lang="en")
    t = time.perf_counter()
    kernels, _ranks, _p = load_kernels(lake.warehouse, EXAMPLE_RUN_ID)
    read_s = time.perf_counter() - t
    al, align_s, peak = _timed(lambda: align_step(kernels["train"], kernels["infer"]), repeat)
    print("case 1: 28-layer step of the bundled example (Qwen3-0.6B GRPO, synthetic torch_npu DBs)")
    print(f"  kernels in the step        train {len(kernels['train']):>7,}   infer {len(kernels['infer']):>7,}")
    print(f"  kernels of the aligned fwd train {len(al.train.kernels):>7,}   infer {len(al.infer.kernels):>7,}"
          f"   ({al.train.forward_count} / {al.infer.forward_count} forward passes)")
    print(f"  layers                     train {len(al.train.split.layers):>7}   infer {len(al.infer.split.layers):>7}"
          f"   ({al.train.split.method} / {al.infer.split.method})")
    print(f"  read from the warehouse    {read_s * 1000:8.1f} ms (once)")
    print(f"  align_step (median of {repeat}) {align_s * 1000:8.1f} ms   peak traced memory {peak[0] / 2**20:7.1f} MiB "
          f"(result {peak[1] / 2**20:.1f} MiB, working {(peak[0] - peak[1]) / 2**20:.1f} MiB)")


def _k(base, cat, mod, shapes, fused=False, replaces=(), equiv="", op=None) -> Kernel:
    return Kernel(pos=0, name=op or base, op_type=op or base, base=base, category=cat, module=mod, fused=fused,
                  replaces=tuple(replaces), equiv=equiv, shapes=shapes)


def moe_side(side: str, layers: int, experts: int, tokens: int = 4096, h: int = 4096) -> List[Kernel]:
    """One MoE forward pass (embedding, ``layers`` layers, final norm, lm head) as catalogued kernels."""
    t = tokens
    ks = [_k("Gather", "layout", "cast_layout", f"151936,{h};1,{t}", op="GatherV2")]
    norm = _k("RmsNorm", "norm", "residual_norm", f"{t},{h};{h}", fused=True, equiv="rms_norm")
    addnorm = _k("AddRmsNorm", "norm", "residual_norm", f"{t},{h};{t},{h};{h}", fused=True,
                 replaces=("Add", "RmsNorm"), equiv="rms_norm")
    add = _k("Add", "elementwise", "elementwise", f"{t},{h};{t},{h}")
    for li in range(layers):
        ks.append(norm if (side == "train" or li == 0) else addnorm)
        ks += [_k("MatMul", "matmul", "linear", f"{t},{h};{h},9216", op="MatMulV2"),
               _k("RmsNorm", "norm", "residual_norm", f"{t},64,128;128", fused=True, equiv="rms_norm"),
               _k("RmsNorm", "norm", "residual_norm", f"{t},4,128;128", fused=True, equiv="rms_norm"),
               _k("RotaryMul", "rope", "rope", f"{t},64,128;{t},1,128", fused=True, equiv="rope"),
               _k("FlashAttention" if side == "train" else "FusedInferAttention", "attention", "attention",
                  f"{t},8192;{t},512", fused=True, equiv="attention_core",
                  op="FlashAttentionScore" if side == "train" else "FusedInferAttentionScore"),
               _k("MatMul", "matmul", "linear", f"{t},8192;8192,{h}", op="MatMulV2")]
        ks += [add, norm] if side == "train" else [addnorm]
        ks += [_k("MatMul", "matmul", "linear", f"{t},{h};{h},{experts}", op="MatMulV2"),
               _k("Softmax", "softmax", "softmax", f"{t},{experts}", op="SoftmaxV2"),
               _k("TopK", "sampling", "sampling", f"{t},{experts}", op="TopKV2")]
        for _e in range(experts):
            ks += [_k("Gather", "layout", "cast_layout", f"{t},{h};64", op="GatherV2"),
                   _k("MatMul", "matmul", "linear", f"64,{h};{h},3072", op="MatMulV2")]
            if side == "train":
                ks += [_k("Swish", "activation", "activation", "64,1536", op="Swish"),
                       _k("Mul", "elementwise", "elementwise", "64,1536;64,1536")]
            else:
                ks += [_k("SwiGlu", "activation", "activation", "64,3072", fused=True, replaces=("Swish", "Mul"),
                          equiv="swiglu")]
            ks += [_k("MatMul", "matmul", "linear", f"64,1536;1536,{h}", op="MatMulV2"),
                   _k("Mul", "elementwise", "elementwise", f"64,{h};64,1"),
                   _k("IndexAdd", "elementwise", "elementwise", f"{t},{h};64"),
                   _k("Cast", "cast", "cast_layout", f"64,{h}")]
        if side == "train":
            ks.append(add)
    ks += [norm if side == "train" else addnorm, _k("MatMul", "matmul", "linear", f"{t},{h};{h},151936", op="MatMulV2")]
    return [Kernel(pos=i, **{f: getattr(k, f) for f in ("name", "op_type", "base", "category", "module", "fused",
                                                          "replaces", "equiv", "shapes")}) for i, k in enumerate(ks)]


def moe_case(layers: int, experts: int) -> None:
    train, infer = moe_side("train", layers, experts), moe_side("infer", layers, experts)
    al, secs, peak = _timed(lambda: align_step(train, infer), 1)
    n = max(e - s for s, e in al.train.split.layers)
    m = max(e - s for s, e in al.infer.split.layers)
    groups = sum(len(v) for v in al.pairs.values())
    rel = {}
    for v in al.pairs.values():
        for p in v:
            rel[p.relation] = rel.get(p.relation, 0) + 1
    print(f"case 2: {layers}-layer MoE step ({experts} experts per layer, synthetic catalogued kernels)")
    print(f"  kernels                    train {len(train):>7,}   infer {len(infer):>7,}   total {len(train) + len(infer):,}")
    print(f"  layers                     train {len(al.train.split.layers):>7}   infer {len(al.infer.split.layers):>7}"
          f"   period {al.train.split.period} / {al.infer.split.period}")
    print(f"  aligned groups             {groups:,}  {dict(sorted(rel.items()))}")
    print(f"  align_step                 {secs:8.2f} s    peak traced memory {peak[0] / 2**20:7.1f} MiB "
          f"(result {peak[1] / 2**20:.1f} MiB, working {(peak[0] - peak[1]) / 2**20:.1f} MiB)")
    print(f"  largest layer traceback    {(n + 1) * (m + 1) / 2**20:7.2f} MiB  ({n} × {m} kernels)")
    print(f"  process peak RSS           {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:7.1f} MiB "
          "(includes the kernel lists and, when run, case 1)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--experts", type=int, default=140)
    ap.add_argument("--layers", type=int, default=94)
    ap.add_argument("--skip-example", action="store_true")
    a = ap.parse_args(argv)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="bench-align-"))
    if not a.skip_example:
        example_case(work, a.repeat)
    moe_case(a.layers, a.experts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
