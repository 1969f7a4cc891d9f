//! Farm hygiene: host-side devices (`local`, `sim:*`) share this host's cores, so by default
//! they run one at a time (`[defaults] max_parallel_host = 1`); raised, they overlap. Two local
//! devices and a simulated handset with a stand-in binary that takes a measurable time per
//! step and writes a recorded run.

mod farm_util;

use farm_util::farm_night;

fn farm(max_parallel: Option<usize>) -> serde_json::Value {
    let tmp = tempfile::tempdir().unwrap();
    let defaults = max_parallel
        .map(|n| format!("[defaults]\nmax_parallel_host = {n}\n"))
        .unwrap_or_default();
    let devices = format!(
        "{defaults}\n[[device]]\nname = \"host-a\"\ntransport = \"local\"\n\n\
         [[device]]\nname = \"host-b\"\ntransport = \"local\"\n\n\
         [[device]]\nname = \"sim\"\ntransport = \"sim:pixel-8-pro\"\n"
    );
    let suite = "name = \"t\"\n[[step]]\nname = \"s\"\nargs = [\"run\", \"--out\", \"{out}\"]\n";
    farm_night(tmp.path(), &devices, suite, 0.4).2
}

/// Each device's `(began_s, ended_s)`, sorted by start.
fn spans(report: &serde_json::Value) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["status"], "ok", "{d}");
            (
                d["began_s"].as_f64().unwrap(),
                d["ended_s"].as_f64().unwrap(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

#[test]
fn host_side_devices_run_one_at_a_time_unless_allowed_more() {
    let serial = spans(&farm(None));
    assert_eq!(serial.len(), 3);
    for w in serial.windows(2) {
        assert!(w[1].0 >= w[0].1, "host-side devices overlapped: {serial:?}");
    }
    let parallel = spans(&farm(Some(3)));
    assert!(
        parallel.windows(2).any(|w| w[1].0 < w[0].1),
        "with max_parallel_host = 3 they should overlap: {parallel:?}"
    );
}
