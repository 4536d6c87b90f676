"""The rows a synthetic population is made of: :class:`Kernel`, :class:`HostOp`, the job shape
(:class:`JobConfig`) and the editable :class:`Population`, plus :func:`make_kernel` / :func:`make_op`
(one kernel or host op from a :data:`~tilake.synth.catalog.CATALOG` entry).

The LLM-shaped populations built from them are in :mod:`tilake.synth.population`.
"""
from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple, Union

from tilake.synth.catalog import CATALOG


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
