#!/usr/bin/env python3
"""The same scenarios through the HTTP SUT against llama.cpp's llama-server and against
`pocketperf serve --http`, on the same model file and thread count, alternated.

For each pair the two servers run one after the other (the order alternates from pair to
pair: A B, B A, ...), each started fresh on a loopback port, checked on /health, measured by
`pocketperf run --scenario S --sut http://127.0.0.1:PORT --api completions` (the quick preset:
the same prompts as token ids, greedy, `ignore_eos`, the same max_tokens), then stopped with
SIGTERM. The server process's CPU time (utime + stime from /proc/PID/stat) is read before and
after each run. TTFT, TPOT and tokens/s are the harness's own, timed on SSE arrival.

  bench/http-side-by-side.py --pocketperf BIN --model FILE [--threads 2] [--pairs 3]
      [--scenarios single-stream,offline] [--slots 8] [--ctx 2048] [--json OUT.json]
      [--llama-server-args=--no-cache-prompt]

llama-server keeps each slot's KV and reuses the longest common prefix of the next prompt
(its prompt cache, on by default); `pocketperf serve --http` starts every request afresh.
`--llama-server-args=--no-cache-prompt` measures llama-server without that reuse.

llama-server comes from bench/llamacpp-peer.sh (the same source package as the other
side-by-side scripts). Not part of CI: timings are measurements.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_s(pid):
    """utime + stime of a live process, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime field 14, stime field 15.
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_healthy(port, proc, timeout=300):
    t_end = time.time() + timeout
    while time.time() < t_end:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    proc.kill()
    sys.exit(f"server on port {port} not healthy after {timeout} s")


def measure(who, server_cmd, port, a, scenario, out):
    log = open(out + ".server.log", "w")
    proc = subprocess.Popen(server_cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, proc)
        c0 = cpu_s(proc.pid)
        run = [a.pocketperf, "run", "--scenario", scenario, "--sut", f"http://127.0.0.1:{port}",
               "--api", "completions", "--model", a.model, "--out", out]
        p = subprocess.run(run, capture_output=True, text=True)
        c1 = cpu_s(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    if p.returncode not in (0, 1):
        sys.exit(f"{who} {scenario}: run failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    with open(os.path.join(out, "result.json")) as f:
        r = json.load(f)
    perf = r["performance"]
    tokens = sum(q.get("tokens", 0) for q in perf.get("per_query", []))
    pick = lambda k: (perf.get(k) or {}).get("p50")
    return {
        "runtime": who, "scenario": scenario, "valid": perf.get("valid"),
        "queries": perf.get("queries"), "tokens": tokens,
        "ttft_p50_ms": pick("ttft_ms"), "ttft_p90_ms": (perf.get("ttft_ms") or {}).get("p90"),
        "tpot_p50_ms": pick("tpot_ms"), "tokens_per_s": perf.get("tokens_per_s"),
        "server_cpu_s": c1 - c0,
        "cpu_ms_per_token": (c1 - c0) * 1e3 / tokens if tokens else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pocketperf", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--scenarios", default="single-stream,offline")
    ap.add_argument("--slots", type=int, default=8, help="parallel sequences of each server")
    ap.add_argument("--ctx", type=int, default=2048, help="context per sequence")
    ap.add_argument("--llama-server-args", default="",
                    help="extra llama-server arguments, space-separated (e.g. --no-cache-prompt)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.pairs < 1 or a.threads < 1 or a.slots < 1:
        sys.exit("--pairs, --threads and --slots must be at least 1")
    bench = subprocess.run(["bash", os.path.join(HERE, "llamacpp-peer.sh")], check=True,
                           capture_output=True, text=True).stdout.strip()
    llama_server = os.path.join(os.path.dirname(bench), "llama-server")
    if not os.access(llama_server, os.X_OK):
        sys.exit(f"{llama_server} not built (bench/llamacpp-peer.sh builds it)")
    t = str(a.threads)
    servers = {
        "pocketperf": lambda port: [a.pocketperf, "serve", "--http", f"127.0.0.1:{port}", "--model", a.model,
                                    "--threads", t, "--slots", str(a.slots), "--ctx", str(a.ctx)],
        # -c is the context of all slots together; -np the slots (continuous batching).
        "llama.cpp": lambda port: [llama_server, "-m", a.model, "-t", t, "-tb", t,
                                   "-c", str(a.ctx * a.slots), "-np", str(a.slots),
                                   "--host", "127.0.0.1", "--port", str(port)] + a.llama_server_args.split(),
    }
    work = tempfile.mkdtemp(prefix="http-sbs-")
    rows = []
    for scenario in [s.strip() for s in a.scenarios.split(",") if s.strip()]:
        for i in range(a.pairs):
            order = ["pocketperf", "llama.cpp"] if i % 2 == 0 else ["llama.cpp", "pocketperf"]
            for who in order:
                port = free_port()
                out = os.path.join(work, f"{scenario}-{who.replace('.', '')}-{i}")
                r = measure(who, servers[who](port), port, a, scenario, out)
                r["pair"] = i
                rows.append(r)
                print(f"{scenario} pair {i} {who}: TTFT p50 {r['ttft_p50_ms']:.1f} ms, TPOT p50 "
                      f"{r['tpot_p50_ms']:.1f} ms, {r['tokens_per_s']:.1f} tokens/s, server CPU "
                      f"{r['server_cpu_s']:.1f} s, valid {r['valid']}", file=sys.stderr)
    print("| scenario | runtime | TTFT p50 ms | TPOT p50 ms | tokens/s | server CPU ms/token | queries | valid |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        for who in servers:
            rs = [r for r in rows if r["scenario"] == scenario and r["runtime"] == who]
            med = lambda k: statistics.median(r[k] for r in rs if r[k] is not None)
            rng = lambda k: f"{min(r[k] for r in rs):.1f}–{max(r[k] for r in rs):.1f}"
            s = {k: med(k) for k in ("ttft_p50_ms", "tpot_p50_ms", "tokens_per_s", "cpu_ms_per_token")}
            summary[(scenario, who)] = s
            print(f"| {scenario} | {who} | {s['ttft_p50_ms']:.1f} ({rng('ttft_p50_ms')}) | {s['tpot_p50_ms']:.1f} "
                  f"({rng('tpot_p50_ms')}) | {s['tokens_per_s']:.1f} ({rng('tokens_per_s')}) | "
                  f"{s['cpu_ms_per_token']:.1f} | {rs[0]['queries']} | {all(r['valid'] for r in rs)} |")
    print()
    print("| scenario | TTFT llama.cpp / pocketperf | TPOT llama.cpp / pocketperf | tokens/s pocketperf / llama.cpp | CPU per token llama.cpp / pocketperf |")
    print("|---|---|---|---|---|")
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        o, l = summary[(scenario, "pocketperf")], summary[(scenario, "llama.cpp")]
        print(f"| {scenario} | {l['ttft_p50_ms'] / o['ttft_p50_ms']:.2f}× | {l['tpot_p50_ms'] / o['tpot_p50_ms']:.2f}× | "
              f"{o['tokens_per_s'] / l['tokens_per_s']:.2f}× | {l['cpu_ms_per_token'] / o['cpu_ms_per_token']:.2f}× |")
    if a.json:
        with open(a.json + ".part", "w") as f:
            json.dump({"threads": a.threads, "slots": a.slots, "ctx": a.ctx, "model": a.model, "rows": rows}, f, indent=1)
        os.replace(a.json + ".part", a.json)


if __name__ == "__main__":
    main()
