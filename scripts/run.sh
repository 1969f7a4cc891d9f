#!/usr/bin/env bash
# The main job: set-up, then a quick benchmark of the reference model. Results land in
# results/ (JSON with provenance) and on the terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p results
./target/release/pocketperf bench --threads 1,2 --reps 3 --out results/bench.json
