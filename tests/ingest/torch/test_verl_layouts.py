"""verl's torch-profiler capture layouts on the real traces of a verl 0.9.1 GRPO step on this CPU
(``shared/verl-cpu/traces``: one training-worker trace, one vLLM rollout trace and vLLM's
``profiler_out_0.txt``; README there). Layouts the real run does not produce (two replicas, relocated files,
two RL steps, discrete-mode stages) are the same real files copied under the names verl's code gives them
(``verl/utils/profiler/torch_profile.py`` ``build_trace_basename``, ``config.py`` ``rollout_trace_dir`` /
``relocate_rollout_traces``); each test says which.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from tilake.errors import TilakeError
from tilake.ingest.profiler.discover import discover
from tilake.ingest.torch.find import find_traces, is_summary_name, trace_name
from tilake.lake.store import Lake
from tilake.pipeline.profile import collect_captures, run_profile

TRAIN = "actor-rollout_train_step1_rank0-of-1_pid14185_20261201184328807.json.gz"
INFER = "1796150575179022847-rank-0.1796150643758034490.pt.trace.json.gz"


@pytest.fixture(scope="module")
def traces(shared_dir) -> Path:
    d = shared_dir / "verl-cpu" / "traces"
    if not (d / TRAIN).is_file():
        pytest.skip(f"real verl-cpu traces not found in {d}")
    return d


def _layout(root: Path, traces: Path, replicas=(0,), train_names=(TRAIN,)) -> Path:
    """The real run's save_path layout (verl 0.9.1): training traces flat, rollout per replica folder."""
    root.mkdir(parents=True, exist_ok=True)
    for n in train_names:
        shutil.copyfile(traces / TRAIN, root / n)
    for r in replicas:
        d = root / f"agent_loop_rollout_replica_{r}"
        d.mkdir()
        shutil.copyfile(traces / INFER, d / INFER)
        shutil.copyfile(traces / "rollout_profiler_out_0.txt", d / "profiler_out_0.txt")
    return root


def _evidence_ops(path: Path) -> int:
    """The CPU ops of a CPU-only trace that stand for kernels, counted in plain Python from the JSON (the rule of
    tilake.ingest.torch.cpu_ops: dispatcher ops outside views/allocation, autograd wrappers and compile ranges;
    the innermost computing op, with the copies/fills nested in it; a helper copy outside any computing op)."""
    from tilake.ingest.torch.cpu_ops import HELPER_OPS, NO_KERNEL_OPS

    ev = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    ops = [(e["pid"], e["tid"], round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000), e["name"])
           for e in ev]
    comp = [o for o in ops if o[4].endswith("(dynamo_timed)")]

    def candidate(o):
        p, t, a, _b, n = o
        return ("::" in n and n not in NO_KERNEL_OPS and not n.endswith(tuple(f"Backward{i}" for i in range(10)))
                and "autograd::" not in n and not any(c[0] == p and c[1] == t and c[2] <= a < c[3] for c in comp))

    cands = [o for o in ops if candidate(o)]

    def leaves(group):
        out = []
        by = {}
        for o in group:
            by.setdefault((o[0], o[1]), []).append(o)
        for lst in by.values():
            lst.sort(key=lambda o: (o[2], -o[3]))
            out += [o for i, o in enumerate(lst) if i + 1 == len(lst) or lst[i + 1][2] >= o[3]]
        return out

    compute = leaves([o for o in cands if o[4] not in HELPER_OPS])
    helpers = leaves([o for o in cands if o[4] in HELPER_OPS])
    inside = sum(1 for h in helpers if any(k[0] == h[0] and k[1] == h[1] and k[2] <= h[2] and h[3] <= k[3]
                                           for k in compute))
    return len(compute) + len(helpers) - inside


def test_names_of_verl_09_layouts():
    t = trace_name(Path(TRAIN))
    assert (t.layout, t.role, t.rank, t.world_size, t.pid, t.rl_step) == ("verl09", "actor-rollout/train", 0, 1,
                                                                         14185, 1)
    t = trace_name(Path("actor_actor-update_step2_rank3-of-8_tp1-pp0-dp1_pid7_20261201184328807_mb0-1.json.gz"))
    assert (t.role, t.rank, t.world_size, t.rl_step) == ("actor/actor-update", 3, 8, 2)
    t = trace_name(Path(INFER), ["agent_loop_rollout_replica_1", INFER])
    assert (t.layout, t.replica, t.rank, t.role) == ("verl09_rollout", 1, 0, "rollout replica 1")
    t = trace_name(Path("rollout-replica4-globalrank8_" + INFER))
    assert (t.layout, t.replica, t.global_rank) == ("relocated", 4, 8)
    assert is_summary_name("profiler_out_0.txt") and is_summary_name("rollout-replica1_profiler_out_0.txt")
    assert not is_summary_name("run.log")


