#!/usr/bin/env bash
# Opens PocketPerf HTML reports in headless Chromium and fails on any console message (a
# script error, a Content-Security-Policy violation, a blocked load) or on any reference to the
# network; takes a screenshot of each page.
#
#   scripts/check-report-html.sh [--screenshot-dir DIR] [--height PX] PAGE.html|RESULT_DIR...
#   scripts/check-report-html.sh --self-test
#
# A RESULT_DIR without report.html is rendered first with `pocketperf report` ($POCKETPERF, else
# target/release/pocketperf, else target/debug/pocketperf). Chromium is $CHROMIUM, else the
# first of chromium, chromium-browser, google-chrome on PATH (Debian: apt-get install chromium).
# --self-test proves the detector: a clean page must pass, pages with a script error and with a
# blocked network load must fail.
#
# Exit: 0 every page clean, 1 a page failed, 2 usage or tool error, 77 Chromium not installed.
set -uo pipefail

shots=""
height=4000
self_test=0
pages=()
while [ $# -gt 0 ]; do
  case "$1" in
    --screenshot-dir) shots="${2:?--screenshot-dir needs a directory}"; shift 2 ;;
    --height) height="${2:?--height needs pixels}"; shift 2 ;;
    --self-test) self_test=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) pages+=("$1"); shift ;;
  esac
done

chromium="${CHROMIUM:-}"
if [ -z "$chromium" ]; then
  for c in chromium chromium-browser google-chrome; do
    if command -v "$c" >/dev/null 2>&1; then chromium="$c"; break; fi
  done
fi
if [ -z "$chromium" ]; then
  echo "check-report-html: Chromium not found (Debian: apt-get install chromium)" >&2
  exit 77
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# check_page HTML PNG: 0 clean, 1 failed.
check_page() {
  local html="$1" png="$2" failed=0
  local abs
  abs="$(cd "$(dirname "$html")" && pwd)/$(basename "$html")"
  # Static: nothing may point at the network or run a script.
  if grep -Eiq '(src|href|action)[[:space:]]*=[[:space:]]*"?(https?:|//)|@import|url\([[:space:]]*["'\'']?(https?:|//)|<script' "$abs"; then
    echo "FAIL $html: references the network or contains a script:" >&2
    grep -Eion '(src|href|action)[[:space:]]*=[[:space:]]*"?(https?:|//)[^" >]*|@import|url\([^)]*\)|<script' "$abs" | head -5 >&2
    failed=1
  fi
  local profile log
  profile="$(mktemp -d "$work/profile.XXXXXX")"
  log="$work/chromium.$$.log"
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --enable-logging=stderr --v=0 --log-level=0 \
    --window-size="1280,$height" --virtual-time-budget=5000 \
    --screenshot="$png" "file://$abs" >"$log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL $html: chromium exited with $rc" >&2
    tail -5 "$log" >&2
    failed=1
  fi
  if grep -q ':CONSOLE' "$log"; then
    echo "FAIL $html: console messages:" >&2
    grep ':CONSOLE' "$log" | sed 's/^.*:CONSOLE[^]]*] /  /' >&2
    failed=1
  fi
  if [ ! -s "$png" ]; then
    echo "FAIL $html: no screenshot" >&2
    failed=1
  fi
  if [ "$failed" -eq 0 ]; then
    echo "ok   $html (screenshot $png)"
  fi
  return "$failed"
}

if [ "$self_test" -eq 1 ]; then
  csp='<meta http-equiv="Content-Security-Policy" content="default-src '"'none'"'; style-src '"'unsafe-inline'"'; img-src data:">'
  printf '<!DOCTYPE html><html><head><meta charset="utf-8">%s<title>ok</title></head><body><p>clean</p><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg></body></html>\n' "$csp" >"$work/clean.html"
  printf '<!DOCTYPE html><html><head><meta charset="utf-8"><title>bad</title></head><body><p>x</p><script>no_such_function();</script></body></html>\n' >"$work/script-error.html"
  printf '<!DOCTYPE html><html><head><meta charset="utf-8">%s<title>bad</title></head><body><img alt="" src="https://example.invalid/x.png"></body></html>\n' "$csp" >"$work/network.html"
  # No script and no network reference: only the console can tell that the inline style
  # broke the page's policy, so this one proves the console check on its own.
  printf '<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="default-src '"'none'"'"><title>bad</title></head><body><p style="color:red">x</p></body></html>\n' >"$work/console-only.html"
  status=0
  check_page "$work/clean.html" "$work/clean.png" || { echo "self-test: the clean page failed" >&2; status=1; }
  for bad in console-only script-error network; do
    if check_page "$work/$bad.html" "$work/$bad.png" 2>"$work/$bad.err"; then
      echo "self-test: the $bad page passed but must fail" >&2
      status=1
    else
      echo "ok   $bad page rejected: $(grep -m1 '^FAIL' "$work/$bad.err" | sed 's/^FAIL [^:]*: //')"
    fi
  done
  if ! grep -q 'console messages' "$work/console-only.err"; then
    echo "self-test: the console check did not fire" >&2
    status=1
  fi
  [ "$status" -eq 0 ] && echo "self-test passed"
  exit "$status"
fi

if [ "${#pages[@]}" -eq 0 ]; then
  echo "usage: $0 [--screenshot-dir DIR] [--height PX] PAGE.html|RESULT_DIR... | --self-test" >&2
  exit 2
fi

pocketperf="${POCKETPERF:-}"
if [ -z "$pocketperf" ]; then
  here="$(cd "$(dirname "$0")/.." && pwd)"
  for b in "$here/target/release/pocketperf" "$here/target/debug/pocketperf"; do
    if [ -x "$b" ]; then pocketperf="$b"; break; fi
  done
fi

status=0
n=0
for p in "${pages[@]}"; do
  html="$p"
  if [ -d "$p" ]; then
    html="$p/report.html"
    if [ ! -f "$html" ]; then
      if [ -z "$pocketperf" ]; then
        echo "check-report-html: $p has no report.html and no pocketperf binary was found" >&2
        exit 2
      fi
      "$pocketperf" report "$p" --print none || exit 2
    fi
  fi
  if [ ! -f "$html" ]; then
    echo "check-report-html: $html: no such file" >&2
    exit 2
  fi
  n=$((n + 1))
  png="$work/page$n.png"
  if [ -n "$shots" ]; then
    mkdir -p "$shots"
    png="$shots/$(basename "$(dirname "$html")")-$(basename "$html" .html).png"
  fi
  check_page "$html" "$png" || status=1
done
exit "$status"
