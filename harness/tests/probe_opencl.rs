//! `pocketperf probe` lists the OpenCL platforms and devices of this host after the sensors:
//! PoCL (installed by `scripts/setup.sh`) with its CPU device, and, when the ICD loader sees
//! no driver, the reason instead, with the sensor report intact and exit status 0.

use std::process::{Command, Output};

fn probe(args: &[&str], vendors: Option<&std::path::Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pocketperf"));
    c.arg("probe").args(args);
    if let Some(v) = vendors {
        c.env("OCL_ICD_VENDORS", v);
    }
    c.output().expect("pocketperf runs")
}

fn json(o: &Output) -> serde_json::Value {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("probe --json prints JSON")
}

#[test]
fn probe_lists_pocl_and_its_cpu_device() {
    let d = json(&probe(&["--device", "sim:pixel-8-pro", "--json"], None));
    let platforms = d["opencl"]["platforms"].as_array().unwrap();
    let pocl = platforms
        .iter()
        .find(|p| {
            p["name"]
                .as_str()
                .unwrap()
                .contains("Portable Computing Language")
        })
        .unwrap_or_else(|| panic!("no PoCL platform in {platforms:?}"));
    let dev = &pocl["devices"][0];
    assert_eq!(dev["device_type"], "cpu");
    // PoCL's CPU device has one compute unit per logical CPU of this host.
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(dev["compute_units"].as_u64().unwrap(), cpus);
    assert!(dev["global_mem_bytes"].as_u64().unwrap() > 0);
    // The sensor report is still there.
    assert!(d.get("opencl").is_some() && d.as_object().unwrap().len() > 1);

    let o = probe(&["--device", "sim:pixel-8-pro"], None);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("OpenCL (this host):"), "{text}");
    assert!(text.contains("Portable Computing Language"), "{text}");
}

#[test]
fn probe_without_an_opencl_driver_says_why_and_keeps_the_sensors() {
    let empty = tempfile::tempdir().unwrap();
    let with = json(&probe(&["--device", "sim:pixel-8-pro", "--json"], None));
    let without = json(&probe(
        &["--device", "sim:pixel-8-pro", "--json"],
        Some(empty.path()),
    ));
    assert_eq!(without["opencl"]["platforms"], serde_json::json!([]));
    let err = without["opencl"]["error"].as_str().unwrap();
    assert!(err.contains("no OpenCL platform"), "{err}");
    // Everything but the OpenCL section is unchanged.
    let strip = |mut v: serde_json::Value| {
        v.as_object_mut().unwrap().remove("opencl");
        v
    };
    let (a, b) = (strip(with), strip(without));
    assert_eq!(
        a.as_object().unwrap().keys().collect::<Vec<_>>(),
        b.as_object().unwrap().keys().collect::<Vec<_>>()
    );
}
