#!/usr/bin/env bash
# The release gate's error rates on this machine, with the default rules (no --rules: the
# built-in rules, identical to ci/gate.toml) and the default replicate count (5 runs a side,
# as `gate --interleave` makes them):
#
# One binary runs pairs A B A B … (--pairs, default 100): A with --base, B with --slow.
# Default: both hold the governor's duty-cycle actuator at a fixed level (`--governor fixed`),
# A at level 0 (busy 1.00: no idle inserted), B at level 3 (busy 0.85: an idle of 0.176 times
# each token's compute after it, a real 15% loss of decode throughput); both decode one
# sequence at a time (Offline under a governor does), so only the idle differs.
#
#   A/B  detections: comparison c gates the A runs of pairs 5c+1 … 5c+5 against their B runs
#        (paired, interleaved). No run is used in two A/B comparisons.
#   A/A  false alarms: the A runs alone, in time order; comparison w takes the ten A runs
#        from --aa-stride·w on and gates the 1st, 3rd, … 9th against the 2nd, 4th, … 10th
#        (each side's runs disjoint and alternating in time, as interleaved replicates are).
#        With the default stride 4, consecutive comparisons share six of their ten runs.
#
#   bench/gate-error-rates.sh [--phase runs|analyze|all] [--pairs 100] [--aa-stride 4]
#                             [--base "ARGS"] [--slow "ARGS"] [--allow-diff FIELDS] [--out DIR]
#
# Each run is the smallest one the default gate judges: Offline on the reference model
# (smollm2-135m) with the quick preset and 8 queries (`gate.performance.min_samples` is 8;
# Offline has no early-stopping minimum, SingleStream at its 90th percentile needs 64),
# through a LoadGen config written to OUT/offline-8.conf. The A/B gate is asked to accept the
# command-line fields --slow changes (--allow-diff, default `cli.governor`) and nothing else.
# An interrupted --phase runs continues where it stopped (runs with a result.json are kept).
#
# Writes OUT/runs.csv (every run: index, side, start, 1-minute load average, exit
# status, seconds), OUT/gates.csv (every comparison: kind, index, exit status, the checks that
# regressed) and OUT/summary.md (counts with exact Clopper–Pearson 95% intervals), and prints
# the summary. POCKETPERF_BIN names the binary (default: target/release/pocketperf, built
# when missing). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."

phase=all
pairs=100
aa_stride=4
base="--governor fixed --governor-actuator duty --governor-level 0"
slow="--governor fixed --governor-actuator duty --governor-level 3"
allow_diff="cli.governor"
out="results/gate-error-rates-$(date -u +%Y%m%dT%H%M%SZ)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --phase) phase="$2"; shift 2 ;;
    --pairs) pairs="$2"; shift 2 ;;
    --aa-stride) aa_stride="$2"; shift 2 ;;
    --base) base="$2"; shift 2 ;;
    --slow) slow="$2"; shift 2 ;;
    --allow-diff) allow_diff="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$phase" in runs|analyze|all) ;; *) echo "--phase: runs, analyze or all" >&2; exit 2 ;; esac
[[ "$pairs" =~ ^[0-9]+$ && "$pairs" -ge 10 ]] || { echo "--pairs: at least 10" >&2; exit 2; }
[[ "$aa_stride" =~ ^[0-9]+$ && "$aa_stride" -ge 1 ]] || { echo "--aa-stride: at least 1" >&2; exit 2; }

bin="${POCKETPERF_BIN:-target/release/pocketperf}"
if [[ ! -x "$bin" ]]; then
  cargo build --release -p pocketperf
fi
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
conf="$out/offline-8.conf"
cat > "$conf" <<'EOF'
# The smallest Offline run the default gate judges: 8 queries (gate min_samples = 8).
*.Offline.min_query_count = 8
*.Offline.min_duration = 0
EOF
[[ -f "$out/runs.csv" ]] || echo "index,side,dir,started_utc,load1,exit,seconds" > "$out/runs.csv"

# One run into DIR (a fresh directory); appends its row to runs.csv.
one_run() {
  local idx="$1" side="$2" dir="$3"; shift 3
  local load t0 t1 rc=0 started
  load="$(cut -d' ' -f1 /proc/loadavg)"
  started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  t0="$(date +%s.%N)"
  if [[ -f "$dir/result.json" ]]; then
    return 0
  fi
  rm -rf "$dir"
  "$bin" run --scenario offline --preset quick --config "$conf" --out "$dir" "$@" \
    > "$dir.log" 2>&1 || rc=$?
  t1="$(date +%s.%N)"
  echo "$idx,$side,${dir#"$out"/},$started,$load,$rc,$(echo "$t1 - $t0" | bc)" >> "$out/runs.csv"
  echo "$idx $side: exit $rc, load $load" >&2
}

if [[ "$phase" == runs || "$phase" == all ]]; then
  mkdir -p "$out/ab"
  read -r -a base_args <<< "$base"
  read -r -a slow_args <<< "$slow"
  for i in $(seq -w 1 "$pairs"); do
    one_run "$i" a "$out/ab/$i-a" "${base_args[@]}"
    one_run "$i" b "$out/ab/$i-b" "${slow_args[@]}"
  done
