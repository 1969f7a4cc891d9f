#!/usr/bin/env bash
# Side-by-side speed of pocketperf and the llama.cpp peer (bench/llamacpp-peer.sh) on the same
# model, thread counts and token counts. Each pair runs the whole sweep once in llama-bench
# (A) and once in `pocketperf bench` (B), alternated A B A B with one repetition each, so
# that drifting machine load hits both alike; the ratio B/A is taken per pair and test and
# the median ratio reported with the medians and min–max of each side.
#
#   bench/side-by-side.sh [--pairs N] [--threads "1 2"] [--tests "pp512 tg128 tg128@d4096"]
#                         [--pp 512,1024] [--tg 128] [--depth 0,4096]
#                         [--model PATH] [--out DIR] [--kv-type q8_0]
#
# The sweep is the cross product of --pp, --tg, --depth and --threads (comma or space
# separated), passed as lists to both sides: llama-bench -p, -n, -d, -t and pocketperf bench
# --pp, --tg, --depth, --threads (with --batch 0: llama-bench has no test of several sequences
# decoded together). --tests names tests instead (ppN or tgN, optionally @dD, on top of a KV
# cache holding D tokens): their lengths and depths make the lists, and only the named tests
# are kept. Default: --tests "pp512 tg128".
#
# --kv-type q8_0 caches K and V as Q8_0 on both sides: pocketperf bench --kv-type q8_0 and
# llama-bench -ctk q8_0 -ctv q8_0 -fa 1 (llama.cpp quantizes V only with flash attention).
# Default f16: neither side is given a cache flag.
#
# Writes DIR/runs.csv (every test of every run, with the 1-minute load average when the run
# started), DIR/pocketperf-commit (the build measured, from the binary's own result header)
# and DIR/summary.md (the table for docs/PERFORMANCE.md), and prints the summary.
# Needs jq. POCKETPERF_BIN names the pocketperf binary (default: target/release/pocketperf,
# built when missing). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=5
threads="1 2"
tests=""
pp_list=""
tg_list=""
depth_list=""
model=""
kv_type="f16"
out="results/side-by-side-$(date -u +%Y%m%dT%H%M%SZ)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pairs) pairs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    --pp) pp_list="$2"; shift 2 ;;
    --tg) tg_list="$2"; shift 2 ;;
    --depth) depth_list="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --kv-type) kv_type="$2"; shift 2 ;;
    *) echo "side-by-side: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ "$pairs" -lt 1 ]]; then
  echo "side-by-side: --pairs must be at least 1" >&2
  exit 2
fi
if [[ -n "$tests" && -n "$pp_list$tg_list$depth_list" ]]; then
  echo "side-by-side: give --tests or --pp/--tg/--depth, not both" >&2
  exit 2
fi
if [[ -z "$tests" && -z "$pp_list$tg_list$depth_list" ]]; then
  tests="pp512 tg128"
fi

# "a b,c" -> "a,b,c"
commas() { echo "$*" | tr -s ' ,' ',' | sed 's/^,//; s/,$//'; }
# Adds $2 to the comma list named $1 unless it is there.
add_once() {
  local -n list=$1
  [[ ",$list," == *",$2,"* ]] || list="${list:+$list,}$2"
}

if [[ -n "$tests" ]]; then
  for test in $tests; do
    # ppN or tgN, optionally @dD.
    base="${test%@d*}"; depth=0
    [[ "$test" == *@d* ]] && depth="${test##*@d}"
    case "$base" in
      pp[0-9]*) add_once pp_list "${base#pp}" ;;
      tg[0-9]*) add_once tg_list "${base#tg}" ;;
      *) echo "side-by-side: unknown test $test (ppN or tgN, optionally @dD)" >&2; exit 2 ;;
    esac
    [[ "$depth" =~ ^[0-9]+$ ]] || { echo "side-by-side: bad depth in $test" >&2; exit 2; }
    add_once depth_list "$depth"
  done
