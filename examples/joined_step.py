"""Second example (docs/alignment.md): a profile and a dump of one synthetic step in one run, joined.

Usage (from a checkout; needs PyTorch for the dump writer in tests/fixtures)::

    python examples/joined_step.py --out /tmp/joined

1. ``tilake.synth`` writes a verl ``profiler_output/`` of the reference job shrunk to 4 layers (real
   torch_npu DB schema, synthetic kernels), ingested as run ``joined-step`` with step 0 and model id
   ``Qwen/Qwen3-0.6B`` (ingest → dbt build → kernel alignment → report).
2. ``tests/fixtures/msprobe_writer.py`` writes an msprobe dump pair (``step0/rank0``) of a tiny Qwen3:
   HF-style training forward with eager attention vs vLLM-style inference with SDPA, so the first
   divergence is ``L0.attn_core.out``; ``dumps analyze`` writes it into the same lake and run id
   (task card model ``Qwen/Qwen3-0.6B``).
3. The operator diff report is written again: its "Profile ⋈ dump" section joins the two halves.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "fixtures"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    from msprobe_writer import Cfg, dump_infer, dump_train

    from tilake.lake.store import Lake
    from tilake.pipeline.dumps import run_analyze
    from tilake.pipeline.example import EXAMPLE_META
    from tilake.pipeline.profile import report_command, run_profile
    from tilake.synth.layout import make_profiler_output
    from tilake.synth.population import JobConfig

    out = a.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rid = "joined-step"
    job = JobConfig(layers=4, train_batch_size=1, rollout_n=1, infer_steps=1)
    make_profiler_output(out / "profiler_output", seed=0, job=job)
    lake = Lake(out / "lake")
    meta = dict(EXAMPLE_META, step=0, rl_config={"num_layers": 4})
    run_profile(out / "profiler_output", lake, rid, out / "report", run_meta=meta, lang="en", progress=False)
    cfg = Cfg(train_attn="eager")
    tr, inf = dump_train(cfg, out / "dumps" / "train"), dump_infer(cfg, out / "dumps" / "infer")
    run_analyze(tr, inf, out / "dump_report", card={"model": "Qwen/Qwen3-0.6B"}, lake_path=lake.root, run_id=rid,
                build=True, charts=False, show_progress=False)
    rep = report_command(lake, rid, out / "report", lang="en")
    print(f"report: {rep['report']}")
    print(f"html:   {rep['html']}")
    print(f"lake:   {lake.root}  (tilake sql --lake {lake.root} \"select * from fct_boundary_kernels\")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
