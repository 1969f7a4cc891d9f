//! Bounded fuzzing, in every CI run, of the parsers beyond GGUF (`pocketperf::fuzz_bodies`):
//! each body gets its seeds (real files of the project and hand-written hostile ones) and a
//! fixed number of mutations of them — bit flips, random bytes, hostile tokens spliced in
//! (`1e308`, `nan`, `18446744073709551615`, unbalanced brackets, deep nesting, control
//! characters), truncations and cross-seed splices — from a fixed seed, so a failure
//! reproduces. A body must return (no panic) within its time budget. `docs/RELIABILITY.md`
//! says how many cases run and how long they take.

use std::path::Path;
use std::time::{Duration, Instant};

use pocketperf::fuzz_bodies;
use pocketperf_testkit::Rng;

/// Mutated cases per body.
const CASES: usize = 1500;
/// Wall-clock budget of one body's cases (generous: shared CI machines are slow).
const BUDGET: Duration = Duration::from_secs(20);

fn repo(p: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const TOKENS: [&str; 18] = [
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "-0",
    "18446744073709551615",
    "-9223372036854775808",
    "0.0000000001",
    "\"",
    "[",
    "]",
    "{",
    "}",
    "=",
    ",",
    "\n",
    "\u{1b}[31m",
    "\u{0}",
];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = |rng: &mut Rng, b: &Vec<u8>| rng.below(b.len() as u64 + 1) as usize;
        match rng.below(7) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len() as u64) as usize;
                b[i] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let i = rng.below(b.len() as u64) as usize;
                b[i] = rng.next_u64() as u8;
            }
            2 | 3 => {
                let i = at(rng, &b);
                let t = TOKENS[rng.below(TOKENS.len() as u64) as usize];
                b.splice(i..i, t.bytes());
            }
            4 => {
                let i = at(rng, &b);
                b.truncate(i);
            }
            5 => {
                let other = &seeds[rng.below(seeds.len() as u64) as usize];
                let i = at(rng, &b);
                let j = rng.below(other.len() as u64 + 1) as usize;
                b.truncate(i);
                b.extend_from_slice(&other[j..]);
            }
            _ => {
                // Replace a number-like run of digits with a hostile number.
                if let Some(i) = b.iter().position(|c| c.is_ascii_digit()) {
                    let end = b[i..]
                        .iter()
                        .position(|c| !c.is_ascii_digit() && *c != b'.')
                        .map_or(b.len(), |n| i + n);
                    let t = TOKENS[rng.below(8) as usize];
                    b.splice(i..end, t.bytes());
                }
            }
        }
    }
    b
}

fn fuzz(name: &str, body: fn(&[u8]), mut seeds: Vec<Vec<u8>>) {
    // Hostile seeds every parser gets: empty, deep nesting, a long line, control bytes.
    seeds.push(Vec::new());
    seeds.push(b"[".repeat(100_000));
    seeds.push(vec![b'a'; 200_000]);
    seeds.push((0u8..=255).collect());
    let t0 = Instant::now();
    for s in &seeds {
        body(s);
    }
    let mut rng = Rng::new(0x19_f022);
    for case in 0..CASES {
        let seed = &seeds[case % seeds.len()];
        let input = mutate(&mut rng, &seeds, seed);
        body(&input);
    }
    let took = t0.elapsed();
    assert!(took < BUDGET, "{name}: {CASES} cases took {took:?}");
    eprintln!("{name}: {} cases in {took:?}", CASES + seeds.len());
}

fn lines(text: &str) -> Vec<Vec<u8>> {
    text.lines().map(|l| l.as_bytes().to_vec()).collect()
}

#[test]
fn fuzz_serve_protocol() {
    let mut seeds = lines(concat!(
        r#"{"id":1,"op":"hello"}"#,
        "\n",
        r#"{"id":2,"op":"load","model":"m.gguf","threads":2,"ctx":256,"max_batch":4}"#,
        "\n",
        r#"{"id":3,"op":"query","prompt":{"text":"hi","chat":true},"max_new_tokens":8}"#,
        "\n",
        r#"{"id":4,"op":"score","prompt":{"messages":[{"role":"user","content":"q"}]},"continuations":[" A"," B"]}"#,
        "\n",
        r#"{"id":5,"op":"stats"}"#,
        "\n",
        r#"{"event":"token","id":3,"token":"x","t_ns":12}"#,
        "\n",
        r#"{"id":6,"op":"hello","op":"shutdown"}"#,
    ));
    let all: Vec<u8> = seeds.join(&b'\n');
    seeds.push(all);
    fuzz("serve_protocol", fuzz_bodies::serve_protocol, seeds);
}

#[test]
fn fuzz_loadgen_config() {
    let seeds = lines(concat!(
        "*.SingleStream.min_query_count = 64\n",
        "llm.Server.target_qps = 0.5\n",
        "*.Offline.target_qps = 2\n",
        "*.Server.target_latency = 20000\n",
        "*.*.min_duration = 5000\n",
        "*.*.max_duration = 150000\n",
        "*.Server.ttft_latency = 10000\n",
        "# comment\n",
        "*.*.sample_concatenate_permutation = 1\n",
    ));
    let all = seeds.join(&b'\n');
    let mut seeds = seeds;
    seeds.push(all);
    fuzz("loadgen_config", fuzz_bodies::loadgen_config, seeds);
}

#[test]
fn fuzz_gate_rules() {
    fuzz(
        "gate_rules",
        fuzz_bodies::gate_rules,
        vec![
            repo("ci/gate.toml"),
            b"[performance]\nalpha = 0.05\nmin_samples = 8\n[accuracy]\nmax_drop = 0.02\n".to_vec(),
        ],
    );
}

#[test]
fn fuzz_suite_and_inventory_toml() {
    let seeds = vec![repo("ci/nightly.toml"), repo("ci/devices.example.toml")];
    fuzz("suite_toml", fuzz_bodies::suite_toml, seeds.clone());
    fuzz("inventory_toml", fuzz_bodies::inventory_toml, seeds);
}

#[test]
fn fuzz_result_json() {
    fuzz(
        "result_json",
        fuzz_bodies::result_json,
        vec![
            repo("reports/tests/fixtures/real-singlestream-a/result.json"),
            repo("reports/tests/fixtures/real-singlestream-b/result.json"),
            br#"{"tool_version":"0.0.3","git_commit":"abc","device":"sim:x","queries":3}"#.to_vec(),
        ],
    );
}

#[test]
fn fuzz_telemetry_csv() {
    fuzz(
        "telemetry_csv",
        fuzz_bodies::telemetry_csv,
        vec![
            b"# device=sim:x\nt_s,temp.soc.c,power.mw\n0,40,1000\n1,41,1200\n2,42,900\n".to_vec(),
            b"t_s,temp.soc.c\n0,1e308\n1,-1e308\n2,40\n".to_vec(),
            b"t_s,a,b,c\n0,,1,\n0.5,2,,3\n1,nan,inf,4\n".to_vec(),
        ],
    );
}
