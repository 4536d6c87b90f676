"""Canonicalisation: each dump side as *logical tensors* — one tensor of the whole request per slot —
whatever layout it was written in, with a record of what was done.

Runs between reading a dump (:mod:`tilake.ingest.msprobe.reader`) and the boundary gates: every later
stage (selectors, transforms, comparisons, ULPs, stubs, hypotheses) sees a :class:`LogicalSide`, which
answers the same questions as a :class:`~tilake.ingest.msprobe.reader.DumpSide` (entries, construct.json
parents, slots, ``load``) but loads merged / joined / selected tensors.

What it undoes (each step appends a :class:`Record`; the task card and the reports print them):

* **tensor parallel** — several ``rank*`` folders of one step holding the same modules are one model
  (:func:`merge_tp`). Merge per slot by the module's parallel kind (vLLM / Megatron class names):
  ``QKVParallelLinear`` output and weight per fused segment (``[q_r | k_r | v_r]`` per rank → ``[q; k; v]``;
  q_r from the attention's ``o_proj`` input width), ``MergedColumnParallelLinear`` / ``SiluAndMul`` input /
  Megatron ``linear_fc1`` per ``[gate_r | up_r]`` segment, other column-parallel outputs/weights along the
  output dim, ``VocabParallelEmbedding`` / ``ParallelLMHead`` weights along the vocab, ``RowParallelLinear``
  weights and inputs along the input dim and their outputs after the all-reduce (identical on every rank:
  checked bitwise, one used); any other tensor is replicated when every rank's msprobe statistics agree
  (checked bitwise on load) and else sharded along its last dim (along dim -2 for a per-head norm whose
  weight spans the last dim). A rank that disagrees on a replicated tensor makes that boundary
  ``evidence_missing`` naming the rank.
* **pipeline stages** — rank folders holding different modules are stages (:func:`join_pp`): ordered by the
  embedding (first) and the final norm / output layer (last), their layer indices offset by the layers of the
  stages before, repeated non-layer modules and API counters renumbered.
* **which tokens** (:func:`select_tokens`) — by token ids: a padded training batch ``[B, S_pad]`` (the row and
  the window holding the other side's ids: left or right padding stripped), a prefix-cache hit (the training
  rows at the inference prefill's positions), a batched rollout (the request's rows of the concatenated
  batch) and (in :mod:`tilake.diagnosis.steps`) a chunked prefill over consecutive msprobe steps
  (:func:`join_chunks`).

No parallel metadata is in msprobe's dump.json (26.2: ``task``, ``level``, ``framework``, ``dump_data_dir``
only; source: shared/reference/msprobe-format.md §3, checked on real TP=2 dumps written by
``mindstudio-probe`` 26.2 with gloo), so TP/PP come from the folders, the module classes and the shapes.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from tilake.diagnosis.canonical_parallel import LAYER_RE, join_pp, merge_tp  # noqa: F401
from tilake.diagnosis.canonical_tokens import find_positions, join_chunks, select_rows, select_tokens  # noqa: F401
from tilake.diagnosis.logical import LogicalSide, NotMergeable, Record, records_of  # noqa: F401
from tilake.errors import TilakeError
from tilake.ingest.msprobe.reader import DumpSide

RANK_RE = re.compile(r"^rank(\d+)$")


# ------------------------------------------------------------------------------ folders
def step_groups(path: Path) -> List[Tuple[str, List[Path]]]:
    """``[(step label, [rank folders])]`` of a dump path (root, step folder or rank folder), by step number.

    Several ``proc*`` folders of one step (a re-run without torch.distributed) stay ambiguous; several
    ``rank*`` folders are one model (TP ranks and/or PP stages, merged by :func:`open_step`).

    Raises:
        TilakeError: as :func:`tilake.ingest.msprobe.reader.locate_rank_dirs` for a missing path or no
            dump.json; ``proc*`` re-runs; rank folders that are not numbered 0..N-1; steps with differing
            rank sets (one line naming the step).
    """
    from tilake.ingest.msprobe.reader import locate_rank_dirs

    path = Path(path)
    if not path.is_dir() or (path / "dump.json").is_file():
        return [(path.name, locate_rank_dirs(path))]
    steps = [path] if re.match(r"^step\d+$", path.name) else sorted(
        (d for d in path.iterdir() if d.is_dir() and re.match(r"^step\d+$", d.name)), key=lambda d: int(d.name[4:]))
    out = []
    rank_sets = {}
    for s in steps:
        rd = sorted((d for d in s.iterdir() if d.is_dir() and re.match(r"^(rank\d*|proc\d+)$", d.name)
                     and (d / "dump.json").is_file()), key=lambda d: (len(d.name), d.name))
        if len(rd) > 1 and any(not RANK_RE.match(d.name) for d in rd):
            names = ", ".join(d.name for d in rd)
            raise TilakeError(f"{len(rd)} rank/proc folders in one step ({names}): ambiguous (proc* folders are "
                              "separate runs, not ranks of one model)", path=s,
                              hint="pass the one folder to analyse, e.g. " + str(rd[0]))
        if len(rd) > 1:
            nums = [int(RANK_RE.match(d.name).group(1)) for d in rd]
            gaps = sorted(set(range(max(nums) + 1)) - set(nums))
            if gaps:
                raise TilakeError(f"rank folder(s) {', '.join(f'rank{g}' for g in gaps)} missing: this step holds "
                                  f"{', '.join(d.name for d in rd)} (a model split over ranks needs every rank)", path=s)
        if rd:
            rank_sets[s.name] = tuple(d.name for d in rd)
            out.append((s.name, rd))
    multi = {k: v for k, v in rank_sets.items() if len(v) > 1}
    if multi and len(set(rank_sets.values())) > 1:
        ref = max(rank_sets.values(), key=len)
        bad = next(k for k, v in rank_sets.items() if v != ref)
        raise TilakeError(f"steps hold different ranks: {bad} has {', '.join(rank_sets[bad])}, others "
                          f"{', '.join(ref)} (mismatched steps: one model per step needs the same ranks)", path=path / bad)
    if not out:
        return [(path.name, locate_rank_dirs(path))]
    return out


def open_step(dirs: Sequence[Path], side: str, layer_pattern: Optional[str] = None):
    """One step's folders as one side: a :class:`DumpSide` for one folder, else TP-merged / PP-joined.

    Raises:
        TilakeError: unreadable dump.json of any rank; ranks whose module sets do not form equal TP
            groups per stage.
    """
    if len(dirs) == 1:
        return DumpSide(dirs[0], side)
    ranks = [DumpSide(d, side) for d in dirs]
    groups: Dict[frozenset, List[DumpSide]] = {}
    for r in ranks:
        groups.setdefault(_signature(r), []).append(r)
    stages = list(groups.values())
    sizes = {len(g) for g in stages}
    if len(sizes) != 1:
        stages = _split_alike_stages(stages, side, dirs)
    merged = [merge_tp(g, side) if len(g) > 1 else g[0] for g in stages]
    if len(merged) == 1:
        return merged[0]
    return join_pp(merged, side, layer_pattern)


def _split_alike_stages(stages: List[List[DumpSide]], side: str, dirs: Sequence[Path]) -> List[List[DumpSide]]:
    """Pipeline stages that dump the same module names (one layer per stage: every middle stage names its
    layer ``layers.0``) split out of a group that only *looks* like one TP group.

    The TP degree is uniform across stages, so it is the smallest group's size ``t``; a group of ``k·t`` alike
    ranks is ``k`` stages of ``t`` ranks each, in rank order (Megatron numbers pipeline stages by rank). Names
    never decide the order; the ranks' send/recv calls (msprobe ``Distributed.isend/irecv/send/recv``), when
    dumped, confirm them as stages (:func:`tilake.diagnosis.canonical_parallel.join_pp` says how many).

    Raises:
        TilakeError: group sizes that are not multiples of the smallest (not a TP×PP layout).
    """
    t = min(len(g) for g in stages)
    out: List[List[DumpSide]] = []
    for g in stages:
        if len(g) % t:
            raise TilakeError(f"{side}: {sum(len(x) for x in stages)} ranks form stages of different sizes "
                              f"({', '.join(str(len(x)) for x in stages)} ranks): not a TP×PP layout",
                              path=dirs[0].parent)
        ranked = sorted(g, key=lambda r: r.rank or 0)
        out.extend(ranked[i:i + t] for i in range(0, len(ranked), t))
    return out


def _signature(d: DumpSide) -> frozenset:
    return frozenset(e for e in d.entries if e.startswith("Module."))


def shape_transform(a, b) -> str:
    """The transform that would make shapes ``a`` and ``b`` comparable (text)."""
    if not a or not b:
        return "the boundary map's transforms for this layout"
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if len(diff) == 1:
            i = diff[0]
            hi, lo = max(a[i], b[i]), min(a[i], b[i])
            if lo and hi % lo == 0:
                return (f"dim {i} differs by a factor {hi // lo}: a TP shard (pass the step folder holding every rank*) "
                        "or a fused / padded tensor (slice, unpad or select the request's rows)")
            return f"dim {i} differs ({a[i]} vs {b[i]}): select the same tokens / rows on both sides"
    import math
    if math.prod(a) == math.prod(b):
        return "same number of elements: a reshape / permute in the boundary map"
    return "the boundary map's transforms for this layout (fused slices, unpad, row selection)"