def test_real_run_layout_both_sides_roles_and_summary_ignored(traces, tmp_path):
    root = _layout(tmp_path / "po", traces)
    caps = collect_captures(root)
    by = {c.side: c for c in caps}
    assert sorted(by) == ["infer", "train"] and len(caps) == 2
    assert (by["train"].role, by["train"].rl_step, by["train"].rank) == ("actor-rollout/train", 1, 0)
    assert (by["infer"].replica, by["infer"].rank_source) == (0, "replica")
    assert [p.name for p in by["infer"].ignored] == ["profiler_out_0.txt"]


def test_real_traces_ingest_both_sides_cpu_ops_and_gloo_collectives(traces, tmp_path):
    root = _layout(tmp_path / "po", traces)
    lake = Lake(tmp_path / "lake")
    # phases "all": the collectives of the whole step (the default compares the log-prob forward only)
    res = run_profile(root, lake, "verlcpu", tmp_path / "out", run_meta={"phases": "all"}, lang="en", progress=False)
    assert res.evidence == {"train": "cpu_ops", "infer": "cpu_ops"} and res.status == "ok"
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    health = con.execute("select side, kernel_count, role, reason from fct_capture_health order by side").fetchall()
    # CPU ops that stand for kernels (tilake.ingest.torch.cpu_ops), derived from the raw JSON below
    assert [(s, n) for s, n, _, _ in health] == [("infer", 1992), ("train", 4238)]
    assert (_evidence_ops(traces / INFER), _evidence_ops(traces / TRAIN)) == (1992, 4238)
    assert health[0][2] == "rollout replica 0" and "profiler_out_0.txt" in health[0][3]
    assert "not read as evidence" in health[0][3] and "role actor-rollout/train" in health[1][3]
    comm = con.execute("select op_type, calls from fct_side_ops where run_id='verlcpu' and side='train' and "
                       "category='communication' order by op_type").fetchall()
    # FSDP2 on gloo: 6 all-gathers and 4 all-reduces in the real step (gloo:all_gather / gloo:all_reduce ranges)
    assert comm == [("c10d::allgather_", 6), ("c10d::allreduce_", 4)]
    assert con.execute("select count(*) from fct_op_comparison where run_id='verlcpu'").fetchone()[0] > 0


def test_two_replicas_repeating_rank0_are_counted_per_replica(traces, tmp_path):
    # verl rollout_trace_dir: one agent_loop_rollout_replica_<r>/ per replica, each engine's rank 0
    root = _layout(tmp_path / "po", traces, replicas=(0, 1))
    lake = Lake(tmp_path / "lake")
    run_profile(root, lake, "reps", tmp_path / "out", lang="en", progress=False)
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    rows = con.execute("select rank, rank_source, role, kernel_count from fct_capture_health where side='infer' "
                       "order by rank").fetchall()
    assert rows == [(0, "replica", "rollout replica 0", 1992), (1, "replica", "rollout replica 1", 1992)]
    ranks = con.execute("select max(ranks) from fct_side_ops where run_id='reps' and side='infer'").fetchone()[0]
    assert ranks == 2


def test_relocated_replicas_keep_their_global_rank(traces, tmp_path):
    # verl relocate_rollout_traces with tp=1: rollout-replica<r>-globalrank<g>_<name> beside the training trace
    root = tmp_path / "po"
    root.mkdir()
    shutil.copyfile(traces / TRAIN, root / TRAIN)
    for r in (0, 1):
        shutil.copyfile(traces / INFER, root / f"rollout-replica{r}-globalrank{r}_{INFER}")
    shutil.copyfile(traces / INFER, root / f"rollout-replica2_{INFER}")
    caps = [c for c in collect_captures(root) if c.side == "infer"]
    assert sorted((c.replica, c.rank, c.rank_source) for c in caps) == [
        (0, 0, "global_rank"), (1, 1, "global_rank"), (2, 2, "replica")]


