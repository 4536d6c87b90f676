"""LLM-shaped kernel populations for synthetic torch_npu captures (the seed's reference job).

A population is a plain list of :class:`HostOp` rows (one framework call each, with the device
kernels it launched), so callers can drop, replace or add ops before writing a DB:

>>> pop = train_population()                        # Megatron actor+ref, Qwen3-0.6B, one GRPO step
>>> pop.replace_op_type("RotaryMul", ["Sin", "Cos", "Mul", "Mul", "Add"])   # unfused RoPE
>>> pop.op_type_counts()["FlashAttentionScore"]
672

Structure (seed ``operator-diff-scanner.txt`` §1.1 reference job): Qwen3-0.6B (28 layers, hidden 1024,
FFN 3072, 16 query heads / 8 KV heads of 128, vocab 151936, tied embeddings), TP=PP=EP=1, train batch 4,
rollout n=2 → 8 sequences of 512+1 tokens, micro-batch 1 → 8 micro-batches; the training DB holds
3 forward passes per micro-batch (ref log-prob, actor log-prob, actor update) and one backward
(update) → 24 forwards, 8 backwards; the inference DB holds 8 vLLM engine steps (one 512-token
prefill each, max_num_batched_tokens=512). Counts therefore follow layers × micro-batches × passes:
FlashAttentionScore = 28·24 = 672, RmsNorm = (4·28+1)·24 = 2712, FusedInferAttentionScore = 28·8 = 224,
AddRmsNormBias = (2·28)·8 = 448 — the numbers in the seed's example table. The DDP gradient/grad-norm
all-reduces (``hcom_allReduce_``) are kept even for one training rank so the HCCL tables are exercised.

Kernel names follow the real conventions (reference doc §5.1): ``aclnn<Api>_<Impl>_<OpType>`` for
aclnn ops (e.g. ``aclnnMm_MatMulCommon_MatMulV2``; the real quirk ``aclnnMatmul_MatMulV3Common_MatMulV5``
whose op type is ``MatMulV3``), ``trans_TransData_<n>`` for GE format conversions,
``hcom_allReduce__865_<i>_1`` for HCCL, ATB ``ReshapeAndCacheNdKernel``, Triton ``_triton_rope`` (launched
without a host op link). Durations are ns, plausible for an Ascend 910B at these shapes (not measured).
Dtype strings follow msprof (``DT_BF16``, ``FLOAT``, ``INT64``); shapes are ``;``-separated tensors of
``,``-separated dims (the writer adds the literal quotes real STRING_IDS values carry).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from tilake.synth.catalog import (
    _INFER_LAYER,
    _INFER_MODULE,
    _INFER_OUTER,
    _PHASE_FRAMES,
    _RAY,
    _TRAIN_LAYER,
    _TRAIN_MODULE,
    _TRAIN_OUTER,
    CATALOG,
)

# JobConfig is also imported from here by callers building a population (`population import JobConfig, …`)
from tilake.synth.records import HostOp, JobConfig, Population, make_kernel, make_op

TRAIN_PHASES = ("generate_sequences", "compute_ref_log_prob", "compute_log_prob", "update_actor")
INFER_PHASE = "generate_sequences"
#: ``phase_marks="verl"``: the range names of a real verl 0.9.1 run (../shared/verl-cpu/traces: the FSDP
#: worker's DistProfiler roles ``actor_compute_log_prob`` / ``actor_update``; verl's ref role
#: ``ref_compute_log_prob``) in place of the worker-function MSTX names above
VERL_ROLE_MARKS = {"compute_ref_log_prob": "ref_compute_log_prob", "compute_log_prob": "actor_compute_log_prob",
                   "update_actor": "actor_update"}
PHASE_MARKS = ("mstx", "verl")


class _Builder:
    """Appends host ops with stacks/phases filled in; keeps the hcom counter."""

    def __init__(self, side: str):
        self.side = side
        self.ops: List[HostOp] = []
        self.phase = ""
        self.hcom = 0

    def stack(self, module: str, layer: int, direction: str) -> Tuple[str, ...]:
        if direction == "backward":
            return ()  # autograd thread: torch_npu records no Python stack (real fixture: callchainId NULL)
        if self.side == "train":
            frames = _TRAIN_MODULE.get(module, ())
            if module in ("optimizer", "grad_norm", "communication", "layout"):
                return frames + _PHASE_FRAMES.get(self.phase, ()) + _RAY
            mid = _TRAIN_LAYER if layer >= 0 else ()
            return frames + mid + _TRAIN_OUTER + _PHASE_FRAMES.get(self.phase, ()) + _RAY
        frames = _INFER_MODULE.get(module, ())
        mid = _INFER_LAYER if layer >= 0 else ()
        return frames + mid + _INFER_OUTER

    def add(self, op_type: str, shapes: str, dtypes: str, module: str, layer: int = -1,
            direction: str = "forward", dur_scale: float = 1.0, **kw) -> HostOp:
        op = make_op(op_type, shapes, dtypes, module=module, layer=layer, direction=direction,
                     phase=self.phase, stack=self.stack(module, layer, direction), dur_scale=dur_scale, **kw)
        if op_type == "hcom_allReduce_":
            op.kernels[0].name = CATALOG[op_type].kernel.format(i=self.hcom)
            self.hcom += 1
        self.ops.append(op)
        return op


def _bf(n: int) -> str:
    return ";".join(["DT_BF16"] * n)


def _train_forward(b: _Builder, j: JobConfig, with_logprob: bool = True) -> None:
    s, h, f = j.seq_len, j.hidden, j.ffn
    q, kv = j.heads * j.head_dim, j.kv_heads * j.head_dim
    b.add("GatherV2", f"{j.vocab},{h};1,{s}", "DT_BF16;INT64", "embedding")
    for layer in range(j.layers):
        b.add("RmsNorm", f"{s},1,{h};{h}", _bf(2), "norm", layer)
        b.add("MatMulV2", f"{s},{h};{h},{q + 2 * kv}", _bf(2), "matmul", layer)
        b.add("RmsNorm", f"{s},1,{j.heads},{j.head_dim};{j.head_dim}", _bf(2), "qk_norm", layer)
        b.add("RmsNorm", f"{s},1,{j.kv_heads},{j.head_dim};{j.head_dim}", _bf(2), "qk_norm", layer)
        b.add("RotaryMul", f"{s},1,{j.heads},{j.head_dim};{s},1,1,{j.head_dim};{s},1,1,{j.head_dim}", _bf(3),
              "rope", layer)
        b.add("RotaryMul", f"{s},1,{j.kv_heads},{j.head_dim};{s},1,1,{j.head_dim};{s},1,1,{j.head_dim}", _bf(3),
              "rope", layer)
        b.add("FlashAttentionScore", f"{s},1,{q};{s},1,{kv};{s},1,{kv};2048,2048", "DT_BF16;DT_BF16;DT_BF16;BOOL",
              "attention", layer)
        b.add("MatMulV2", f"{s},{q};{q},{h}", _bf(2), "matmul", layer, dur_scale=0.6)
        b.add("Add", f"{s},1,{h};{s},1,{h}", _bf(2), "residual", layer)
        b.add("RmsNorm", f"{s},1,{h};{h}", _bf(2), "norm", layer)
        b.add("MatMulV2", f"{s},{h};{h},{2 * f}", _bf(2), "matmul", layer, dur_scale=1.4)
        b.add("SwiGlu", f"{s},1,{2 * f}", _bf(1), "activation", layer)
        b.add("MatMulV2", f"{s},{f};{f},{h}", _bf(2), "matmul", layer, dur_scale=0.8)
        b.add("Add", f"{s},1,{h};{s},1,{h}", _bf(2), "residual", layer)
    b.add("RmsNorm", f"{s},1,{h};{h}", _bf(2), "norm")
    b.add("MatMulV2", f"{s},{h};{h},{j.vocab}", _bf(2), "matmul", dur_scale=9.0)
    if with_logprob:
        b.add("Cast", f"{s},1,{j.vocab}", "DT_BF16", "logprob", out_dtypes="FLOAT", dur_scale=12.0)
        b.add("LogSoftmaxV2", f"{s},1,{j.vocab}", "FLOAT", "logprob")
        b.add("GatherElements", f"{s},1,{j.vocab};{s},1,1", "FLOAT;INT64", "logprob")


def _train_backward(b: _Builder, j: JobConfig) -> None:
    s, h, f = j.seq_len, j.hidden, j.ffn
    q, kv = j.heads * j.head_dim, j.kv_heads * j.head_dim
    r = j.max_response_length
    # GRPO loss (verl core_algos.compute_policy_loss): ratio, clipped surrogate, masked mean
    b.add("NonZero", f"1,{s}", "BOOL", "loss")
    b.add("Sub", f"1,{r};1,{r}", "FLOAT;FLOAT", "loss")
    b.add("Exp", f"1,{r}", "FLOAT", "loss")
    b.add("Mul", f"1,{r};1,{r}", "FLOAT;FLOAT", "loss", dur_scale=0.3)
    b.add("Maximum", f"1,{r};1,{r}", "FLOAT;FLOAT", "loss")
    b.add("ReduceMean", f"1,{r}", "FLOAT", "loss")
    d = "backward"
    b.add("LogSoftmaxGrad", f"{s},1,{j.vocab};{s},1,{j.vocab}", "FLOAT;FLOAT", "logprob", direction=d)
    b.add("Cast", f"{s},1,{j.vocab}", "FLOAT", "logprob", direction=d, out_dtypes="DT_BF16", dur_scale=12.0)
    b.add("MatMulV2", f"{s},{j.vocab};{j.vocab},{h}", _bf(2), "matmul", direction=d, dur_scale=9.0)
    b.add("MatMulV3", f"{j.vocab},{s};{s},{h}", _bf(2), "matmul", direction=d, dur_scale=9.0)
    b.add("RmsNormGrad", f"{s},1,{h};{s},1,{h};{s},1,1;{h}", "DT_BF16;DT_BF16;FLOAT;DT_BF16", "norm", direction=d)
    for layer in reversed(range(j.layers)):
        b.add("MatMulV2", f"{s},{h};{h},{f}", _bf(2), "matmul", layer, d, dur_scale=0.8)
        b.add("MatMulV3", f"{h},{s};{s},{f}", _bf(2), "matmul", layer, d, dur_scale=0.8)
        b.add("SwiGluGrad", f"{s},1,{f};{s},1,{2 * f}", _bf(2), "activation", layer, d)
        b.add("MatMulV2", f"{s},{2 * f};{2 * f},{h}", _bf(2), "matmul", layer, d, dur_scale=1.4)
        b.add("MatMulV3", f"{2 * f},{s};{s},{h}", _bf(2), "matmul", layer, d, dur_scale=1.4)
        b.add("RmsNormGrad", f"{s},1,{h};{s},1,{h};{s},1,1;{h}", "DT_BF16;DT_BF16;FLOAT;DT_BF16", "norm", layer, d)
        b.add("Add", f"{s},1,{h};{s},1,{h}", _bf(2), "residual", layer, d)
        b.add("MatMulV2", f"{s},{h};{h},{q}", _bf(2), "matmul", layer, d, dur_scale=0.6)
        b.add("MatMulV3", f"{h},{s};{s},{q}", _bf(2), "matmul", layer, d, dur_scale=0.6)
        b.add("FlashAttentionScoreGrad", f"{s},1,{q};{s},1,{kv};{s},1,{kv};{s},1,{q};{s},1,{q}", _bf(5),
              "attention", layer, d)
        b.add("RotaryMulGrad", f"{s},1,{j.kv_heads},{j.head_dim};{s},1,1,{j.head_dim}", _bf(2), "rope", layer, d)
        b.add("RotaryMulGrad", f"{s},1,{j.heads},{j.head_dim};{s},1,1,{j.head_dim}", _bf(2), "rope", layer, d)
        b.add("RmsNormGrad", f"{s},1,{j.kv_heads},{j.head_dim};{s},1,{j.kv_heads},{j.head_dim};{s},1,{j.kv_heads},1;"
              f"{j.head_dim}", "DT_BF16;DT_BF16;FLOAT;DT_BF16", "qk_norm", layer, d)
        b.add("RmsNormGrad", f"{s},1,{j.heads},{j.head_dim};{s},1,{j.heads},{j.head_dim};{s},1,{j.heads},1;"
              f"{j.head_dim}", "DT_BF16;DT_BF16;FLOAT;DT_BF16", "qk_norm", layer, d)
        b.add("MatMulV2", f"{s},{q + 2 * kv};{q + 2 * kv},{h}", _bf(2), "matmul", layer, d)
        b.add("MatMulV3", f"{q + 2 * kv},{s};{s},{h}", _bf(2), "matmul", layer, d)
        b.add("RmsNormGrad", f"{s},1,{h};{s},1,{h};{s},1,1;{h}", "DT_BF16;DT_BF16;FLOAT;DT_BF16", "norm", layer, d)
        b.add("Add", f"{s},1,{h};{s},1,{h}", _bf(2), "residual", layer, d)
    b.add("EmbeddingDenseGradV2", f"{s},1,{h};1,{s}", "DT_BF16;INT64", "embedding", direction=d)


def _train_optimizer(b: _Builder, j: JobConfig) -> None:
    n = j.params
    h = j.hidden
    for _ in range(j.grad_buckets):  # DDP gradient buckets, all-reduced over the DP group
        b.add("hcom_allReduce_", f"{j.params * h * 1024 // j.grad_buckets}", "FLOAT", "communication")
        b.ops[-1].kernels[0].comm_bytes = 4 * j.params * h * 1024 // j.grad_buckets
    for _ in range(n):  # get_grad_norm_fp32: torch.norm per main_grad → LpNormReduceV2 + LpNormUpdateV2
        op = b.add("LpNormReduceV2", f"{h},{h}", "FLOAT", "grad_norm", direction="optimizer")
        op.kernels.append(make_kernel("LpNormUpdateV2", "1", "FLOAT"))
    b.add("ReduceSum", f"{n}", "FLOAT;INT64", "grad_norm", direction="optimizer")
    b.add("hcom_allReduce_", "1", "FLOAT", "communication", direction="optimizer")
    b.ops[-1].kernels[0].comm_bytes = 4
    b.add("Sqrt", "1", "FLOAT", "grad_norm", direction="optimizer")
    for _ in range(n):  # clip coefficient, AdamW on fp32 main params, copy back to bf16 weights
        b.add("Muls", f"{h},{h}", "FLOAT;FLOAT", "grad_norm", direction="optimizer")
        b.add("ApplyAdamW", f"{h},{h};{h},{h};{h},{h};{h},{h}", "FLOAT;FLOAT;FLOAT;FLOAT", "optimizer",
              direction="optimizer")
        b.add("Cast", f"{h},{h}", "FLOAT", "optimizer", direction="optimizer", out_dtypes="DT_BF16")
    # weights handed to the rollout engine are cast back to ND from the NZ layout kept for matmuls
    for i in range(4):
        b.add("TransData", f"{h},{h}", "DT_BF16", "layout", direction="optimizer",
              ).kernels[0].name = f"trans_TransData_{14 + i}"
    b.add("hcom_allReduce_", "4", "FLOAT", "communication", direction="optimizer")  # metrics all-reduce
    b.ops[-1].kernels[0].comm_bytes = 16


def _probes(b: _Builder, j: JobConfig) -> None:
    """A host op that launched nothing and one that launched 3 kernels (real aclnnMm sub-kernels)."""
    s, h = j.seq_len, j.hidden
    zero = HostOp(name="aclnnInplaceCopy", kernels=[], parent="aten::copy_", phase=b.phase, module="other",
                  stack=b.stack("loss", -1, "forward"), fw_shapes=f"0,{h};0,{h}", fw_dtypes="c10::BFloat16;float",
                  tag="zero_kernels")
    three = HostOp(name="aclnnMm", parent="aten::mm", phase=b.phase, module="matmul", tag="three_kernels",
                   stack=b.stack("loss", -1, "forward"), fw_shapes=f"{s},{h};{h},{h}",
                   fw_dtypes="float;c10::BFloat16",
                   kernels=[make_kernel("TransData", f"{h},{h}", "DT_BF16", name="aclnnMm_TransData_TransData"),
                            make_kernel("Cast", f"{s},{h}", "FLOAT", out_dtypes="DT_BF16",
                                        name="aclnnMm_CastAiCore_Cast"),
                            make_kernel("MatMulV2", f"{s},{h};{h},{h}", _bf(2), dur_scale=0.3)])
    b.ops.extend([zero, three])


def train_population(job: Optional[JobConfig] = None, attribution_probe: bool = True) -> Population:
    """Kernels of one GRPO step on the Megatron side (actor + ref on the same rank).

    Args:
        job: the job shape (default: the seed's reference job).
        attribution_probe: add one host op with 0 kernels and one with 3 kernels (tags
            ``zero_kernels``/``three_kernels``) in ``update_actor``.
    Returns:
        a :class:`Population` with ``side='train'``, ``backend='megatron'``.
    """
    j = job or JobConfig()
    b = _Builder("train")
    b.phase = "generate_sequences"   # rollout runs in the vLLM server processes: no training kernels
    for phase in ("compute_ref_log_prob", "compute_log_prob"):
        b.phase = phase
        for _ in range(j.micro_batches):
            _train_forward(b, j)
    b.phase = "update_actor"
    if attribution_probe:
        _probes(b, j)
    for _ in range(j.micro_batches):
        _train_forward(b, j)
        _train_backward(b, j)
    _train_optimizer(b, j)
    return Population("train", b.ops, TRAIN_PHASES, j, "megatron")


def infer_population(job: Optional[JobConfig] = None) -> Population:
    """Kernels of the vLLM rollout (vllm-ascend, eager mode) for the same step.

    Each engine step: embedding, layer-0 RmsNorm, per layer AddRmsNormBias (fused residual add) ×2,
    QKV/O/gate-up/down MatMulV2, q/k RmsNorm, ``_triton_rope`` (no host op), ReshapeAndCacheNdKernel,
    FusedInferAttentionScore, SwiGlu; final AddRmsNormBias, lm-head MatMulV2 on the sampled rows,
    sampling (Cast, Sort, ApplyTopKTopP, SoftmaxV2, DSARandomUniform, RealDiv, ArgMaxV2, LogSoftmaxV2
    for ``calculate_log_probs``).
    """
    j = job or JobConfig()
    b = _Builder("infer")
    b.phase = INFER_PHASE
    t = j.max_prompt_length
    h, f, v = j.hidden, j.ffn, j.vocab
    q, kv = j.heads * j.head_dim, j.kv_heads * j.head_dim
    reqs = j.sequences // j.infer_steps or 1
    for _ in range(j.infer_steps):
        b.add("GatherV2", f"{v},{h};{t}", "DT_BF16;INT64", "embedding")
        for layer in range(j.layers):
            if layer == 0:
                b.add("RmsNorm", f"{t},{h};{h}", _bf(2), "norm", layer)
            else:
                b.add("AddRmsNormBias", f"{t},{h};{t},{h};{h};{h}", _bf(4), "norm", layer)
            b.add("MatMulV2", f"{t},{h};{h},{q + 2 * kv}", _bf(2), "matmul", layer)
            b.add("RmsNorm", f"{t},{j.heads},{j.head_dim};{j.head_dim}", _bf(2), "qk_norm", layer)
            b.add("RmsNorm", f"{t},{j.kv_heads},{j.head_dim};{j.head_dim}", _bf(2), "qk_norm", layer)
            rope = b.add("_triton_rope", f"{t},{j.heads},{j.head_dim};{t},{j.kv_heads},{j.head_dim};{t},{j.head_dim}",
                         _bf(3), "rope", layer)
            rope.name, rope.parent = "", None   # Triton launch: no PYTORCH_API link (reference doc, Traps)
            b.add("ReshapeAndCacheNdKernel", f"{t},{j.kv_heads},{j.head_dim};{t},{j.kv_heads},{j.head_dim};"
                  f"1024,128,{j.kv_heads},{j.head_dim};1024,128,{j.kv_heads},{j.head_dim};{t}",
                  "DT_BF16;DT_BF16;DT_BF16;DT_BF16;INT32", "kv_cache", layer)
            b.add("FusedInferAttentionScore", f"{t},{q};1024,128,{kv};1024,128,{kv};{reqs},8",
                  "DT_BF16;DT_BF16;DT_BF16;INT32", "attention", layer)
            b.add("MatMulV2", f"{t},{q};{q},{h}", _bf(2), "matmul", layer, dur_scale=0.6)
            b.add("AddRmsNormBias", f"{t},{h};{t},{h};{h};{h}", _bf(4), "norm", layer)
            b.add("MatMulV2", f"{t},{h};{h},{2 * f}", _bf(2), "matmul", layer, dur_scale=1.4)
            b.add("SwiGlu", f"{t},{2 * f}", _bf(1), "activation", layer)
            b.add("MatMulV2", f"{t},{f};{f},{h}", _bf(2), "matmul", layer, dur_scale=0.8)
        b.add("AddRmsNormBias", f"{t},{h};{t},{h};{h};{h}", _bf(4), "norm")
        b.add("MatMulV2", f"{reqs},{h};{h},{v}", _bf(2), "logits", dur_scale=0.7)
        b.add("Cast", f"{reqs},{v}", "DT_BF16", "sampling", out_dtypes="FLOAT", dur_scale=0.2)
        b.add("Sort", f"{reqs},{v}", "FLOAT", "sampling")
        b.add("ApplyTopKTopP", f"{reqs},{v};{reqs};{reqs}", "FLOAT;FLOAT;INT32", "sampling")
        b.add("SoftmaxV2", f"{reqs},{v}", "FLOAT", "sampling", dur_scale=0.4)
        b.add("DSARandomUniform", f"{reqs},{v}", "FLOAT", "sampling")
        b.add("RealDiv", f"{reqs},{v};{reqs},{v}", "FLOAT;FLOAT", "sampling")
        b.add("ArgMaxV2", f"{reqs},{v}", "FLOAT", "sampling")
        b.add("LogSoftmaxV2", f"{reqs},{v}", "FLOAT", "sampling", dur_scale=0.05)
    for op in b.ops:
        if op.module == "sampling":
            op.direction = "sampling"
    return Population("infer", b.ops, (), j, "vllm")


def with_verl_marks(train: Population, infer: Population) -> Tuple[Population, Population]:
    """Copies of the populations with the phase ranges a real verl + vLLM run records
    (``make_profiler_output(phase_marks="verl")``; docs/phases.md).

    Training ops move to verl's role names (:data:`VERL_ROLE_MARKS`: ``actor_compute_log_prob``,
    ``ref_compute_log_prob``, ``actor_update`` as in the real torch trace
    ``../shared/verl-cpu/traces/actor-rollout_train_step1_rank0-of-1_*.json.gz``). Each inference engine
    step (it starts with the embedding ``GatherV2``) gets vLLM's model-runner range
    ``execute_context_<reqs>(<tokens>)_generation_0(0)`` (a prefill; the format of the real rollout trace
    ``../shared/verl-cpu/traces/*.pt.trace.json.gz``), and one decode step is appended: a copy of the last
    engine step named ``execute_context_0(0)_generation_<reqs>(<reqs>)`` (shapes kept from the prefill:
    only the op types and the range matter). The inference DB then carries MSTX ranges too.
    """
    t, i = train.copy(), infer.copy()
    for op in t.ops:
        op.phase = VERL_ROLE_MARKS.get(op.phase, op.phase)
    t.phases = tuple(VERL_ROLE_MARKS.get(p, p) for p in t.phases)
    j = i.job
    reqs = j.sequences // j.infer_steps or 1
    prefill = f"execute_context_{reqs}({reqs * j.max_prompt_length})_generation_0(0)"
    steps: List[List[HostOp]] = []
    for op in i.ops:
        if (op.module == "embedding" and any(k.op_type == "GatherV2" for k in op.kernels)) or not steps:
            steps.append([])
        steps[-1].append(op)
        op.phase = prefill
    decode = Population(i.side, list(steps[-1]), job=j).copy().ops if steps else []
    for op in decode:
        op.phase = f"execute_context_0(0)_generation_{reqs}({reqs})"
    i.ops.extend(decode)
    i.phases = (prefill, decode[0].phase) if decode else (prefill,)
    return t, i
