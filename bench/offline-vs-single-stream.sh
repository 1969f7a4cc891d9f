#!/usr/bin/env bash
# Offline against SingleStream on one machine in one run: N alternated pairs, each a
# SingleStream run and then an Offline run of the same binary, model, preset and thread
# count, back to back, so drifting machine load hits both alike. The ratio Offline /
# SingleStream (generated tokens per second) is taken per pair and its median reported,
# with each pair's Offline inter-token latency p50, p99 and p99 / p50, and SingleStream's
# prompts' share of its time (the sum of its TTFTs over the sum of its latencies).
#
#   bench/offline-vs-single-stream.sh [--pairs 3] [--threads 2] [--preset quick|full]
#       [--offline-qps 20] [--offline-batch S] [--prefill-chunk C] [--prefix-reuse on|off]
#       [--model PATH] [--estimate] [--out DIR]
#
# --offline-qps sizes Offline's query (docs/SCENARIOS.md): a machine that finishes the
# preset's 64 samples inside the minimum duration needs a higher rate to stay VALID.
# --offline-batch and --prefill-chunk are passed to the Offline runs only, --prefix-reuse to
# both (default off). --estimate runs
# `pocketperf bench --pp 0 --tg 128 --batch S` once (S: the Offline batch, default 8) for B,
# how many times faster S sequences decode together than one, and prints the estimate
# 1 / (f + (1 − f) / B) of the ratio: what it would be if a prompt cost Offline what it costs
# SingleStream and only the decode were shared (f: the median prompts' share). Measured
# pairs can beat it: in Offline's passes prompt rows share the weight reads with decode
# rows (docs/PERFORMANCE.md).
#
# Writes DIR/ss-i and DIR/off-i (each run's own outputs), DIR/pairs.csv and DIR/summary.md,
# and prints the summary. Exits 2 if a run ends in an error; an INVALID run is kept and
# marked in the table. POCKETPERF_BIN names the binary (default: target/release/pocketperf,
# built when missing). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=3
threads=2
preset=quick
qps=20
batch=""
chunk=""
reuse=off
model=""
estimate=0
out="results/offline-vs-single-stream-$(date -u +%Y%m%dT%H%M%SZ)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pairs) pairs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --preset) preset="$2"; shift 2 ;;
    --offline-qps) qps="$2"; shift 2 ;;
    --offline-batch) batch="$2"; shift 2 ;;
    --prefill-chunk) chunk="$2"; shift 2 ;;
    --prefix-reuse) reuse="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --estimate) estimate=1; shift ;;
    --out) out="$2"; shift 2 ;;
    *) echo "offline-vs-single-stream: unknown argument $1" >&2; exit 2 ;;
  esac
done
if ! [[ "$pairs" =~ ^[1-9][0-9]*$ ]]; then
  echo "offline-vs-single-stream: --pairs must be a whole number of at least 1, not '$pairs'" >&2
  exit 2
fi
if [[ -e "$out" ]]; then
  echo "offline-vs-single-stream: $out already exists; give --out a new directory" >&2
  exit 2
fi
bin="${POCKETPERF_BIN:-target/release/pocketperf}"
if [[ ! -x "$bin" ]]; then
  cargo build --release -q -p pocketperf
fi
common=(--preset "$preset" --threads "$threads" --prefix-reuse "$reuse")
[[ -n "$model" ]] && common+=(--model "$model")
offline=(--offline-qps "$qps")
[[ -n "$batch" ]] && offline+=(--offline-batch "$batch")
[[ -n "$chunk" ]] && offline+=(--prefill-chunk "$chunk")
mkdir -p "$out"

# One run; exit 0 (VALID) and 1 (INVALID) are kept, anything else stops the series.
run() {
  local dir="$1"; shift
  local rc=0
  "$bin" run "$@" --out "$dir" > "$dir.log" 2>&1 || rc=$?
  if [[ $rc -ne 0 && $rc -ne 1 ]]; then
    echo "offline-vs-single-stream: \`$bin run $* --out $dir\` exited $rc; its output is in $dir.log" >&2
    tail -n 5 "$dir.log" >&2
    exit 2
  fi
  grep -E "VALID|INVALID" "$dir.log" | head -n 1
}

for i in $(seq 1 "$pairs"); do
  echo "pair $i of $pairs ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
  run "$out/ss-$i" --scenario single-stream "${common[@]}"
  run "$out/off-$i" --scenario offline "${common[@]}" "${offline[@]}"
done

bench_json=""
if [[ $estimate -eq 1 ]]; then
  bench_args=(bench --threads "$threads" --pp 0 --tg 128 --reps 3 --batch "${batch:-8}" --probe-mib 0 --output json)
  [[ -n "$model" ]] && bench_args+=(--model "$model")
  bench_json="$out/bench.json"
  "$bin" "${bench_args[@]}" --out "$bench_json" > "$out/bench.log" 2>&1 || {
    echo "offline-vs-single-stream: \`$bin ${bench_args[*]}\` failed; its output is in $out/bench.log" >&2
    exit 2
  }