def test_several_rl_steps_are_listed_and_one_is_chosen(traces, tmp_path):
    # global_profiler.steps=[1,2]: one training trace per step (name ..._step<N>_...), and two rollout traces in
    # the replica folder whose names carry no step (vLLM's ms timestamp orders them)
    n2 = TRAIN.replace("step1", "step2").replace("184328807", "184428807")
    root = _layout(tmp_path / "po", traces, train_names=(TRAIN, n2))
    shutil.copyfile(traces / INFER, root / "agent_loop_rollout_replica_0" / INFER.replace("643758034490", "743758034490"))
    with pytest.raises(TilakeError, match=r"2 profiled RL steps .*step 1: 2 capture\(s\), step 2: 2 capture\(s\)"):
        collect_captures(root)
    caps = collect_captures(root, rl_step=2)
    assert sorted((c.side, c.rl_step, c.rl_step_source) for c in caps) == [("infer", 2, "order"), ("train", 2, "file_name")]
    assert "743758034490" in caps[-1].path.name or "743758034490" in caps[0].path.name
    with pytest.raises(TilakeError, match="--rl-step 3: no capture of that RL step"):
        collect_captures(root, rl_step=3)


def test_older_step_folder_layout_is_never_a_silent_duplicate(traces, tmp_path):
    # <save_path>/<step>/...: the same training rank in two step folders
    for step in (1, 2):
        d = tmp_path / "po" / str(step)
        d.mkdir(parents=True)
        shutil.copyfile(traces / TRAIN, d / "prof_rank-0.json.gz")
    with pytest.raises(TilakeError, match="2 profiled RL steps"):
        collect_captures(tmp_path / "po")
    caps = collect_captures(tmp_path / "po", rl_step=1)
    assert [(c.rl_step, c.rl_step_source, c.path.parent.name) for c in caps] == [(1, "folder", "1")]


def test_discrete_stage_traces_are_named_as_roles(traces, tmp_path):
    # discrete mode: one trace per stage, role = the stage (verl DistProfiler.annotate role, '_' written '-')
    names = [TRAIN.replace("_train_", "_actor-compute-log-prob_"), TRAIN.replace("_train_", "_actor-update_")]
    root = _layout(tmp_path / "po", traces, train_names=names)
    lake = Lake(tmp_path / "lake")
    res = run_profile(root, lake, "disc", tmp_path / "out", lang="en", progress=False)
    con = duckdb.connect(str(lake.warehouse), read_only=True)
    roles = con.execute("select rank, role from fct_capture_health where side='train' order by role").fetchall()
    assert roles == [(0, "actor-rollout/actor-compute-log-prob"), (0, "actor-rollout/actor-update")]
    report = res.report_path.read_text(encoding="utf-8")
    assert "0 (actor-rollout/actor-compute-log-prob), 0 (actor-rollout/actor-update)" in report
    assert "ranks 0, 0" not in report
    assert "rank 0 (actor-rollout/actor-update)" in report            # the evidence-sources table


def test_chrome_traces_found_by_content_whatever_their_names(traces, tmp_path):
    (tmp_path / "a").mkdir()
    shutil.copyfile(traces / TRAIN, tmp_path / "a" / "rank-3.json.gz")
    with gzip.open(traces / TRAIN) as fh:
        (tmp_path / "a" / "rank0_trace.json").write_bytes(fh.read())
    (tmp_path / "a" / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    found = sorted(p.name for p, _ in find_traces(tmp_path / "a"))
    assert found == ["rank-3.json.gz", "rank0_trace.json"]


def test_nothing_found_names_the_torch_layouts(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.json").write_text("{}")
    with pytest.raises(TilakeError) as exc:
        discover(tmp_path / "empty")
    msg = str(exc.value)
    assert "_rank<r>-of-<ws>_pid<pid>_<ts>.json.gz" in msg and "agent_loop_rollout_replica_<r>" in msg
    assert "prof_rank-<r>.json.gz" in msg and "_ascend_pt" in msg


def test_the_shared_traces_folder_as_it_is(traces, tmp_path):
    """``tilake run`` on the flat folder of real traces (the issue's new-user trial: "no train capture was
    found"): the training trace by its verl name, the rollout trace by its header (``vllm_version``)."""
    caps = collect_captures(traces)
    assert sorted((c.side, c.path.name) for c in caps) == [("infer", INFER), ("train", TRAIN)]
    infer = next(c for c in caps if c.side == "infer")
    assert infer.role.startswith("vLLM engine") and [p.name for p in infer.ignored] == ["rollout_profiler_out_0.txt"]
