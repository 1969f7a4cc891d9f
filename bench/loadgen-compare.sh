#!/usr/bin/env bash
# Scenario-engine overhead beside MLPerf LoadGen's Python bindings, one after the other on
# this machine, with the same null SUT settings:
#   1. SingleStream: min_query_count and min_duration as below; queries/s as LoadGen reports
#      it ("QPS w/ loadgen overhead"), latency added per query (mean, p99).
#   2. Offline: one batch of OFFLINE_SAMPLES samples; peak resident memory over the run.
# Prints one JSON object per run and a Markdown table for docs/PERFORMANCE.md.
# Needs: a release build of pocketperf (cargo build --release -p pocketperf) and
# `pip install mlcommons-loadgen`.
set -euo pipefail
cd "$(dirname "$0")/.."

SS_MIN_QUERIES="${SS_MIN_QUERIES:-100000}"
SS_MIN_DURATION_MS="${SS_MIN_DURATION_MS:-1000}"
OFFLINE_SAMPLES="${OFFLINE_SAMPLES:-10000000}"
LG_OFFLINE_SAMPLES="${LG_OFFLINE_SAMPLES:-1000000}"
BIN="${POCKETPERF_BIN:-target/release/pocketperf}"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"

[ -x "$BIN" ] || { echo "build first: cargo build --release -p pocketperf" >&2; exit 2; }
python3 -c 'import mlperf_loadgen' 2>/dev/null \
  || { echo "install LoadGen first: pip install mlcommons-loadgen" >&2; exit 2; }

echo "# machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# pocketperf $("$BIN" --version | cut -d' ' -f2) (checkout at $(git rev-parse --short HEAD 2>/dev/null || echo unknown); the JSON below names the commit the binary was built from)"
echo "# loadgen $(python3 -c 'from importlib.metadata import version; print(version("mlcommons-loadgen"))')"

run() { echo "## $1" >&2; shift; "$@"; }

run "pocketperf SingleStream" "$BIN" scenario-bench --scenario single-stream \
  --min-queries "$SS_MIN_QUERIES" --min-duration-ms "$SS_MIN_DURATION_MS" \
  --out "$OUT/pp-ss" --json > "$OUT/pp-ss.json"
run "LoadGen SingleStream" python3 bench/loadgen-null-sut.py --scenario single-stream \
  --min-queries "$SS_MIN_QUERIES" --min-duration-ms "$SS_MIN_DURATION_MS" \
  --out "$OUT/lg-ss" > "$OUT/lg-ss.json"
run "pocketperf Offline" "$BIN" scenario-bench --scenario offline \
  --min-queries "$OFFLINE_SAMPLES" --json > "$OUT/pp-off.json"
run "LoadGen Offline" python3 bench/loadgen-null-sut.py --scenario offline \
  --min-queries "$LG_OFFLINE_SAMPLES" --out "$OUT/lg-off" > "$OUT/lg-off.json"

cat "$OUT"/pp-ss.json "$OUT"/lg-ss.json "$OUT"/pp-off.json "$OUT"/lg-off.json

python3 - "$OUT" <<'PY'
import json, sys, os
d = sys.argv[1]
j = {k: json.load(open(os.path.join(d, k + ".json"))) for k in ["pp-ss", "lg-ss", "pp-off", "lg-off"]}
def f(x, fmt="{:,.0f}"):
    return "n/a" if x is None else fmt.format(x)
print()
print("| run | queries | queries/s | ns per query | added latency mean / p99 (ns) | peak RSS growth | bytes per sample |")
print("|---|---|---|---|---|---|---|")
for k, name in [("pp-ss", "pocketperf SingleStream"), ("lg-ss", "LoadGen (Python) SingleStream"),
                ("pp-off", "pocketperf Offline"), ("lg-off", "LoadGen (Python) Offline")]:
    r = j[k]
    g = r.get("peak_growth_bytes")
    print(f"| {name} | {f(r['queries'])} | {f(r['queries_per_s'])} | {f(r['overhead_ns_per_query'], '{:,.1f}')} "
          f"| {f(r['latency_mean_ns'])} / {f(r['latency_p99_ns'])} "
          f"| {f(g / 2**20 if g is not None else None, '{:,.1f} MiB')} "
          f"| {f(r.get('peak_growth_bytes_per_query'), '{:,.1f}')} |")
PY