fi

python3 - "$out" "$pairs" "$bench_json" "${batch:-8}" <<'PY'
import csv, json, os, statistics, sys

out, pairs, bench_json, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])

def load(d):
    path = os.path.join(out, d, "result.json")
    try:
        with open(path) as f:
            r = json.load(f)
        return r, r["performance"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"offline-vs-single-stream: {path}: {e}")

rows = []
for i in range(1, pairs + 1):
    ssr, ss = load(f"ss-{i}")
    _, off = load(f"off-{i}")
    q = ss["per_query"]
    lat = sum(x["latency_ms"] for x in q)
    share = sum(x.get("ttft_ms") or 0.0 for x in q) / lat if lat > 0 else float("nan")
    itl = off.get("itl_ms") or {}
    p50, p99 = itl.get("p50", float("nan")), itl.get("p99", float("nan"))
    rows.append({
        "pair": i,
        "single_stream_tokens_per_s": ss["tokens_per_s"],
        "single_stream_valid": ss["valid"],
        "prompts_share": share,
        "offline_tokens_per_s": off["tokens_per_s"],
        "offline_valid": off["valid"],
        "offline_queries": off["queries"],
        "ratio": off["tokens_per_s"] / ss["tokens_per_s"] if ss["tokens_per_s"] > 0 else float("nan"),
        "offline_itl_p50_ms": p50,
        "offline_itl_p99_ms": p99,
        "itl_p99_over_p50": p99 / p50 if p50 > 0 else float("nan"),
    })
    meta = ssr["meta"]

with open(os.path.join(out, "pairs.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)

def mark(v, ok):
    return f"{v:.1f}" if ok else f"{v:.1f} (INVALID)"

ratios = [r["ratio"] for r in rows]
tails = [r["itl_p99_over_p50"] for r in rows]
share = statistics.median(r["prompts_share"] for r in rows)
def reuse_text(m):
    p = (((m.get("settings") or {}).get("sut") or {}).get("decoder") or {}).get("prefix_reuse") or {}
    if not p.get("on"):
        return "off"
    return f"on (SingleStream pair {pairs}: {p.get('reused_tokens')} of {p.get('prompt_tokens')} prompt tokens from the cache)"

model = meta.get("model") or {}
device = meta.get("device") or {}
lines = [
    f"Offline against SingleStream: {meta.get('tool', '?')} {meta.get('tool_version', '?')} at "
    f"commit {meta.get('git_commit', '?')}, model {model.get('name', '?')} "
    f"(sha256 {str(model.get('sha256', '?'))[:12]}), device {device.get('name', '?')} "
    f"({device.get('cpu', '?')}, {device.get('os', '?')}), {meta.get('threads', '?')} threads, "
    f"{pairs} alternated pairs, prefix reuse {reuse_text(meta)}.",
    "",
    "| pair | SingleStream tokens/s | its prompts' share | Offline tokens/s | Offline / SingleStream | Offline ITL p50 / p99 | p99 / p50 |",
    "|---|---|---|---|---|---|---|",
]
for r in rows:
    lines.append(
        f"| {r['pair']} | {mark(r['single_stream_tokens_per_s'], r['single_stream_valid'])} | "
        f"{100 * r['prompts_share']:.1f}% | {mark(r['offline_tokens_per_s'], r['offline_valid'])} | "
        f"{r['ratio']:.2f}× | {r['offline_itl_p50_ms']:.1f} / {r['offline_itl_p99_ms']:.1f} ms | "
        f"{r['itl_p99_over_p50']:.2f}× |"
    )
lines += [
    "",
    f"Median Offline / SingleStream **{statistics.median(ratios):.2f}×** (min {min(ratios):.2f}, "
    f"max {max(ratios):.2f}); median Offline ITL p99 / p50 **{statistics.median(tails):.2f}×**; "
    f"median prompts' share {100 * share:.1f}%.",
]
if bench_json:
    with open(bench_json) as f:
        b = json.load(f)
    one = many = None
    for t in b.get("rows", []) if isinstance(b, dict) else []:
        if (t.get("n_prompt"), t.get("n_gen"), t.get("n_depth")) != (0, 128, 0):
            continue
        if t.get("batch") == 1:
            one = t.get("tokens_per_s_median")
        if t.get("batch") == batch:
            many = t.get("tokens_per_s_median")
    if one and many:
        big_b = many / one
        lines.append(
            f"Bench beside them: tg128 {one:.1f} t/s one sequence, {many:.1f} t/s for {batch} together "
            f"(B = {big_b:.2f}); estimate 1 / (f + (1 − f) / B) = "
            f"**{1 / (share + (1 - share) / big_b):.2f}×**."
        )
    else:
        lines.append(f"Bench beside them: no tg128 pair of rows found in {bench_json}.")
summary = "\n".join(lines) + "\n"
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write(summary)
print(summary, end="")
PY
