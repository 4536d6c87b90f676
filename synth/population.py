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

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from tilake.synth.catalog import (CATALOG, KernelTemplate, _INFER_LAYER, _INFER_MODULE, _INFER_OUTER,  # noqa: F401
                            _PHASE_FRAMES, _RAY, _TRAIN_LAYER, _TRAIN_MODULE, _TRAIN_OUTER)

TRAIN_PHASES = ("generate_sequences", "compute_ref_log_prob", "compute_log_prob", "update_actor")
INFER_PHASE = "generate_sequences"


@dataclass
class Kernel:
    """One device task (a COMPUTE_TASK_INFO row, or a COMMUNICATION_OP when ``accelerator='COMMUNICATION'``).

    Attributes:
        name: kernel name (``COMPUTE_TASK_INFO.name`` / ``COMMUNICATION_OP.opName``).
        op_type: CANN op type (``opType``), e.g. ``MatMulV2``, ``hcom_allReduce_``.
        accelerator: ``COMPUTE_TASK_INFO.taskType`` string: AI_CORE, AI_VECTOR_CORE, MIX_AIC, MIX_AIV,
            AI_CPU, DSA_SQE, or COMMUNICATION for HCCL.
        dur_ns: device duration in ns.
        block_dim / mix_block_dim: cores used (0 for AI_CPU / DSA).
        input_shapes, input_dtypes, input_formats, output_*: msprof strings without quotes.
        comm_bytes: payload of a communication op in bytes (``COMMUNICATION_OP.count`` is elements).
    """
    name: str
    op_type: str
    accelerator: str
    dur_ns: int
    block_dim: int = 0
    mix_block_dim: int = 0
    input_shapes: str = ""
    input_dtypes: str = ""
    input_formats: str = ""
    output_shapes: str = ""
    output_dtypes: str = ""
    output_formats: str = ""
    comm_bytes: int = 0


@dataclass
class HostOp:
    """One framework call and the kernels it launched (a PYTORCH_API type-50001 row, plus its parent).

    Attributes:
        name: innermost framework record, the one CONNECTION_IDS links to the kernels (usually the
            ACL-level name, ``aclnnMm``; ``HcclAllreduce``; ATB ops use the ``npu::`` name).
            Empty string: the kernels have no host op link (Triton launches).
        kernels: device kernels in launch order (may be empty: a host op that launched nothing).
        parent: enclosing ``aten::``/``npu::`` record (its own PYTORCH_API row), or None.
        phase: verl phase (MSTX range message) the call belongs to.
        module: transformer module / purpose label (informational: attention, norm, rope, …).
        layer: transformer layer index, -1 outside layers.
        direction: ``forward`` | ``backward`` | ``optimizer`` | ``sampling`` | ``other``;
            backward calls run on the autograd thread and carry no call stack (as in real files).
        stack: Python frames, innermost first, ``path.py(line): func`` as torch_npu records them.
        fw_shapes / fw_dtypes: framework input shapes/dtypes of the parent record
            (``513,1024;\\r\\n1024,4096;\\r\\n`` style is produced by the writer).
        tag: free marker; ``zero_kernels`` / ``three_kernels`` mark the attribution probes.
    """
    name: str
    kernels: List[Kernel]
    parent: Optional[str] = None
    phase: str = ""
    module: str = ""
    layer: int = -1
    direction: str = "forward"
    stack: Tuple[str, ...] = ()
    fw_shapes: str = ""
    fw_dtypes: str = ""
    tag: str = ""




