"""A real RL-like step of :class:`~tilake.workloads.tiny_qwen3.TinyQwen3` under ``torch.profiler``,
written in verl's torch-profiler layout.

Training side (verl ``actor_update``): forward with eager attention, a GRPO-style policy loss
(log-softmax, gather of the taken tokens, advantage-weighted mean), backward, ``AdamW`` step.
Inference side (verl ``rollout_generate``): a prefill over the prompt plus ``decode_steps`` greedy
decode steps with a KV cache and fused attention (``scaled_dot_product_attention``).

Layout (verl ``verl/utils/profiler/torch_profile.py``, discrete mode, ``role`` = the
``DistProfiler.annotate`` role): ``<out>/actor_update/prof_rank-<rank>.json.gz`` and
``<out>/rollout_generate/prof_rank-<rank>.json.gz``, written by ``prof.export_chrome_trace``.
Each phase runs inside ``record_function(<role>)`` and each iteration ends with ``prof.step()``
(``ProfilerStep#N`` ranges), like verl's continuous mode.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

from tilake.ingest.run_facts import RunMeta
from tilake.workloads.tiny_qwen3 import TinyQwen3, TinyQwen3Config

TRAIN_ROLE = "actor_update"
INFER_ROLE = "rollout_generate"


@dataclass
class StepTraces:
    """Where the traces went and what ran. device: ``cpu`` or ``cuda``; tokens: generated ids per prompt."""

    train: Path
    infer: Path
    device: str
    torch_version: str
    loss: float
    tokens: list


def pick_device(device: Optional[str] = None) -> str:
    """``cuda`` when a CUDA device is present (or asked for), else ``cpu``."""
    if device:
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def _profiler(device: str, path: Path) -> profile:
    """One active step (``ProfilerStep#0``); the trace is exported when it is ready, as verl's handler does."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with warnings.catch_warnings():  # "won't be using warmup": one step is all the example records
        warnings.simplefilter("ignore", UserWarning)
        sched = torch.profiler.schedule(wait=0, warmup=0, active=1, repeat=1)
    return profile(activities=acts, record_shapes=True, with_stack=True, schedule=sched,
                   on_trace_ready=lambda p: p.export_chrome_trace(str(path)))


def _trace_path(out: Path, role: str, rank: int) -> Path:
    folder = Path(out) / role
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"prof_rank-{rank}.json.gz"


def run_rl_step(out: Path, device: Optional[str] = None, rank: int = 0, batch: int = 2, prompt_len: int = 12,
                decode_steps: int = 3, seed: int = 0, config: Optional[TinyQwen3Config] = None) -> StepTraces:
    """Run and profile one training step and one generation; write both traces under ``out``.

    Args:
        out: the ``profiler_output`` folder (created). device: ``cpu``/``cuda`` (default: cuda if present).
        batch, prompt_len: prompt ids ``[batch, prompt_len]``. decode_steps: tokens generated after prefill.
    Returns:
        :class:`StepTraces`.
    """
    dev = pick_device(device)
    torch.manual_seed(seed)
    cfg = config or TinyQwen3Config()
    model = TinyQwen3(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt_len), device=dev)
    adv = torch.randn(batch, prompt_len - 1, device=dev)

    train_path = _trace_path(out, TRAIN_ROLE, rank)
    with _profiler(dev, train_path) as prof:
        with record_function(TRAIN_ROLE):
            logits, _ = model(ids[:, :-1], impl="eager")
            logp = F.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            loss = -(logp * adv).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        prof.step()

    infer_path = _trace_path(out, INFER_ROLE, rank)
    model.eval()
    tokens = []
    with torch.no_grad(), _profiler(dev, infer_path) as prof:
        with record_function(INFER_ROLE):
            logits, caches = model(ids, impl="sdpa")
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(nxt)
            for i in range(decode_steps):
                logits, caches = model(nxt, impl="sdpa", caches=caches, start=prompt_len + i)
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                tokens.append(nxt)
        if dev == "cuda":
            torch.cuda.synchronize()
        prof.step()
    gen = torch.cat(tokens, 1).cpu().tolist()
    return StepTraces(train_path, infer_path, dev, torch.__version__, float(loss.detach().cpu()), gen)


def run_meta(traces: StepTraces) -> RunMeta:
    """``runs`` row values describing this workload (the report's collection-method field says what it is)."""
    cfg = TinyQwen3Config()
    evidence = ("CUDA kernels (cat kernel)" if traces.device == "cuda"
                else "CPU ops (cpu_op, no device: innermost aten ops stand for kernels)")
    return {
        "model_id": "tilake/tiny-qwen3 (random weights)",
        "model_family": "qwen3",
        "step": 1,
        "script_path": "tilake.workloads.rl_step.run_rl_step (tilake example --backend torch)",
        "collection_method": (f"real torch.profiler traces of a tiny Qwen3-style model on {traces.device} "
                              f"(torch {traces.torch_version}); evidence: {evidence}"),
        # short names: they name the runtime-ops JSON files
        "train_backend": "torch-eager",
        "infer_backend": "torch-sdpa",
        "parallel_config": {"tp": 1, "pp": 1, "ep": 1},
        "rl_config": {"algorithm": "grpo-like policy loss", "num_layers": cfg.num_layers,
                      "hidden_size": cfg.hidden_size, "decode_steps": len(traces.tokens[0]) - 1 if traces.tokens else 0},
        "tool_versions": {"torch": traces.torch_version},
    }
