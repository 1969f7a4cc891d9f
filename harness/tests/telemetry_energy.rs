//! Acceptance: on each simulated handset, mWh per dialogue computed by the harness (probe →
//! sampler → energy meter → attribution, reading the simulated sysfs tree) equals the
//! simulator's ground-truth energy within 2 %, gross and net of the idle baseline. Runs the
//! real dialogue loop over the committed dialogues with a decoder at the handset's own speed,
//! in virtual time (fast-forwarded: a few minutes of handset time in well under a second).

use pocketperf::run::dialogue::{SimulatedSut, run_dialogues};
use pocketperf::sim::model::{Activity, profile};
use pocketperf::telemetry::probe::MeterKind;
use pocketperf::telemetry::recorder::{SimTruth, energy_section, truth_check};
use pocketperf::telemetry::sampler::SamplerConfig;
use pocketperf::telemetry::{DialogueSpan, VirtualRig};
use pocketperf_datasets::dialogue::dialogues;

const IDLE: Activity = Activity {
    busy: 0.0,
    freq_level: 0,
};

struct Outcome {
    meter: MeterKind,
    measured_gross: Vec<f64>,
    truth_gross: Vec<f64>,
    measured_net: Vec<f64>,
    truth_net: Vec<f64>,
    idle_w: f64,
    truth_idle_w: f64,
    energy: pocketperf_reports::schema::Energy,
    tokens: u64,
}

