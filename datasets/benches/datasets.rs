//! Throughput of the dataset paths a run touches: recomputing the MMLU-576 subset from a copy
//! (what `--verify` does), loading the subset, building its 576 five-shot prompts, and parsing
//! generated answers. Needs the shared MMLU copy (`$POCKETPERF_SHARED/datasets/mmlu`, else
//! `<workspace>/../shared/datasets/mmlu`).

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use pocketperf_datasets::score::parse_generated;
use pocketperf_datasets::{build_prompt, compute_subset, load_subset};

fn mmlu_dir() -> PathBuf {
    let shared = match std::env::var_os("POCKETPERF_SHARED") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("..")
            .join("shared"),
    };
    let dir = shared.join("datasets").join("mmlu");
    assert!(
        dir.is_dir(),
        "MMLU not found at {}: set POCKETPERF_SHARED",
        dir.display()
    );
    dir
}

fn benches(c: &mut Criterion) {
    let dir = mmlu_dir();
    let mut g = c.benchmark_group("mmlu576");
    g.sample_size(10);
    g.bench_function("compute_subset (14042 rows)", |b| {
        b.iter(|| compute_subset(black_box(&dir)).unwrap())
    });
    g.bench_function("load_subset (576 rows)", |b| {
        b.iter(|| load_subset(black_box(&dir)).unwrap())
    });
    let questions = load_subset(&dir).unwrap();
    let shots =
        pocketperf_datasets::load_dev_shots(&dir, questions.iter().map(|q| q.subject.as_str()))
            .unwrap();
    g.bench_function("build_prompt x576 (5-shot)", |b| {
        b.iter(|| {
            let mut bytes = 0;
            for q in &questions {
                bytes += build_prompt(q, &shots[&q.subject], |_| true)
                    .unwrap()
                    .text
                    .len();
            }
            bytes
        })
    });
    g.finish();
    let texts = [" B.", "The answer is C", "ABC", "Answer: D", "I think"];
    c.bench_function("parse_generated x5", |b| {
        b.iter(|| texts.map(|t| parse_generated(black_box(t))))
    });
}

criterion_group!(datasets, benches);
criterion_main!(datasets);
