#!/usr/bin/env python3
"""Cold and warm starts of pocketperf and llama.cpp on the same model file, alternated.

Each start is a fresh process timed from spawn (CLOCK_MONOTONIC, the clock both probes stamp
their steps on) to model loaded, first token and the 32nd token, for the same plain prompt,
greedy, the same thread count. A cold start follows an eviction of the file from the page
cache (posix_fadvise DONTNEED, no root needed), checked with util-linux `fincore` before and
after; a warm start follows the cold one of the same runtime (the file just read). The order
of the two runtimes alternates from pair to pair (A B, B A, ...).

Residency modes compared (ours / llama.cpp's equivalent):
  default    mmap, pages fault in on use       / load mode `mmap` (its default)
  prefault   --prefault (read before token 1)  / load mode `none` (its --no-mmap: read into memory)
  mlock      --mlock                           / load mode `mmap+mlock` (its --mlock)

  bench/cold-start-side-by-side.py --pocketperf BIN --model FILE [--model FILE ...]
      [--runs 3] [--threads 2] [--modes default,prefault,mlock] [--json OUT.json]

The peer is the build of bench/llamacpp-peer.sh (llama.cpp's shared library); its probe,
bench/cold-start-peer.c, is compiled on first use. Give each model as a private copy that no
other process maps, or its pages stay resident. Not part of CI: timings are measurements.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The prompt of `pocketperf cold-probe` (harness/src/tools/cold_start.rs, COLD_PROMPT).
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
PEER_MODE = {"default": "mmap", "prefault": "none", "mlock": "mmap+mlock"}
OUR_FLAGS = {"default": [], "prefault": ["--prefault"], "mlock": ["--mlock"]}


def peer_probe():
    """Builds (once) and returns the llama.cpp probe binary."""
    bench = subprocess.run(
        ["bash", os.path.join(HERE, "llamacpp-peer.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    build = os.path.dirname(os.path.dirname(bench))
    peer = os.path.dirname(build)
    src = os.path.join(peer, "src", "vendor", "llama.cpp")
    out = os.path.join(peer, "cold-start-peer")
    c = os.path.join(HERE, "cold-start-peer.c")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(c):
        lib = os.path.join(build, "bin")
        subprocess.run(
            ["cc", "-O2", c, "-I", os.path.join(src, "include"), "-I", os.path.join(src, "ggml", "include"),
             "-L", lib, "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}", "-o", out],
            check=True,
        )
    return out


def residency(path):
    """Fraction of the file's bytes in the page cache (util-linux fincore)."""
    out = subprocess.run(
        ["fincore", "--bytes", "--raw", "--noheadings", "--output", "RES,SIZE", path],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    res, size = int(out[0]), int(out[1])
    return res / size if size else 1.0


def evict(path):
    before = residency(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    after = residency(path)
    if after >= 0.10:
        print(f"warning: {path} still {after:.0%} resident after eviction", file=sys.stderr)
    return before, after


def start(cmd):
    """Spawns one probe; returns its JSON report with times in ms from spawn."""
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"probe failed ({' '.join(cmd)}): {p.stderr.strip()[-2000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    ms = lambda k: (r[k] - t0) / 1e6
    major = r.get("major_faults", (r.get("faults") or {}).get("major"))
    return {
        "to_main_ms": ms("t_main_ns"),
        "to_loaded_ms": ms("t_mapped_ns"),
        "to_first_token_ms": ms("t_first_token_ns"),
        "to_last_token_ms": ms("t_last_token_ns"),
        "prompt_tokens": r["prompt_tokens"],
        "generated": r["generated"],
        "major_faults": major,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pocketperf", required=True, help="the pocketperf binary")
    ap.add_argument("--model", action="append", required=True, help="a GGUF file (repeatable)")
    ap.add_argument("--runs", type=int, default=3, help="cold+warm pairs per runtime and mode")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="default,prefault,mlock")
    ap.add_argument("--json", help="write every start to this file")
    a = ap.parse_args()
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in PEER_MODE:
            sys.exit(f"--modes: unknown mode `{m}` (default, prefault, mlock)")
    if a.runs < 1 or a.threads < 1:
        sys.exit("--runs and --threads must be at least 1")
    for tool in ("fincore", "cc"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found")
    peer = peer_probe()
    t = str(a.threads)
    rows, starts = [], []
    for model in a.model:
        for mode in modes:
            cmds = {
                "pocketperf": [a.pocketperf, "cold-probe", "--model", model, "--threads", t] + OUR_FLAGS[mode],
                "llama.cpp": [peer, model, t, PEER_MODE[mode], PROMPT],
            }
            got = {k: {"cold": [], "warm": []} for k in cmds}
            for i in range(a.runs):
                order = ["pocketperf", "llama.cpp"] if i % 2 == 0 else ["llama.cpp", "pocketperf"]
                for who in order:
                    before, after = evict(model)
                    cold = start(cmds[who])
                    cold.update(evicted_before=before, evicted_after=after, resident_end=residency(model))
                    warm = start(cmds[who])
                    got[who]["cold"].append(cold)
                    got[who]["warm"].append(warm)
                    for kind, r in (("cold", cold), ("warm", warm)):
                        starts.append(dict(r, model=os.path.basename(model), mode=mode, runtime=who, kind=kind, pair=i))
                    print(f"{os.path.basename(model)} {mode} {who} pair {i}: cold TTFT {cold['to_first_token_ms']:.0f} ms "
                          f"(evicted {before:.0%} -> {after:.0%}), warm {warm['to_first_token_ms']:.0f} ms", file=sys.stderr)
            med = lambda who, kind, k: statistics.median(r[k] for r in got[who][kind])
            for who in cmds:
                rows.append({
                    "model": os.path.basename(model), "mode": mode, "runtime": who,
                    "peer_load_mode": PEER_MODE[mode] if who == "llama.cpp" else None,
                    "warm_ttft_ms": med(who, "warm", "to_first_token_ms"),
                    "cold_ttft_ms": med(who, "cold", "to_first_token_ms"),
                    "cold_loaded_ms": med(who, "cold", "to_loaded_ms"),
                    "warm_32_ms": med(who, "warm", "to_last_token_ms"),
                    "cold_32_ms": med(who, "cold", "to_last_token_ms"),
                    "prompt_tokens": got[who]["cold"][0]["prompt_tokens"],
                })
    print("| model | mode | runtime | TTFT warm | TTFT cold | cold − warm | loaded (cold) | 32 tokens warm → cold | prompt tokens |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        name = r["runtime"] + (f" (`{r['peer_load_mode']}`)" if r["peer_load_mode"] else "")
        print(f"| {r['model']} | {r['mode']} | {name} | {r['warm_ttft_ms']:.0f} ms | {r['cold_ttft_ms']:.0f} ms | "
              f"{r['cold_ttft_ms'] - r['warm_ttft_ms']:+.0f} ms | {r['cold_loaded_ms']:.0f} ms | "
              f"{r['warm_32_ms']:.0f} → {r['cold_32_ms']:.0f} ms | {r['prompt_tokens']} |")
    by = {(r["model"], r["mode"], r["runtime"]): r for r in rows}
    print()
    print("| model | mode | cold TTFT ratio llama.cpp / pocketperf | warm TTFT ratio |")
    print("|---|---|---|---|")
    for model in a.model:
        for mode in modes:
            m = os.path.basename(model)
            ours, peer_r = by[(m, mode, "pocketperf")], by[(m, mode, "llama.cpp")]
            print(f"| {m} | {mode} | {peer_r['cold_ttft_ms'] / ours['cold_ttft_ms']:.2f}× | "
                  f"{peer_r['warm_ttft_ms'] / ours['warm_ttft_ms']:.2f}× |")
    if a.json:
        with open(a.json + ".part", "w") as f:
            json.dump({"threads": a.threads, "runs": a.runs, "prompt": PROMPT, "rows": rows, "starts": starts}, f, indent=1)
        os.replace(a.json + ".part", a.json)


if __name__ == "__main__":
    main()