fn run_profile(name: &str) -> Outcome {
    let mut rig = VirtualRig::new(name, SamplerConfig::default()).unwrap();
    let clock = rig.clock();
    // Idle baseline: 10 s with the workload idle.
    let i0 = rig.now_ns();
    rig.advance(10_000_000_000, IDLE).unwrap();
    let i1 = rig.now_ns();
    let set = dialogues();
    let (records, errors) = {
        // 1.25 s idle before each dialogue: boundaries fall between samples.
        let mut sut = SimulatedSut::new(&mut rig, 1_250_000_000);
        run_dialogues(&mut sut, set, &|| clock(), |_| {})
    };
    assert!(errors.is_empty(), "{errors:?}");
    rig.advance(500_000_000, IDLE).unwrap();
    let rec = rig.finish(Some((i0, i1))).unwrap();
    let truth = SimTruth::from_trace(name, rec.trace.clone());
    let spans: Vec<DialogueSpan> = records.iter().map(|r| r.span()).collect();
    let summary = rec.report.dialogue_summary(&spans);
    assert_eq!(summary.n, set.len());
    let idle_w = rec.report.idle_power_w().unwrap();
    let truth_idle_w = truth.energy_between_j(i0, i1).unwrap() / ((i1 - i0) as f64 / 1e9);
    let mut o = Outcome {
        meter: rec.report.probe.meter.as_ref().unwrap().kind,
        measured_gross: Vec::new(),
        truth_gross: Vec::new(),
        measured_net: Vec::new(),
        truth_net: Vec::new(),
        idle_w,
        truth_idle_w,
        energy: energy_section(&rec.report, &summary, &spans).expect("energy section"),
        tokens: summary.tokens,
    };
    for (a, s) in summary.per_dialogue.iter().zip(&spans) {
        let a = a.as_ref().expect("dialogue inside the recording");
        let t = truth.energy_between_j(s.start_ns, s.end_ns).unwrap();
        let dur = (s.end_ns - s.start_ns) as f64 / 1e9;
        o.measured_gross.push(a.gross_j);
        o.truth_gross.push(t);
        o.measured_net.push(a.net_j.unwrap());
        o.truth_net.push(t - truth_idle_w * dur);
    }
    let tc = truth_check(
        &summary.per_dialogue,
        &spans
            .iter()
            .map(|s| (s.start_ns, s.end_ns))
            .collect::<Vec<_>>(),
        |a, b| truth.energy_between_j(a, b),
    )
    .unwrap();
    assert!(tc.max_rel_error_gross < 0.02, "{tc:?}");
    o
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

fn check(name: &str, want_meter: MeterKind) {
    let o = run_profile(name);
    assert_eq!(o.meter, want_meter, "{name}");
    let p = profile(name).unwrap();
    // The model's idle draw is its idle power exactly; the measured baseline matches it.
    assert!(rel(o.truth_idle_w, p.idle_w) < 1e-9, "{}", o.truth_idle_w);
    assert!(
        rel(o.idle_w, p.idle_w) < 0.02,
        "idle {} W vs {} W",
        o.idle_w,
        p.idle_w
    );
    for i in 0..o.measured_gross.len() {
        let g = rel(o.measured_gross[i], o.truth_gross[i]);
        let n = rel(o.measured_net[i], o.truth_net[i]);
        assert!(
            g < 0.02,
            "{name} dialogue {i}: gross {} vs {} J",
            o.measured_gross[i],
            o.truth_gross[i]
        );
        assert!(
            n < 0.02,
            "{name} dialogue {i}: net {} vs {} J",
            o.measured_net[i],
            o.truth_net[i]
        );
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let mwh = 1.0 / 3.6;
    let e = &o.energy;
    eprintln!(
        "{name}: {} dialogues, gross {:.3} mWh (truth {:.3}), net {:.3} mWh (truth {:.3}) \
         [{:.3}, {:.3}], {:.4} J/token, {:.2} tokens/J, idle {:.1} mW",
        o.measured_gross.len(),
        e.mwh_per_dialogue_gross.mean,
        mean(&o.truth_gross) * mwh,
        e.mwh_per_dialogue_net.mean,
        mean(&o.truth_net) * mwh,
        e.mwh_per_dialogue_net.lo,
        e.mwh_per_dialogue_net.hi,
        e.j_per_token,
        e.tokens_per_j,
        e.idle_power_mw
    );
    assert!(rel(e.mwh_per_dialogue_gross.mean, mean(&o.truth_gross) * mwh) < 0.02);
    assert!(rel(e.mwh_per_dialogue_net.mean, mean(&o.truth_net) * mwh) < 0.02);
    // The interval brackets the mean; net < gross; J/token and tokens/J are reciprocal.
    let g = e.mwh_per_dialogue_gross;
    assert!(g.lo <= g.mean && g.mean <= g.hi && g.n == o.measured_gross.len() as u64);
    assert!(e.mwh_per_dialogue_net.mean < g.mean);
    assert!((e.j_per_token * e.tokens_per_j - 1.0).abs() < 1e-9);
    let net_j: f64 = o.measured_net.iter().sum();
    assert!(rel(e.j_per_token, net_j / o.tokens as f64) < 1e-9);
    assert!(e.reliable);
    assert_eq!(e.per_dialogue.len(), o.measured_gross.len());
    assert!(e.per_dialogue.iter().all(|d| d.tokens == 200));
}

#[test]
fn snapdragon_mwh_per_dialogue_matches_ground_truth_within_2_percent() {
    // No ODPM on this handset: charge_counter × voltage meters it.
    check("snapdragon-8gen3", MeterKind::ChargeCounter);
}

#[test]
fn pixel_mwh_per_dialogue_matches_ground_truth_within_2_percent() {
    // ODPM rails (µW·s counters) meter it.
    check("pixel-8-pro", MeterKind::Odpm);
}

#[test]
fn vendor_throttling_shows_in_the_sampled_tree() {
    // Five virtual minutes flat out: the vendor's trip points cap the prime cluster, which
    // the sampler sees as scaling_max_freq below cpuinfo_max_freq.
    // One sample a second is enough to see minutes-long throttling.
    let cfg = SamplerConfig {
        period: std::time::Duration::from_secs(1),
        ..SamplerConfig::default()
    };
    let mut rig = VirtualRig::new("sim:snapdragon-8gen3", cfg).unwrap();
    let top = rig.model().profile().max_level();
    rig.advance(
        300_000_000_000,
        Activity {
            busy: 1.0,
            freq_level: top,
        },
    )
    .unwrap();
    assert!(rig.model().vendor_throttling());
    let rec = rig.finish(None).unwrap();
    let throttled = rec.report.summary.throttled_s.unwrap();
    assert!(throttled > 10.0 && throttled < 300.0, "{throttled}");
    // The die held near its 85 °C trip, the hottest SoC zone is the die node.
    let peak = rec.report.summary.soc_peak_c.unwrap();
    assert!(peak > 84.0 && peak < 92.0, "{peak}");
    // Battery counters agree with the model's integrated energy over the whole run.
    let e = rec.report.summary.energy_j.unwrap();
    let t = rec.trace.last().unwrap().energy_j - rec.trace[0].energy_j;
    assert!(rel(e, t) < 0.01, "{e} vs {t}");
}
