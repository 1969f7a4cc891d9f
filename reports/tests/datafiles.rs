//! tokens.csv and telemetry.csv: metadata lines, tolerant columns, missing cells.

use pocketperf_reports::datafiles::*;
use pocketperf_reports::render::html_helpers::{cumulative_energy_j, tokens_per_s_over_time};

#[test]
fn telemetry_keeps_unknown_columns_and_missing_cells() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("telemetry.csv");
    std::fs::write(
        &path,
        "# device=sim:x\n# period_ms = 500\nt_s,temp.soc.c,power.total.mw,vendor.mystery,gov.level\n\
         0.0,40.5,1000,7,\n0.5,,2000,8,1\n1.0,42.0,3000,,2\n",
    )
    .unwrap();
    let t = read_telemetry(&path).unwrap();
    assert_eq!(t.meta.get("device").map(String::as_str), Some("sim:x"));
    assert_eq!(t.meta.get("period_ms").map(String::as_str), Some("500"));
    assert_eq!(t.t_s, vec![0.0, 0.5, 1.0]);
    assert_eq!(
        t.column("temp.soc.c").unwrap(),
        &[Some(40.5), None, Some(42.0)]
    );
    assert_eq!(
        t.column("vendor.mystery").unwrap(),
        &[Some(7.0), Some(8.0), None]
    );
    assert_eq!(t.columns_matching("temp.", ".c").count(), 1);
    // Trapezoids: 0.5 s * 1.5 W = 0.75 J, then 0.5 s * 2.5 W = 1.25 J.
    let e = cumulative_energy_j(&t.t_s, t.column("power.total.mw").unwrap());
    assert_eq!(e, vec![(0.0, 0.0), (0.5, 0.75), (1.0, 2.0)]);
    // Round trip through the writer.
    let out = dir.path().join("copy.csv");
    write_telemetry(&out, &t).unwrap();
    assert_eq!(read_telemetry(&out).unwrap(), t);
}

#[test]
fn telemetry_errors_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("telemetry.csv");
    std::fs::write(&path, "# a=b\nt_s,temp.soc.c\n0.0,40\n0.5,hot\n").unwrap();
    let msg = read_telemetry(&path).unwrap_err().to_string();
    assert!(
        msg.contains("telemetry.csv") && msg.contains("line 4") && msg.contains("hot"),
        "{msg}"
    );
    std::fs::write(&path, "time,temp.soc.c\n0.0,40\n").unwrap();
    assert!(
        read_telemetry(&path)
            .unwrap_err()
            .to_string()
            .contains("t_s")
    );
}

#[test]
fn tokens_round_trip_and_rate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.csv");
    std::fs::write(
        &path,
        "# run=1\nquery,token,t_ms\n0,0,100\n0,1,600\n0,2,1100\n1,0,1500\n1,1,1900\n",
    )
    .unwrap();
    let log = read_tokens(&path).unwrap();
    assert_eq!(log.events.len(), 5);
    assert_eq!(
        log.events[3],
        TokenEvent {
            query: 1,
            token: 0,
            t_ms: 1500.0
        }
    );
    // 1 s windows: [0,1) holds 100 and 600 ms; [1,2) holds 1100, 1500, 1900 ms.
    assert_eq!(
        tokens_per_s_over_time(&log, 1.0),
        vec![(0.5, 2.0), (1.5, 3.0)]
    );
    let out = dir.path().join("copy.csv");
    write_tokens(&out, &log).unwrap();
    assert_eq!(read_tokens(&out).unwrap(), log);
    std::fs::write(&path, "query,token,t_ms\n0,-1,5\n").unwrap();
    let msg = read_tokens(&path).unwrap_err().to_string();
    assert!(msg.contains("line 2") && msg.contains("token"), "{msg}");
}
