//! The gate's JUnit XML against the Jenkins xunit plugin's `junit-10.xsd` (the copy pytest
//! 8.3.4's source package carries, fetched and sha256-checked by `scripts/setup.sh`), checked
//! by libxml2's own validator (`xmllint --schema`): a passing gate, a regression, a gate whose
//! runs are not comparable and one that could not read its rules.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use pocketperf_reports::gate::{GateRules, gate_results};
use pocketperf_reports::schema::ResultFile;
use pocketperf_reports::{GateOutcome, GateStatus};

/// Where `scripts/setup.sh` puts the schema (`POCKETPERF_JUNIT_XSD` overrides).
fn schema_path() -> PathBuf {
    if let Some(p) = std::env::var_os("POCKETPERF_JUNIT_XSD") {
        return p.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME is set");
    cache.join("pocketperf/schemas/junit-10.xsd")
}

/// Validates `xml` with xmllint; panics with its report when the file is invalid.
fn assert_valid(xml: &str, what: &str) {
    let xsd = schema_path();
    assert!(
        xsd.is_file(),
        "{} is missing: run scripts/setup.sh (it fetches the schema)",
        xsd.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gate.junit.xml");
    std::fs::write(&file, xml).unwrap();
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&xsd)
        .arg(&file)
        .output()
        .expect("xmllint runs (scripts/setup.sh installs libxml2-utils)");
    assert!(
        out.status.success(),
        "{what}: not valid against junit-10.xsd:\n{}\n{xml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn outcome(base: &ResultFile, cand: &ResultFile) -> GateOutcome {
    gate_results(
        Path::new("runs/base"),
        base,
        Path::new("runs/cand"),
        cand,
        &GateRules::default(),
    )
}

#[test]
fn gate_junit_is_valid_against_the_jenkins_xunit_schema() {
    let ctx = common::fixed_ctx();
    let pass = outcome(
        &common::lognormal_result(11, 40.0),
        &common::lognormal_result(12, 40.0),
    );
    assert_eq!(pass.status, GateStatus::Pass, "{}", pass.to_text());
    assert_valid(&pass.to_junit(&ctx), "passing gate");

    let regression = outcome(
        &common::lognormal_result(1, 40.0),
        &common::lognormal_result(2, 44.0),
    );
    assert_eq!(regression.status, GateStatus::Regression);
    let xml = regression.to_junit(&ctx);
    assert_valid(&xml, "regression");
    // The failure has a body with the figures, and the suite the candidate run's duration.
    let failure = xml
        .split("<failure ")
        .nth(1)
        .and_then(|f| f.split("</failure>").next())
        .unwrap_or_else(|| panic!("no failure element with a body: {xml}"));
    for word in [
        "baseline: ",
        "candidate: ",
        "change: +",
        "p-value: ",
        "Mann-Whitney",
    ] {
        assert!(failure.contains(word), "{word} missing in {failure}");
    }
    let cand = common::lognormal_result(2, 44.0);
    let secs = (cand.meta.finished_utc - cand.meta.started_utc).num_milliseconds() as f64 / 1e3;
    assert!(
        xml.contains(&format!("time=\"{secs:.3}\"")),
        "suite time {secs:.3} s missing: {xml}"
    );

    let mut other = common::lognormal_result(2, 40.0);
    other.meta.threads += 1;
    let refused = outcome(&common::lognormal_result(1, 40.0), &other);
    assert_eq!(refused.status, GateStatus::Error);
    assert_valid(&refused.to_junit(&ctx), "not comparable");

    let failed = GateOutcome::failed("b", "c", "rules.toml: bad <key> & \u{1}");
    assert_valid(&failed.to_junit(&ctx), "unreadable rules");
}