fi

if [[ "$phase" == analyze || "$phase" == all ]]; then
  mkdir -p "$out/gates"
  echo "kind,index,exit,regressed" > "$out/gates.csv"
  gate_one() {
    local kind="$1" idx="$2" base="$3" cand="$4"; shift 4
    local rc=0
    "$bin" gate --baseline "$base" --candidate "$cand" --json "$out/gates/$kind-$idx.json" "$@" \
      > "$out/gates/$kind-$idx.txt" 2>&1 || rc=$?
    local regressed
    regressed="$(jq -r '[.outcome.checks[]? | select(.status == "regression") | .name] | join(" ")' \
      "$out/gates/$kind-$idx.json" 2>/dev/null || echo "?")"
    echo "$kind,$idx,$rc,$regressed" >> "$out/gates.csv"
  }
  mapfile -t pool < <(find "$out/ab" -mindepth 2 -maxdepth 2 -path '*-a/result.json' -printf '%h\n' 2>/dev/null | sort)
  w=0
  while (( aa_stride * w + 10 <= ${#pool[@]} )); do
    b=() c=()
    for k in 0 2 4 6 8; do
      b+=("${pool[aa_stride * w + k]}")
      c+=("${pool[aa_stride * w + k + 1]}")
    done
    gate_one aa "$w" "$(IFS=,; echo "${b[*]}")" "$(IFS=,; echo "${c[*]}")"
    w=$((w + 1))
  done
  n_pairs="$(find "$out/ab" -mindepth 1 -maxdepth 1 -type d -name '*-b' 2>/dev/null | wc -l)"
  c=0
  while (( 5 * c + 5 <= n_pairs )); do
    b=() d=() ok=1
    for k in 0 1 2 3 4; do
      i="$(printf '%0*d' "${#pairs}" $((5 * c + k + 1)))"
      [[ -f "$out/ab/$i-a/result.json" && -f "$out/ab/$i-b/result.json" ]] || ok=0
      b+=("$out/ab/$i-a")
      d+=("$out/ab/$i-b")
    done
    if (( ok )); then
      gate_one ab "$c" "$(IFS=,; echo "${b[*]}")" "$(IFS=,; echo "${d[*]}")" --allow-diff "$allow_diff"
    fi
    c=$((c + 1))
  done
  python3 - "$out" "$bin" "$base" "$slow" "$allow_diff" <<'PY'
import csv, json, math, subprocess, sys

out, binary, base, slow, allow = sys.argv[1:6]

def binom_cdf(k, n, p):
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))

def solve(f, lo=0.0, hi=1.0):
    # f increasing in p on [lo, hi]; root by bisection
    for _ in range(100):
        mid = (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2

def clopper_pearson(k, n, a=0.05):
    lo = 0.0 if k == 0 else solve(lambda p: (1 - binom_cdf(k - 1, n, p)) - a / 2)
    hi = 1.0 if k == n else solve(lambda p: a / 2 - binom_cdf(k, n, p))
    return lo, hi

gates = list(csv.DictReader(open(f"{out}/gates.csv")))
runs = list(csv.DictReader(open(f"{out}/runs.csv")))
lines = []
try:
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
except OSError:
    version = "?"
commits = set()
for r in runs:
    try:
        commits.add(json.load(open(f"{out}/{r['dir']}/result.json"))["meta"]["git_commit"])
    except (OSError, KeyError, ValueError):
        pass
lines.append(f"binary: {version}, commit {', '.join(sorted(commits)) or '?'}")
loads = [float(r["load1"]) for r in runs]
failed_runs = [r for r in runs if r["exit"] != "0"]
if runs:
    lines.append(
        f"runs: {len(runs)} ({len(failed_runs)} with a non-zero exit), "
        f"{runs[0]['started_utc']} to {runs[-1]['started_utc']}, 1-minute load average "
        f"median {sorted(loads)[len(loads) // 2]:.2f} (min {min(loads):.2f}, max {max(loads):.2f})"
    )
lines.append(f"A: `{base}`; B: `{slow}`; A/B gated with `--allow-diff {allow}`")
for kind, what in [("aa", "false alarms (A/A)"), ("ab", "detections (A/B)")]:
    g = [x for x in gates if x["kind"] == kind]
    n = len(g)
    k = sum(1 for x in g if x["exit"] == "1")
    errors = sum(1 for x in g if x["exit"] not in ("0", "1"))
    if n == 0:
        lines.append(f"{what}: no comparisons")
        continue
    lo, hi = clopper_pearson(k, n)
    by = {}
    for x in g:
        for name in x["regressed"].split():
            by[name] = by.get(name, 0) + 1
    checks = ", ".join(f"{name} {c}" for name, c in sorted(by.items())) or "none"
    lines.append(
        f"{what}: {k}/{n} = {100 * k / n:.1f}% (95% Clopper–Pearson {100 * lo:.1f}–{100 * hi:.1f}%), "
        f"gate errors {errors}; regressed checks: {checks}"
    )
text = "\n".join(f"- {l}" for l in lines) + "\n"
open(f"{out}/summary.md", "w").write(text)
print(text, end="")
PY
fi
