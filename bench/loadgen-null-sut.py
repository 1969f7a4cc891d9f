#!/usr/bin/env python3
"""LoadGen's own null SUT, for comparison with `pocketperf scenario-bench`.

Drives MLPerf LoadGen (pip package mlcommons-loadgen) with an SUT that completes every query
inside its issue callback, with the same settings `pocketperf scenario-bench` uses, then reads
LoadGen's mlperf_log_summary.txt and prints one JSON object: queries/s as LoadGen reports it
("QPS w/ loadgen overhead" for SingleStream, "Samples per second" for Offline, "Completed
samples per second" for Server), the latency LoadGen measured per query, wall time and the
peak resident memory of this process.
"""

import argparse
import json
import os
import re
import resource
import sys
import tempfile
import time

try:
    import mlperf_loadgen as lg
except ImportError:
    sys.exit("mlperf_loadgen is not installed: pip install mlcommons-loadgen")


def summary_fields(path):
    out = {}
    with open(path) as f:
        for line in f:
            if ":" in line and not line.lstrip().startswith(("*", "=")):
                k, v = line.split(":", 1)
                out[k.strip()] = v.strip()
    return out


def num(fields, key):
    v = fields.get(key)
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", choices=["single-stream", "offline", "server"],
                    default="single-stream")
    ap.add_argument("--min-queries", type=int, default=100_000)
    ap.add_argument("--min-duration-ms", type=int, default=1_000)
    ap.add_argument("--server-qps", type=float, default=100_000.0)
    ap.add_argument("--server-latency-ns", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--expected-latency-ns", type=int, default=2_000,
                    help="SingleStream: LoadGen pre-generates min_duration / this many queries")
    ap.add_argument("--out", help="keep LoadGen's logs here (default: a temporary folder)")
    a = ap.parse_args()

    s = lg.TestSettings()
    s.mode = lg.TestMode.PerformanceOnly
    s.min_query_count = a.min_queries
    if a.scenario == "single-stream":
        s.scenario = lg.TestScenario.SingleStream
        s.min_duration_ms = a.min_duration_ms
        s.single_stream_expected_latency_ns = a.expected_latency_ns
    elif a.scenario == "server":
        s.scenario = lg.TestScenario.Server
        s.min_duration_ms = a.min_duration_ms
        s.server_target_qps = a.server_qps
        s.server_target_latency_ns = a.server_latency_ns
    else:
        s.scenario = lg.TestScenario.Offline
        s.min_duration_ms = 0
        s.offline_expected_qps = 1.0

    def issue(queries):
        lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in queries])

    def flush():
        pass

    def load(_):
        pass

    sut = lg.ConstructSUT(issue, flush)
    qsl = lg.ConstructQSL(a.samples, a.samples, load, load)
    out = a.out or tempfile.mkdtemp(prefix="loadgen-null-")
    os.makedirs(out, exist_ok=True)
    log_out = lg.LogOutputSettings()
    log_out.outdir = out
    log_out.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = log_out
    log.enable_trace = False
    rss_before = _rss_bytes()
    t0 = time.perf_counter()
    lg.StartTestWithLogSettings(sut, qsl, s, log)
    wall = time.perf_counter() - t0
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)

    f = summary_fields(os.path.join(out, "mlperf_log_summary.txt"))
    key = {"single-stream": "QPS w/ loadgen overhead", "offline": "Samples per second",
           "server": "Completed samples per second"}[a.scenario]
    qps = num(f, key)
    detail = open(os.path.join(out, "mlperf_log_detail.txt")).read()
    m = re.search(r'"key": "result_query_count", "value": (\d+)', detail)
    issued = int(m.group(1)) if m else None
    m = re.search(r'"key": "generated_samples_per_query", "value": (\d+)', detail)
    per_query = int(m.group(1)) if m else 1
    queries = issued * per_query if issued is not None else None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({
        "tool": "mlcommons-loadgen (Python bindings)",
        "loadgen_version": getattr(lg, "__version__", None) or _pkg_version(),
        "scenario": a.scenario,
        "result": f.get("Result is"),
        "queries": queries,
        "wall_s": wall,
        "queries_per_s": qps,
        "queries_per_s_wall": queries / wall if queries and wall > 0 else None,
        "overhead_ns_per_query": 1e9 / qps if qps else None,
        "latency_mean_ns": num(f, "Mean latency (ns)"),
        "latency_p99_ns": num(f, "99.00 percentile latency (ns)"),
        "latency_max_ns": num(f, "Max latency (ns)"),
        "rss_before_bytes": rss_before,
        "peak_rss_bytes": peak,
        "peak_growth_bytes": peak - rss_before if rss_before else None,
        "peak_growth_bytes_per_query": (peak - rss_before) / queries
        if rss_before and queries else None,
        "logs": out,
    }, indent=2))


def _rss_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _pkg_version():
    try:
        from importlib.metadata import version
        return version("mlcommons-loadgen")
    except Exception:
        return None


if __name__ == "__main__":
    main()
