#!/usr/bin/env bash
# The main job: set-up, then the MLPerf-style SingleStream and Offline scenarios (quick preset)
# on the reference model, each with its report, then the kernel benchmark. Results land in
# results/<scenario>/ (result.json, MLPerf logs, tokens.csv, telemetry, report.html) and
# results/bench.json, every file with its provenance.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bin=./target/release/pocketperf
mkdir -p results
status=0
for scenario in single-stream offline; do
  "$bin" run --scenario "$scenario" --preset quick --out "results/$scenario" --force || status=$?
  "$bin" report "results/$scenario" --print none
done
"$bin" bench --threads 1,2 --reps 3 --output json --out results/bench.json
exit "$status"
