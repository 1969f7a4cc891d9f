#!/usr/bin/env python3
"""Compares PocketPerf's sample choice and Server schedule with MLPerf LoadGen's own.

For each case it runs LoadGen (the `mlcommons-loadgen==6.0.17` Python bindings) with a
recording SUT and QSL, and the scenario engine through
`cargo run -p pocketperf-scenarios --example sample_sequence` with the same settings, then
compares exactly:
  - the loaded set (the QSL load callback's indices, in load order);
  - the sample index of every issued query (performance mode) or the issue order of the
    accuracy pass (accuracy mode);
  - Server: each query's scheduled offset from the first, in ns, read from LoadGen's trace
    (`mlperf_log_trace.json`, "Sample" events start at the scheduled time).

Usage: scripts/loadgen-compare.py [--markdown] [--pin FILE] [--no-build]
  --markdown  print the result table as Markdown (docs/SCENARIOS.md carries it)
  --pin FILE  also write LoadGen's own values for a few cases to FILE (JSON), the data the
              scenarios crate's pinned test reads

Install LoadGen first: pip install mlcommons-loadgen==6.0.17 (a binary wheel on x86-64
Linux with CPython 3.8-3.13; no compiler needed).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import mlperf_loadgen as lg

# LoadGen's mlperf.conf seeds (qsl, sample index, schedule), then a few others.
SEEDS = [
    (2085463073848966840, 2747215439041700203, 16159082839903944936),
    (0, 0, 0),
    (1, 2, 3),
    (12345, 678910, 1112131415),
    (0xDEADBEEF, 0xCAFEF00D, 0x0123456789ABCDEF),
]

# (scenario, mode, total, performance count, min queries, qps, equal issue)
# (scenario, mode, total, performance count, min queries, qps, equal issue, min duration ms)
SHAPES = [
    ("SingleStream", "performance", 100, 10, 200, 0, 0, 0),
    ("SingleStream", "performance", 1000, 64, 500, 0, 0, 0),
    ("SingleStream", "performance", 1000, 500, 300, 0, 0, 0),
    ("SingleStream", "performance", 100000, 70000, 100, 0, 0, 0),
    ("SingleStream", "performance", 100, 10, 100, 0, 1, 0),
    ("SingleStream", "performance", 1000, 64, 100, 0, 1, 0),
    ("Server", "performance", 100, 10, 200, 2000.0, 0, 0),
    ("Server", "performance", 1000, 64, 300, 5000.0, 0, 0),
    ("Server", "performance", 1000, 500, 300, 5000.0, 0, 0),
    ("Server", "performance", 1000, 64, 256, 5000.0, 1, 0),
    ("Server", "performance", 100, 10, 20, 2000.0, 1, 150),
    ("Offline", "performance", 100, 10, 250, 1.0, 0, 0),
    ("Offline", "performance", 1000, 500, 1200, 1.0, 0, 0),
    ("Offline", "performance", 1000, 64, 300, 1.0, 1, 0),
    ("SingleStream", "accuracy", 100, 10, 1, 0, 0, 0),
    ("Server", "accuracy", 1000, 64, 1, 5000.0, 0, 0),
    ("Offline", "accuracy", 100, 10, 1, 1.0, 0, 0),
    ("Offline", "accuracy", 1000, 64, 1, 1.0, 1, 0),
]

# Leading values of each list kept in the pinned file.
PIN = 40

SCENARIOS = {
    "SingleStream": lg.TestScenario.SingleStream,
    "Server": lg.TestScenario.Server,
    "Offline": lg.TestScenario.Offline,
}


def run_loadgen(case, outdir):
    scenario, mode, total, perf, min_q, qps, equal, dur, seeds = case
    loaded = []
    issued = []

    def issue(samples):
        responses = []
        for s in samples:
            issued.append(s.index)
            responses.append(lg.QuerySampleResponse(s.id, 0, 0))
        lg.QuerySamplesComplete(responses)

    def load(indices):
        loaded.append(list(indices))

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(total, perf, load, lambda indices: None)
    s = lg.TestSettings()
    s.scenario = SCENARIOS[scenario]
    s.mode = lg.TestMode.PerformanceOnly if mode == "performance" else lg.TestMode.AccuracyOnly
    s.qsl_rng_seed, s.sample_index_rng_seed, s.schedule_rng_seed = seeds
    s.min_duration_ms = dur
    s.min_query_count = min_q
    s.max_query_count = 0 if scenario == "Offline" or dur else min_q
    s.sample_concatenate_permutation = bool(equal)
    if scenario == "Server":
        s.server_target_qps = qps
        s.server_target_latency_ns = 10**9
    if scenario == "Offline":
        s.offline_expected_qps = qps
    log = lg.LogSettings()
    log.log_output.outdir = outdir
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = scenario == "Server"
    lg.StartTestWithLogSettings(sut, qsl, s, log, "")
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    scheduled = []
    if scenario == "Server" and mode == "performance":
        text = open(os.path.join(outdir, "mlperf_log_trace.json")).read()
        events = []
        for m in re.finditer(r'\{"name":"Sample",[^{}]*"ph":"b"[^{}]*"ts":([0-9.]+),'
                             r'"args":\{([^{}]*)\}', text):
            args = dict(re.findall(r'"(\w+)"\s*:\s*"?([0-9.]+)"?', m.group(2)))
            events.append((int(args["sample_seq"]), round(float(m.group(1)) * 1000),
                           int(args["sample_idx"])))
        events.sort()
        t0 = events[0][1]
        scheduled = [t - t0 for _, t, _ in events]
        if [i for _, _, i in events] != issued:
            sys.exit("trace and SUT disagree on the issued samples")
    return loaded, issued, scheduled


def run_ours(case, count, example):
    scenario, mode, total, perf, min_q, qps, equal, dur, seeds = case
    args = [
        f"scenario={scenario}", f"mode={mode}", f"total={total}", f"performance={perf}",
        f"qsl_seed={seeds[0]}", f"sample_seed={seeds[1]}", f"schedule_seed={seeds[2]}",
        f"min_queries={min_q}", f"max_queries={count}", f"min_duration_ms={dur}",
        f"qps={qps or 1.0}", f"equal_issue={equal}",
    ]
    out = subprocess.run(example + args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--pin")
    ap.add_argument("--no-build", action="store_true", help="use the example as last built")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not a.no_build:
        subprocess.run(["cargo", "build", "-q", "-p", "pocketperf-scenarios",
                        "--example", "sample_sequence"], check=True, cwd=root)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    example = [os.path.join(target, "debug", "examples", "sample_sequence")]

    rows, pins, failures = [], [], 0
    for shape in SHAPES:
        for si, seeds in enumerate(SEEDS):
            case = shape + (seeds,)
            scenario, mode, total, perf, min_q, qps, equal, dur, _ = case
            with tempfile.TemporaryDirectory() as d:
                lg_loaded, lg_issued, lg_sched = run_loadgen(case, d)
            count = len(lg_issued)
            ours = run_ours(case, count, example)
            if mode == "performance":
                # The engine may stop a little earlier by its own stop rule (max_query_count
                # is LoadGen's count); what it issued must be LoadGen's prefix.
                set_ok = lg_loaded[0] == ours["loaded"]
                count = len(ours["samples"])
                seq_ok = count >= len(lg_issued) * 0.9 and lg_issued[:count] == ours["samples"]
            else:
                # The issue order covers every loadable set, so it shows them too.
                set_ok = None
                seq_ok = lg_issued == ours["accuracy"]
            sched_ok = None
            if lg_sched:
                sched_ok = lg_sched[:count] == ours["issue_ns"]
            ok = set_ok is not False and seq_ok and sched_ok is not False
            failures += not ok
            rows.append((scenario, mode, total, perf, min_q, equal, si, count, set_ok, seq_ok,
                         sched_ok, ok, dur))
            if si == 0 and mode == "performance":
                pins.append({
                    "scenario": scenario, "total": total, "performance": perf,
                    "min_queries": min_q, "min_duration_ms": dur, "qps": qps,
                    "equal_issue": bool(equal),
                    "qsl_seed": seeds[0], "sample_seed": seeds[1], "schedule_seed": seeds[2],
                    "loaded_head": lg_loaded[0][:PIN], "samples_head": lg_issued[:PIN],
                    "scheduled_ns_head": lg_sched[:PIN],
                })

    yes = lambda b: "—" if b is None else ("yes" if b else "**NO**")
    if a.markdown:
        # One row per shape: how many seed triples matched on each comparison.
        print("| scenario | mode | QSL total | perf. count | min queries | min duration (ms) "
              "| equal issue | queries compared | loaded set | sample indices | schedule (ns) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        per = len(SEEDS)
        for k in range(0, len(rows), per):
            grp = rows[k:k + per]
            scenario, mode, total, perf, min_q, equal = grp[0][:6]
            dur = grp[0][12]
            counts = sorted({r[7] for r in grp})
            frac = lambda j: ("—" if grp[0][j] is None
                              else f"{sum(1 for r in grp if r[j])}/{len(grp)}")
            print(f"| {scenario} | {mode} | {total} | {perf} | {min_q} | {dur} | {equal} "
                  f"| {'/'.join(map(str, counts))} | {frac(8)} | {frac(9)} | {frac(10)} |")
    else:
        for r in rows:
            scenario, mode, total, perf, min_q, equal, si, count, set_ok, seq_ok, sched_ok = r[:11]
            print(f"{scenario:12} {mode:11} total={total:<6} perf={perf:<5} min_q={min_q:<5} "
                  f"eq={equal} seeds#{si} queries={count:<5} loaded={yes(set_ok)} "
                  f"samples={yes(seq_ok)} schedule={yes(sched_ok)}")
    print(f"\n{len(rows) - failures} of {len(rows)} cases identical "
          f"({len(SHAPES)} shapes x {len(SEEDS)} seed triples)")
    if a.pin:
        with open(a.pin, "w") as f:
            json.dump({"loadgen": lg.__version__ if hasattr(lg, "__version__") else "6.0.17",
                       "cases": pins}, f, separators=(",", ":"))
            f.write("\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
