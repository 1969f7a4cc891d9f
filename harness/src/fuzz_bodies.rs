//! Fuzz bodies for the parsers that read what users, devices and files supply beyond GGUF
//! (issue 19, `docs/RELIABILITY.md`): the serve protocol, LoadGen `user.conf` lines, gate
//! rules, farm suites and inventories (TOML), `result.json` and `telemetry.csv`. Each takes
//! arbitrary bytes and must return without panicking or hanging, whatever they hold; what it
//! parses it also uses (validation, a comparison, a plot), so a value that parses but breaks
//! a consumer is found too.
//!
//! `harness/tests/fuzz_parsers.rs` runs each body over mutated seeds, a bounded number of
//! cases, in every CI run; each is also the body of the cargo-fuzz target of its name
//! (`fuzz/fuzz_targets/<name>.rs`).

use std::path::Path;

use pocketperf_reports::gate::GateRules;
use pocketperf_reports::plots::{Series, line_chart};
use pocketperf_scenarios::{Scenario, TestSettings};

use crate::farm::inventory::Inventory;
use crate::farm::suite::Suite;
use crate::serve::protocol::{LineRead, parse_event, parse_request, read_line_capped};

/// A fuzz body: any bytes in, nothing out; it must return without panicking.
pub type FuzzBody = fn(&[u8]);

/// Every fuzz body by name, for drivers that run them all.
pub const BODIES: [(&str, FuzzBody); 7] = [
    ("serve_protocol", serve_protocol),
    ("loadgen_config", loadgen_config),
    ("gate_rules", gate_rules),
    ("suite_toml", suite_toml),
    ("inventory_toml", inventory_toml),
    ("result_json", result_json),
    ("telemetry_csv", telemetry_csv),
];

fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// The server's side (each line as a request, framed by the capped line reader) and the
/// client's (each line as an event).
pub fn serve_protocol(data: &[u8]) {
    let mut r = std::io::BufReader::new(data);
    for _ in 0..1024 {
        match read_line_capped(&mut r, 1 << 16) {
            Ok(LineRead::Line(line)) => {
                if let Ok((_, req)) = parse_request(&line) {
                    let _ = req.op();
                }
                let _ = parse_event(&String::from_utf8_lossy(&line));
            }
            Ok(LineRead::TooLong(_)) => {}
            Ok(LineRead::Eof) | Err(_) => break,
        }
    }
    let _ = parse_request(data);
}

/// `user.conf` text applied for each scenario, then validated and sized as a run would.
pub fn loadgen_config(data: &[u8]) {
    let t = text(data);
    for scenario in [Scenario::SingleStream, Scenario::Offline, Scenario::Server] {
        let mut s = TestSettings::new(scenario);
        if s.apply_config_str(&t, "fuzz.conf", "llm").is_ok() && s.validate().is_ok() {
            let _ = pocketperf_scenarios::offline_sample_count(&s, 24);
        }
    }
}

/// Gate rules TOML, validated.
pub fn gate_rules(data: &[u8]) {
    if let Ok(r) = GateRules::from_toml_str(&text(data), Path::new("fuzz.toml")) {
        let _ = r.validate();
    }
}

/// A farm suite TOML.
pub fn suite_toml(data: &[u8]) {
    let _ = Suite::from_toml_str(&text(data), Path::new("fuzz-suite.toml"));
}

/// A farm device inventory TOML, each device's `--device` argument built.
pub fn inventory_toml(data: &[u8]) {
    if let Ok(inv) = Inventory::from_toml_str(&text(data), Path::new("fuzz-devices.toml")) {
        for d in &inv.devices {
            let _ = d.transport.device_arg();
        }
    }
}

/// `result.json` (any schema version), compared with itself for comparability.
pub fn result_json(data: &[u8]) {
    if let Ok(r) = pocketperf_reports::schema::parse_result(&text(data), Path::new("result.json")) {
        let _ = pocketperf_reports::comparability::differences(&r, &r);
    }
}

/// `telemetry.csv`, every column plotted as the report plots it.
pub fn telemetry_csv(data: &[u8]) {
    let Ok(t) = pocketperf_reports::datafiles::parse_telemetry(&text(data), Path::new("t.csv"))
    else {
        return;
    };
    let series: Vec<Series> = t
        .columns
        .iter()
        .take(4)
        .map(|(name, col)| Series {
            name: name.clone(),
            points: t.points(col),
        })
        .collect();
    let _ = line_chart("fuzz", "t (s)", "value", &series);
}