@dataclass
class JobConfig:
    """Reference job of the seed (``operator-diff-scanner.txt`` §1.1) plus Qwen3-0.6B's config.json.

    Shrink ``layers`` for fast tests; every count scales with it.
    """
    model_id: str = "Qwen/Qwen3-0.6B"
    layers: int = 28
    hidden: int = 1024
    ffn: int = 3072
    heads: int = 16
    kv_heads: int = 8
    head_dim: int = 128
    vocab: int = 151936
    train_batch_size: int = 4
    rollout_n: int = 2
    micro_batch_size: int = 1
    max_prompt_length: int = 512
    max_response_length: int = 1
    infer_steps: int = 8
    tp: int = 1
    pp: int = 1
    ep: int = 1
    grad_buckets: int = 2

    @property
    def sequences(self) -> int:
        """Sequences per step: train batch × rollout n."""
        return self.train_batch_size * self.rollout_n

    @property
    def micro_batches(self) -> int:
        """Micro-batches per training pass."""
        return self.sequences // self.micro_batch_size

    @property
    def seq_len(self) -> int:
        """Tokens per training sequence (prompt + response)."""
        return self.max_prompt_length + self.max_response_length

    @property
    def params(self) -> int:
        """Parameter tensors seen by the optimizer (8 per layer + embedding + final norm; lm head tied)."""
        return 8 * self.layers + 2


@dataclass
class Population:
    """An ordered list of host ops for one side (``train`` or ``infer``), editable in place.

    Attributes:
        side: ``train`` | ``infer``.
        ops: the host ops in execution order.
        phases: MSTX phase names in order (empty for the inference side).
        job: the :class:`JobConfig` the population was derived from.
        backend: ``megatron`` | ``vllm`` (names the runtime-ops JSON of the report).
    """
    side: str
    ops: List[HostOp]
    phases: Tuple[str, ...] = ()
    job: JobConfig = field(default_factory=JobConfig)
    backend: str = ""

    def copy(self) -> "Population":
        """Deep copy (ops and kernels), so edits don't leak into the source population."""
        return copy.deepcopy(self)

    def kernels(self) -> List[Kernel]:
        """Every kernel in launch order (compute and communication)."""
        return [k for op in self.ops for k in op.kernels]

    def op_type_counts(self, include_communication: bool = True) -> Counter:
        """``Counter`` of kernel op types (communication ops counted under their op type)."""
        return Counter(k.op_type for k in self.kernels()
                       if include_communication or k.accelerator != "COMMUNICATION")

    def kernel_name_counts(self) -> Counter:
        """``Counter`` of kernel names (what ``COMPUTE_TASK_INFO ⋈ STRING_IDS`` groups by)."""
        return Counter(k.name for k in self.kernels())

    def compute_kernel_count(self) -> int:
        """Kernels written to COMPUTE_TASK_INFO (everything but COMMUNICATION)."""
        return sum(1 for k in self.kernels() if k.accelerator != "COMMUNICATION")

    def communication_op_count(self) -> int:
        """Kernels written to COMMUNICATION_OP."""
        return sum(1 for k in self.kernels() if k.accelerator == "COMMUNICATION")

    def drop_op_type(self, op_type: str) -> int:
        """Remove every kernel of ``op_type``; host ops left without kernels are removed too.

        Returns:
            number of kernels removed.
        """
        removed = 0
        kept: List[HostOp] = []
        for op in self.ops:
            before = len(op.kernels)
            op.kernels = [k for k in op.kernels if k.op_type != op_type]
            removed += before - len(op.kernels)
            if op.kernels or before == 0:
                kept.append(op)
        self.ops = kept
        return removed

    def replace_op_type(self, op_type: str,
                        replacement: Union[Sequence[str], Callable[[HostOp], List[HostOp]]]) -> int:
        """Replace each host op that launches ``op_type`` by a sequence of host ops.

        Args:
            op_type: op type to replace (e.g. ``FusedInferAttentionScore``).
            replacement: op types, each launched by its own host op built from :data:`CATALOG`
                (e.g. ``["BatchMatMulV2", "SoftmaxV2", "BatchMatMulV2"]``; ``[]`` drops the op), or a
                function ``HostOp -> [HostOp, ...]`` for full control.
        Returns:
            number of host ops replaced.
        Raises:
            KeyError: a replacement op type missing from :data:`CATALOG`.
        """
        out: List[HostOp] = []
        n = 0
        for op in self.ops:
            if not any(k.op_type == op_type for k in op.kernels):
                out.append(op)
                continue
            n += 1
            if callable(replacement):
                out.extend(replacement(op))
                continue
            src = next(k for k in op.kernels if k.op_type == op_type)
            for new_type in replacement:
                new = make_op(new_type, shapes=src.input_shapes, dtypes=src.input_dtypes)
                new.phase, new.module, new.layer = op.phase, op.module, op.layer
                new.direction, new.stack = op.direction, op.stack
                new.fw_shapes, new.fw_dtypes = op.fw_shapes, op.fw_dtypes
                out.append(new)
        self.ops = out
        return n

    def insert_after(self, op_type: str, new_op_type: str) -> int:
        """Add one host op launching ``new_op_type`` after every host op that launches ``op_type``.

        Returns:
            number of host ops inserted.
        """
        out: List[HostOp] = []
        n = 0
        for op in self.ops:
            out.append(op)
            if any(k.op_type == op_type for k in op.kernels):
                src = op.kernels[0]
                new = make_op(new_op_type, shapes=src.input_shapes, dtypes=src.input_dtypes)
                new.phase, new.module, new.layer, new.direction, new.stack = (
                    op.phase, op.module, op.layer, op.direction, op.stack)
                out.append(new)
                n += 1
        self.ops = out
        return n

    def probe_ops(self) -> Dict[str, HostOp]:
        """Host ops tagged ``zero_kernels`` / ``three_kernels`` (the attribution probes)."""
        return {op.tag: op for op in self.ops if op.tag in ("zero_kernels", "three_kernels")}


