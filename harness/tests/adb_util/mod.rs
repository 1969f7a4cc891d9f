//! What the farm tests over adb share: a fake `adb` on `PATH` emulating phones (storage in
//! directories of this host, `adb shell` through a real `sh`), the stand-in `pocketperf` the
//! farm pushes to them, and the record of every `adb` call.
//!
//! A phone is the directory `$FAKE_ADB_STATE/devices/<serial>`: `fixture` names the recorded
//! run its steps write; a `sys/` there is its sysfs, read by the stand-in's `probe` through
//! this build's real probe, with the thermal zones set from the next line of `readings` first.

use std::path::{Path, PathBuf};

pub const FAKE_ADB: &str = r#"#!/bin/sh
# Fake adb: devices are directories under $FAKE_ADB_STATE/devices/<serial>; their storage is
# this host's filesystem. Every invocation's argv is logged, NUL-separated, in a file of its
# own (the farm drives devices in parallel; one shared log would interleave records).
state="$FAKE_ADB_STATE"
mkdir -p "$state/argv"
rec=$(mktemp "$state/argv/call.XXXXXXXX") || exit 1
for a in "$@"; do printf '%s\000' "$a"; done > "$rec"
[ "$1" = "-s" ] || { echo "fake adb: expected -s SERIAL first" >&2; exit 1; }
serial="$2"; shift 2
dev="$state/devices/$serial"
[ -d "$dev" ] || { echo "error: device '$serial' not found" >&2; exit 1; }
if [ -f "$dev/offline" ]; then
  n=$(cat "$dev/offline_calls" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$dev/offline_calls"
  back=$(cat "$dev/back_after" 2>/dev/null || echo -1)
  if [ "$back" -ge 0 ] && [ "$n" -gt "$back" ]; then
    rm -f "$dev/offline" "$dev/offline_calls"
  else
    echo "error: device '$serial' not found" >&2; exit 1
  fi
fi
cmd="$1"; shift
case "$cmd" in
  get-state) echo device ;;
  push) [ $# -eq 2 ] || exit 1; cp "$1" "$2" || exit 1; echo "$1: 1 file pushed." ;;
  pull) [ $# -eq 2 ] || exit 1; cp -R "$1" "$2" || exit 1; echo "$1: 1 file pulled." ;;
  shell)
    [ $# -eq 1 ] || { echo "fake adb: the farm passes one command line" >&2; exit 1; }
    case "$1" in *"2>&1"*)
      runs=$(cat "$dev/runs" 2>/dev/null || echo 0); runs=$((runs + 1)); echo "$runs" > "$dev/runs"
      if [ "$runs" -eq "$(cat "$dev/drop_at_run" 2>/dev/null || echo 0)" ]; then
        touch "$dev/offline"; echo "error: closed" >&2; exit 1
      fi ;;
    esac
    cd "$state" && FAKE_DEVICE="$dev" FAKE_FIXTURE="$(cat "$dev/fixture")" sh -c "$1" ;;
  *) echo "fake adb: unsupported command $cmd" >&2; exit 1 ;;
esac
"#;

pub const FAKE_POCKETPERF: &str = r#"#!/bin/sh
# Stand-in for pocketperf on a device. `probe --json`: the phone's sensors ($FAKE_DEVICE/sys),
# its thermal zones first set from the next line of $FAKE_DEVICE/readings (words
# `thermal_zoneN=MILLIDEGREES`; the last line repeats), printed by the real probe
# ($FAKE_PROBE_BIN). Otherwise a step: checks what the farm pushed, then writes a recorded
# real run as the step's result directory.
if [ "$1" = probe ]; then
  sys="$FAKE_DEVICE/sys"
  [ -d "$sys" ] || { echo "fake pocketperf: this phone has no sensors" >&2; exit 2; }
  n=$(cat "$FAKE_DEVICE/probes" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$FAKE_DEVICE/probes"
  last=$(wc -l < "$FAKE_DEVICE/readings")
  [ "$n" -le "$last" ] || n=$last
  for kv in $(sed -n "${n}p" "$FAKE_DEVICE/readings"); do
    echo "${kv#*=}" > "$sys/class/thermal/${kv%%=*}/temp" || exit 2
  done
  shift
  exec "$FAKE_PROBE_BIN" probe --sysfs-root "$sys" "$@"
fi
echo "fake pocketperf: $*"
echo "probes before this step: $(cat "$FAKE_DEVICE/probes" 2>/dev/null || echo 0)"
out=; model=; device=; config=
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift ;;
    --model) model="$2"; shift ;;
    --device) device="$2"; shift ;;
    --config) config="$2"; shift ;;
  esac
  shift
done
echo "device=$device"
[ -n "$out" ] || { echo "no --out" >&2; exit 2; }
grep -q "fake gguf" "$model" || { echo "model $model was not pushed" >&2; exit 2; }
[ -z "$config" ] || grep -q "min_query_count" "$config" || { echo "config $config was not pushed" >&2; exit 2; }
mkdir -p "$out" && cp "$FAKE_FIXTURE/result.json" "$FAKE_FIXTURE/tokens.csv" "$out/"
"#;

/// A recorded real run of `reports/tests/fixtures`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../reports/tests/fixtures")
        .join(name)
        .canonicalize()
        .unwrap()
}

pub fn write_exe(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Writes the fake `adb` into `bin_dir` and returns a `PATH` that finds it first.
pub fn install_adb(bin_dir: &Path) -> String {
    std::fs::create_dir_all(bin_dir).unwrap();
    write_exe(&bin_dir.join("adb"), FAKE_ADB);
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Every adb invocation's argv, as the fake adb recorded it under `state`.
pub fn adb_calls(state: &Path) -> Vec<Vec<String>> {
    let Ok(dir) = std::fs::read_dir(state.join("argv")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .map(|e| std::fs::read(e.path()).unwrap())
        .map(|r| {
            r.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .collect()
}
