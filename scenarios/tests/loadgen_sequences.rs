//! Sample choice and the Server schedule against independent outputs: values MLPerf
//! LoadGen 6.0.17 itself loaded, issued and scheduled (through `run_test`, the engine's real
//! code path), and values g++'s libstdc++ produced for the engine and distributions the
//! sampling module reimplements (`tests/data/README.md` says how each file was made).

use pocketperf_scenarios::sampling::{Mt19937, libstdcxx};
use pocketperf_scenarios::{
    NullQsl, Query, Responder, Scenario, SystemUnderTest, TestMode, TestSettings, VirtualClock,
    run_test,
};
use serde_json::Value;

fn data(name: &str) -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("u64"))
        .collect()
}

#[derive(Default)]
struct Recorder {
    samples: Vec<u64>,
}

impl SystemUnderTest for Recorder {
    fn name(&self) -> &str {
        "Recorder"
    }
    fn issue_queries(&mut self, queries: &[Query], responder: &mut Responder<'_>) {
        for q in queries {
            self.samples.push(q.sample_index);
            responder.complete(q.id, 0, None);
        }
    }
}

#[test]
fn engine_issues_what_loadgen_issued() {
    let d = data("loadgen-6.0.17-sequences.json");
    let cases = d["cases"].as_array().expect("cases");
    assert!(cases.len() >= 12, "pinned file holds {} cases", cases.len());
    let mut checked = 0usize;
    for c in cases {
        let scenario = match c["scenario"].as_str().expect("scenario") {
            "SingleStream" => Scenario::SingleStream,
            "Server" => Scenario::Server,
            "Offline" => Scenario::Offline,
            other => panic!("scenario {other}"),
        };
        let want_loaded = u64s(&c["loaded_head"]);
        let want_samples = u64s(&c["samples_head"]);
        let want_sched = u64s(&c["scheduled_ns_head"]);
        let mut s = TestSettings::new(scenario);
        s.mode = TestMode::PerformanceOnly;
        s.min_duration_ms = c["min_duration_ms"].as_u64().expect("min_duration_ms");
        s.min_query_count = c["min_queries"].as_u64().expect("min_queries");
        s.max_query_count = want_samples.len() as u64;
        s.sample_concatenate_permutation = c["equal_issue"].as_bool().expect("equal_issue");
        s.qsl_rng_seed = c["qsl_seed"].as_u64().expect("seed");
        s.sample_index_rng_seed = c["sample_seed"].as_u64().expect("seed");
        s.schedule_rng_seed = c["schedule_seed"].as_u64().expect("seed");
        let qps = c["qps"].as_f64().expect("qps");
        if scenario == Scenario::Server {
            s.server_target_qps = qps;
        }
        let mut qsl = NullQsl {
            total: c["total"].as_u64().expect("total"),
            performance: c["performance"].as_u64().expect("performance"),
        };
        let mut sut = Recorder::default();
        let r = run_test(&mut sut, &mut qsl, &s, &VirtualClock::new()).expect("run");
        let what = format!("{c:.200}");
        assert_eq!(
            &r.loaded_set[..want_loaded.len()],
            &want_loaded[..],
            "{what}"
        );
        assert_eq!(sut.samples, want_samples, "issued samples, {what}");
        let start = r.performance.as_ref().expect("performance").start_ns;
        let recs: Vec<_> = r.query_records().collect();
        let regenerated: Vec<u64> = recs.iter().map(|q| q.sample_index).collect();
        assert_eq!(regenerated, want_samples, "regenerated samples, {what}");
        if scenario == Scenario::Server {
            let sched: Vec<u64> = recs.iter().map(|q| q.issue_ns - start).collect();
            assert_eq!(sched, want_sched, "schedule, {what}");
            checked += sched.len();
        }
        checked += want_loaded.len() + want_samples.len();
    }
    assert!(checked >= 500, "only {checked} values compared");
}

#[test]
fn mt19937_matches_libstdcxx() {
    let d = data("libstdcxx-vectors.json");
    for c in d["mt19937"].as_array().expect("mt19937") {
        let mut g = Mt19937::new(c["seed"].as_u64().expect("seed"));
        let got: Vec<u64> = (0..8).map(|_| u64::from(g.next_u32())).collect();
        assert_eq!(got, u64s(&c["out"]), "seed {}", c["seed"]);
    }
}

#[test]
fn uniform_int_matches_libstdcxx_on_every_path() {
    let d = data("libstdcxx-vectors.json");
    // Ranges below, at and above the engine's 2^32 values: Lemire reduction, the direct
    // word and the upscaling recursion.
    for c in d["uniform_int"].as_array().expect("uniform_int") {
        let b = c["b"].as_u64().expect("b");
        let mut g = Mt19937::new(42);
        let got: Vec<u64> = (0..12)
            .map(|_| libstdcxx::uniform_int(&mut g, 0, b))
            .collect();
        assert_eq!(got, u64s(&c["out"]), "[0, {b}]");
    }
}

#[test]
fn shuffle_matches_libstdcxx_on_both_paths() {
    let d = data("libstdcxx-vectors.json");
    for c in d["shuffle"].as_array().expect("shuffle") {
        let n = c["n"].as_u64().expect("n") as usize;
        let mut g = Mt19937::new(7);
        let mut v: Vec<u64> = (0..n as u64).collect();
        libstdcxx::shuffle(&mut v, &mut g);
        let k = n.min(16);
        assert_eq!(v[..k].to_vec(), u64s(&c["head"]), "head, n={n}");
        assert_eq!(v[n - k..].to_vec(), u64s(&c["tail"]), "tail, n={n}");
        // The engine is left where libstdc++ leaves it: same number of draws.
        assert_eq!(
            u64::from(g.next_u32()),
            c["next"].as_u64().expect("next"),
            "n={n}"
        );
    }
}

#[test]
fn real_distributions_match_libstdcxx() {
    let d = data("libstdcxx-vectors.json");
    let mut g = Mt19937::new(d["canonical_seed"].as_u64().expect("seed"));
    for (i, want) in u64s(&d["canonical_bits"]).into_iter().enumerate() {
        assert_eq!(
            libstdcxx::generate_canonical(&mut g).to_bits(),
            want,
            "canonical #{i}"
        );
    }
    for (i, want) in u64s(&d["uniform_real_2_5_to_7_bits"])
        .into_iter()
        .enumerate()
    {
        let got = libstdcxx::uniform_real(&mut g, 2.5, 7.0).to_bits();
        assert_eq!(got, want, "uniform_real #{i}");
    }
    // −ln(1 − u)/λ goes through the C library's log; glibc's agrees bit for bit, another
    // libm may differ in the last place.
    for (i, want) in u64s(&d["exponential_1000_bits"]).into_iter().enumerate() {
        let got = libstdcxx::exponential(&mut g, 1000.0).to_bits();
        assert!(
            got.abs_diff(want) <= 1,
            "exponential #{i}: {got:#x} vs {want:#x}"
        );
    }
}