def make_kernel(op_type: str, shapes: str = "", dtypes: str = "", out_shapes: Optional[str] = None,
                out_dtypes: Optional[str] = None, dur_scale: float = 1.0, name: Optional[str] = None) -> Kernel:
    """Build one kernel from the :data:`CATALOG` entry ``op_type`` (a catalog key; usually the op type).

    Raises:
        KeyError: ``op_type`` not in the catalog.
    """
    t = CATALOG[op_type]
    n_in = len(shapes.split(";")) if shapes else 0
    fmts = ";".join([t.formats] * n_in) if n_in else ""
    out_s = shapes.split(";")[0] if out_shapes is None and shapes else (out_shapes or "")
    out_d = dtypes.split(";")[0] if out_dtypes is None and dtypes else (out_dtypes or "")
    return Kernel(name=name or t.kernel, op_type=t.op_type or op_type, accelerator=t.accelerator,
                  dur_ns=max(600, int(t.dur_ns * dur_scale)), block_dim=t.block_dim, mix_block_dim=t.mix_block_dim,
                  input_shapes=shapes, input_dtypes=dtypes, input_formats=fmts,
                  output_shapes=out_s, output_dtypes=out_d,
                  output_formats=(t.formats if out_s else ""))


def make_op(op_type: str, shapes: str = "", dtypes: str = "", **kw) -> HostOp:
    """A host op launching one kernel of ``op_type`` with the catalog's host record names.

    Keyword arguments go to :class:`HostOp` (phase, module, layer, direction, stack, …).
    """
    t = CATALOG[op_type]
    k = make_kernel(op_type, shapes, dtypes, dur_scale=kw.pop("dur_scale", 1.0),
                    out_dtypes=kw.pop("out_dtypes", None))
    fw_shapes = kw.pop("fw_shapes", shapes)
    fw_dtypes = kw.pop("fw_dtypes", _fw_dtypes(dtypes))
    return HostOp(name=t.acl, kernels=[k], parent=t.parent, fw_shapes=fw_shapes, fw_dtypes=fw_dtypes, **kw)


def _fw_dtypes(msprof_dtypes: str) -> str:
    names = {"DT_BF16": "c10::BFloat16", "FLOAT": "float", "INT64": "long int", "INT32": "int", "BOOL": "bool"}
    return ";".join(names.get(d, d) for d in msprof_dtypes.split(";")) if msprof_dtypes else ""


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
    for i in range(j.grad_buckets):  # DDP gradient buckets, all-reduced over the DP group
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
