# Shared by e2e/verl_cpu.sh and e2e/verl_cpu_dumps.sh (sourced, not run): the paths, the verl-cpu venv and assets,
# the user's writable copy of run_grpo.sh, and the sampler of the machine's peak used memory.
#
#   e2e_prepare PREFIX     sets ROOT SHARED TILAKE VC PY WORK (mktemp -d -t PREFIX-XXXXXX unless E2E_WORK), runs
#                          ../shared/verl-cpu/setup.sh (idempotent), copies run_grpo.sh to $WORK/user (and
#                          $WORK/original.sh), exports VERLCPU_PLUGIN / VERLCPU_RUNS; exits 2 on a missing input
#   e2e_sample_memory      starts sampling MemTotal - MemAvailable every 2 s into $PEAK (kB); sets SAMPLER, base_kb
#                          and an EXIT trap that stops the sampler

e2e_prepare() {
    ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    SHARED=${SHARED:-$ROOT/../shared}
    TILAKE=${TILAKE:-tilake}
    VC="$SHARED/verl-cpu"
    [ -f "$VC/run_grpo.sh" ] || { echo "error: $VC/run_grpo.sh not found (set SHARED to the shared folder)" >&2; exit 2; }
    command -v "$TILAKE" >/dev/null || { echo "error: $TILAKE not on PATH (set TILAKE)" >&2; exit 2; }
    PY=${TILAKE_PYTHON:-$(dirname "$(command -v "$TILAKE")")/python}
    [ -x "$PY" ] || PY=python3
    WORK=${E2E_WORK:-$(mktemp -d -t "$1-XXXXXX")}
    mkdir -p "$WORK"
    echo "e2e: work folder $WORK"

    # the verl-cpu venv and assets (idempotent: a finished venv is reused)
    local t0
    t0=$(date +%s)
    "$VC/setup.sh"
    echo "e2e: setup $(( $(date +%s) - t0 )) s"

    # the user's launch script: a writable copy of run_grpo.sh (the shared folder is read-only)
    rm -rf "$WORK/user" "$WORK/lake" "$WORK/report"
    mkdir -p "$WORK/user" "$WORK/report"
    cp "$VC/run_grpo.sh" "$WORK/user/run_grpo.sh"
    chmod u+w "$WORK/user/run_grpo.sh"
    cp "$WORK/user/run_grpo.sh" "$WORK/original.sh"
    export VERLCPU_PLUGIN="$VC/plugin"
    export VERLCPU_RUNS="$WORK/runs"
}

e2e_sample_memory() {
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
}

# e2e_scan [ARGS]   runs `tilake scan --profiler torch ARGS` on $WORK/user/run_grpo.sh (lake, report, JSON into
#                   $WORK), stops the sampler, sets `wall` (s); exits 1 with the console's tail when the scan fails;
#                   then a second `--dry-run` scan with the same ARGS into $WORK/rescan.json (idempotency)
e2e_scan() {
    local t1 rc
    t1=$(date +%s)
    set +e
    "$TILAKE" scan --profiler torch --allow-preamble "$@" --lake "$WORK/lake" --out "$WORK/report" --lang en --format json \
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
    "$TILAKE" scan --profiler torch --allow-preamble "$@" --dry-run --lake "$WORK/lake" --format json "$WORK/user/run_grpo.sh" \
        > "$WORK/rescan.json" 2> "$WORK/rescan.console"
}