fi
pp_list=$(commas "${pp_list:-0}")
tg_list=$(commas "${tg_list:-0}")
depth_list=$(commas "${depth_list:-0}")
t_list=$(commas "$threads")
for v in ${pp_list//,/ } ${tg_list//,/ } ${depth_list//,/ } ${t_list//,/ }; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "side-by-side: $v is not a whole number" >&2; exit 2; }
done

peer=$(bench/llamacpp-peer.sh)
pp="${POCKETPERF_BIN:-target/release/pocketperf}"
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
case "$kv_type" in
  f16) peer_kv=() ;;
  q8_0) peer_kv=(-ctk q8_0 -ctv q8_0 -fa 1) ;;
  *) echo "side-by-side: --kv-type must be f16 or q8_0, not $kv_type" >&2; exit 2 ;;
esac
mkdir -p "$out"
csv="$out/runs.csv"
echo "pair,test,threads,runtime,tokens_per_s,load1" > "$csv"

load1() { cut -d' ' -f1 /proc/loadavg; }
# Keeps the "test,threads,tokens/s" lines of the named tests (all without --tests).
wanted() {
  if [[ -z "$tests" ]]; then
    cat
  else
    local line
    while IFS= read -r line; do
      if [[ " $tests " == *" ${line%%,*} "* ]]; then echo "$line"; fi
    done
  fi
}

echo "side-by-side: sweep -p $pp_list -n $tg_list -d $depth_list -t $t_list, $pairs pairs" >&2
for i in $(seq 1 "$pairs"); do
  l=$(load1)
  # llama-bench -o json: an array of tests with n_prompt, n_gen, n_depth, n_threads, avg_ts
  # (one repetition, so avg_ts is the sample).
  "$peer" -m "$model" -p "$pp_list" -n "$tg_list" -d "$depth_list" -t "$t_list" -r 1 -o json \
    "${peer_kv[@]}" \
    2>/dev/null \
    | jq -r '.[] | "\(if .n_prompt > 0 then "pp\(.n_prompt)" else "tg\(.n_gen)" end)\(if .n_depth > 0 then "@d\(.n_depth)" else "" end),\(.n_threads),\(.avg_ts)"' \
    | wanted | sed "s/^/$i,/; s/,\([^,]*\)$/,llama.cpp,\1,$l/" >> "$csv"
  l=$(load1)
  # pocketperf bench --output jsonl: a header line, then one row per line (test, threads,
  # tokens_per_s_median).
  rows=$("$pp" bench --model "$model" --threads "$t_list" --pp "$pp_list" --tg "$tg_list" \
    --depth "$depth_list" --batch 0 --probe-mib 0 --reps 1 --kv-type "$kv_type" --output jsonl \
    2>/dev/null)
  # The build measured, as the binary itself reports it (POCKETPERF_BIN may be another
  # build than this checkout's).
  echo "$rows" | head -n 1 | jq -r '.header.git_commit' > "$out/pocketperf-commit"
  echo "$rows" | tail -n +2 | jq -r '"\(.test),\(.threads),\(.tokens_per_s_median)"' \
    | wanted | sed "s/^/$i,/; s/,\([^,]*\)$/,pocketperf,\1,$l/" >> "$csv"
  echo "side-by-side: pair $i done (load $l)" >&2
done

python3 - "$csv" "$out/summary.md" "$model" "$peer" "$pairs" "$out/pocketperf-commit" "$kv_type" <<'PY'
import csv, statistics, sys
path, md, model, peer, pairs, commit_file, kv_type = sys.argv[1:8]
rows = list(csv.DictReader(open(path)))
keys = []
for r in rows:
    k = (r["test"], int(r["threads"]))
    if k not in keys:
        keys.append(k)
commit = open(commit_file).read().strip()
out = [
    f"pocketperf {commit} vs llama.cpp ({peer}), model {model}, KV cache {kv_type}, {pairs} alternated pairs per row",
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
