"""Synthetic train/infer dump pairs of one step in msprobe's on-disk format (needs PyTorch).

Why our own writer: ``mindstudio-probe`` installs from PyPI and runs on CPU, but it pulls pandas,
scipy, scikit-learn, onnx and tensorboard into the environment and its ``PrecisionDebugger`` is a
process-wide singleton (one side per process). The bundled example (``tilake example --with-dump``)
and the tests need small pairs quickly, so this module writes the same files msprobe 26.2.0 writes in
``tensor`` task, ``mix`` level (layout and fields from ``shared/reference/msprobe-format.md`` and
real msprobe 26.2.0 dumps of the same model, ``shared/fixtures/dumps/pairA``):

* ``<root>/step0/rank0/{dump.json, construct.json, stack.json, dump_tensor_data/*.pt}``;
* module entries ``Module.<path>.<Class>.forward.<n>`` (the root model itself is not dumped),
  API entries ``<API>.<global counter>.forward`` with their construct.json parent;
* ``dump.json`` keys in completion order, ``construct.json`` keys in call order;
* tensor slots ``{"type", "dtype", "shape", "Max", "Min", "Mean", "Norm", "requires_grad",
  "data_name"}`` with statistics in the tensor's own dtype, files ``<entry>.input.<i>.pt``,
  ``.kwargs.<name>.pt``, ``.output.<i>.pt``, ``.parameters.<name>.pt``;
* msprobe's ``load`` setting: a module listed in ``load.modules`` gets each tensor positional
  input ``i`` replaced by ``<load.path>/step<S>/rank<R>/dump_tensor_data/<entry>.input.<i>.pt``.

Models (:mod:`tilake.synth.msprobe_models`): a tiny Qwen3 in HuggingFace style (train: separate q/k/v
and gate/up, RoPE in plain tensor ops, batch-major ``[1, S, H]``) and in vLLM style (infer: fused
``qkv_proj`` / ``gate_up_proj``, per-layer rotary module, fused residual add in the norm, token-major
``[S, H]``). By default both sides use the same SDPA attention and the inference norm normalises the
*rounded* residual, so a clean pair is bitwise EXACT everywhere and each injected fault is the only
difference; ``Cfg(train_attn="eager")`` gives the training side HF eager attention (a rounding-level
difference at every ``L<i>.attn_core.out``, the first divergence at ``L0.attn_core.out``).

Files: :mod:`tilake.synth.msprobe_dumper` (config, writer, shared math), :mod:`tilake.synth.msprobe_models`
(HF and vLLM styles, weights, faults); this module runs them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

import torch

from tilake.synth.msprobe_dumper import Cfg, run_dumped
from tilake.synth.msprobe_models import build_infer, build_train, weights


def prompt(cfg: Cfg) -> torch.Tensor:
    """Deterministic token ids ``[seq]`` (int64, in ``[0, vocab)``; seeded by ``cfg.seed + 1``)."""
    g = torch.Generator().manual_seed(cfg.seed + 1)
    return torch.randint(0, cfg.vocab, (cfg.seq,), generator=g)


def dump_train(cfg: Cfg, root: Path, w=None) -> Path:
    """Dump the HF-style forward (input ``[1, S]``) into ``root``; returns the rank folder ``root/step0/rank0``."""
    return run_dumped(build_train(cfg, w or weights(cfg)), root, lambda m: m(prompt(cfg)[None]))


def dump_infer(cfg: Cfg, root: Path, fault: Optional[str] = None, load: Optional[dict] = None, w=None,
               shuffle_dump_json: bool = False) -> Path:
    """Dump the vLLM-style forward (input ``[S]``, positions ``0..S-1``), optionally with a fault
    (see :func:`~tilake.synth.msprobe_models.build_infer`) and an msprobe ``load``; returns the rank folder."""
    return run_dumped(build_infer(cfg, w or weights(cfg), fault), root,
                      lambda m: m(prompt(cfg), torch.arange(cfg.seq)), load=load, shuffle_dump_json=shuffle_dump_json)


def write_dump_pair(out: Path, cfg: Optional[Cfg] = None) -> Tuple[Path, Path]:
    """The dump pair of the joined example: ``out/train`` (HF eager attention) and ``out/infer`` (vLLM style, SDPA).

    Args:
        out: folder for the two dump roots (created). cfg: default ``Cfg(train_attn="eager")``: 2 layers,
            bf16, 8 tokens; the first divergence is ``L0.attn_core.out`` (map ``qwen3_hf_vllm``).
    Returns:
        ``(train rank folder, infer rank folder)``, each ``…/step0/rank0``.
    """
    cfg = cfg or Cfg(train_attn="eager")
    w = weights(cfg)
    return dump_train(cfg, Path(out) / "train", w), dump_infer(cfg, Path(out) / "infer", w=w)
