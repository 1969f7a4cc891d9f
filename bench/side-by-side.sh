#!/usr/bin/env bash
# Side-by-side speed of pocketperf and the llama.cpp peer (bench/llamacpp-peer.sh) on the same
# model, thread count and token counts. Runs alternate A B A B (A = llama-bench, B =
# `pocketperf bench`), one repetition each, so that drifting machine load hits both alike;
# the ratio B/A is taken per pair and the median ratio reported with the medians and
# min–max of each side.
#
#   bench/side-by-side.sh [--pairs N] [--threads "1 2"] [--tests "pp512 tg128 tg128@d4096"]
#                         [--model PATH] [--out DIR]
#
# Writes DIR/runs.csv (every run, with the 1-minute load average when it started) and
# DIR/summary.md (the table for docs/PERFORMANCE.md), and prints the summary. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=5
threads="1 2"
tests="pp512 tg128"
model=""
out="results/side-by-side-$(date -u +%Y%m%dT%H%M%SZ)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pairs) pairs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "side-by-side: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ "$pairs" -lt 1 ]]; then
  echo "side-by-side: --pairs must be at least 1" >&2
  exit 2
fi

peer=$(bench/llamacpp-peer.sh)
pp=target/release/pocketperf
if [[ ! -x "$pp" ]]; then
  cargo build --release -q -p pocketperf
fi
if [[ -z "$model" ]]; then
  model=$("$pp" model fetch 2>/dev/null | tail -n 1)
fi
if [[ ! -f "$model" ]]; then
  echo "side-by-side: model not found: $model" >&2
  exit 2
fi
mkdir -p "$out"
csv="$out/runs.csv"
echo "pair,test,threads,runtime,tokens_per_s,load1" > "$csv"

load1() { cut -d' ' -f1 /proc/loadavg; }

for t in $threads; do
  for test in $tests; do
    # ppN or tgN, optionally @dD: the test runs on top of a KV cache already holding D tokens
    # (llama-bench -d, pocketperf bench --depth).
    base="${test%@d*}"; depth=0
    [[ "$test" == *@d* ]] && depth="${test##*@d}"
    case "$base" in
      pp*) n="${base#pp}"; lp=(-p "$n" -n 0); pk=(--pp "$n" --tg 0) ;;
      tg*) n="${base#tg}"; lp=(-p 0 -n "$n"); pk=(--pp 0 --tg "$n") ;;
      *) echo "side-by-side: unknown test $test (ppN or tgN, optionally @dD)" >&2; exit 2 ;;
    esac
    lp+=(-d "$depth"); pk+=(--depth "$depth")
    for i in $(seq 1 "$pairs"); do
      l=$(load1)
      a=$("$peer" -m "$model" -t "$t" "${lp[@]}" -r 1 -o json 2>/dev/null | jq '.[0].avg_ts')
      echo "$i,$test,$t,llama.cpp,$a,$l" >> "$csv"
      l=$(load1)
      b=$("$pp" bench --model "$model" --threads "$t" "${pk[@]}" --batch 0 --probe-mib 0 \
        --reps 1 --json 2>/dev/null | jq '.rows[0].tokens_per_s_median')
      echo "$i,$test,$t,pocketperf,$b,$l" >> "$csv"
      echo "side-by-side: $test t=$t pair $i: llama.cpp $a, pocketperf $b tok/s (load $l)" >&2
    done
  done
done

python3 - "$csv" "$out/summary.md" "$model" "$peer" "$pairs" <<'PY'
import csv, statistics, sys, subprocess
path, md, model, peer, pairs = sys.argv[1:6]
rows = list(csv.DictReader(open(path)))
keys = []
for r in rows:
    k = (r["test"], int(r["threads"]))
    if k not in keys:
        keys.append(k)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
out = [
    f"pocketperf {commit} vs llama.cpp ({peer}), model {model}, {pairs} alternated pairs per row",
    "",
    "| test | threads | llama.cpp t/s median (min–max) | pocketperf t/s median (min–max) | ratio median (min–max) | load avg during row |",
    "|---|---|---|---|---|---|",
]
for test, t in keys:
    sel = [r for r in rows if r["test"] == test and int(r["threads"]) == t]
    a = {int(r["pair"]): float(r["tokens_per_s"]) for r in sel if r["runtime"] == "llama.cpp"}
    b = {int(r["pair"]): float(r["tokens_per_s"]) for r in sel if r["runtime"] == "pocketperf"}
    ratios = [b[i] / a[i] for i in sorted(a) if i in b and a[i] > 0]
    loads = [float(r["load1"]) for r in sel]
    fmt = lambda v: f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})"
    out.append(
        f"| {test} | {t} | {fmt(list(a.values()))} | {fmt(list(b.values()))} | "
        f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) | "
        f"{min(loads):.1f}–{max(loads):.1f} |"
    )
open(md, "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
