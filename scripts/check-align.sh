#!/usr/bin/env bash
# Checks that `pocketperf model align` writes a GGUF that llama.cpp still loads: the output is
# read back with llama.cpp's own Python reader (gguf-py, the PyPI package `gguf`), and must
# hold the input's metadata (plus general.alignment), the same tensors in the same order with
# the same types and shapes, every tensor's data on a 4096-byte boundary and byte-identical
# to the input's.
#
# usage: scripts/check-align.sh [IN.gguf [OUT.gguf]]   (default IN: the reference model)
# needs: python3 with `gguf` (pip install gguf==0.19.0); POCKETPERF_BIN overrides the binary.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${POCKETPERF_BIN:-target/release/pocketperf}"
if [ ! -x "$bin" ]; then
  cargo build --release -q -p pocketperf
fi
if ! python3 -c "import gguf" 2>/dev/null; then
  echo "check-align: the python package gguf is missing (pip install gguf==0.19.0)" >&2
  exit 2
fi
in="${1:-$("$bin" model fetch)}"
tmp=""
if [ -n "${2:-}" ]; then
  out="$2"
else
  tmp="$(mktemp -d)"
  out="$tmp/aligned.gguf"
fi
trap '[ -n "$tmp" ] && rm -rf "$tmp"' EXIT

"$bin" model align --to 4096 "$in" "$out"

python3 - "$in" "$out" 4096 <<'PY'
import sys
import importlib.metadata
import gguf

src_path, out_path, align = sys.argv[1], sys.argv[2], int(sys.argv[3])
src = gguf.GGUFReader(src_path)
out = gguf.GGUFReader(out_path)
problems = []

def value(field):
    v = field.contents()
    return v.tolist() if hasattr(v, "tolist") else v

if out.alignment != align:
    problems.append(f"alignment {out.alignment}, expected {align}")
if value(out.fields["general.alignment"]) != align:
    problems.append("general.alignment is not written")
skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.alignment"}
src_keys = [k for k in src.fields if k not in skip]
out_keys = [k for k in out.fields if k not in skip]
if src_keys != out_keys:
    problems.append(f"metadata keys differ: {sorted(set(src_keys) ^ set(out_keys))}")
for k in src_keys:
    if k in out.fields and value(src.fields[k]) != value(out.fields[k]):
        problems.append(f"metadata {k} differs")
if [t.name for t in src.tensors] != [t.name for t in out.tensors]:
    problems.append("tensor names or order differ")
for a, b in zip(src.tensors, out.tensors):
    if (a.tensor_type, list(a.shape), a.n_bytes) != (b.tensor_type, list(b.shape), b.n_bytes):
        problems.append(f"{a.name}: type/shape/size differ")
    if b.data_offset % align:
        problems.append(f"{b.name}: data at {b.data_offset} is not {align}-aligned")
    if a.data.tobytes() != b.data.tobytes():
        problems.append(f"{b.name}: data bytes differ")
if problems:
    for p in problems[:20]:
        print(f"check-align: {out_path}: {p}", file=sys.stderr)
    sys.exit(1)
print(f"check-align: {out_path}: gguf-py {importlib.metadata.version('gguf')} reads "
      f"{len(out.tensors)} tensors and {len(out_keys)} metadata keys; every tensor "
      f"{align}-aligned and byte-identical to {src_path}")
PY
