//! `run --prefix-reuse on`: what a session keeps from one prompt to the next gives the
//! logits a whole prefill gives (the command-line side is in `cli_run.rs`).

use std::path::PathBuf;

use pocketperf::sut::prompts::{PrefixReuse, common_prefix};
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::quant;
use pocketperf_runtime::session::{Engine, GenerateOptions, SamplingParams, argmax};

/// The cached reference model (`$POCKETPERF_MODEL` first).
fn model_path() -> PathBuf {
    pocketperf_testkit::reference_model(|| {
        pocketperf::model_store::reference_model_path().expect("model cache directory")
    })
}

fn chat(engine: &Engine, text: &str) -> Vec<u32> {
    pocketperf::sut::prompts::prompt_tokens(engine, text, true).unwrap()
}

#[test]
fn a_kept_prefix_gives_the_logits_of_a_whole_prefill() {
    let engine = Engine::load(&model_path(), 2, quant::active_isa()).unwrap();
    let opts = SessionOptions {
        max_seq_len: 256,
        max_batch: 64,
        ..Default::default()
    };
    let a = chat(&engine, "Name three rivers of Europe.");
    let b = chat(&engine, "Name three mountains of Asia.");
    let shared = common_prefix(&a, &b);
    // The chat template's system prompt and headers, and the words both questions open with.
    assert!(
        shared > 20 && shared < b.len(),
        "{shared} of {} and {}",
        a.len(),
        b.len()
    );

    let mut session = engine.session(opts.clone()).unwrap();
    let mut reuse = PrefixReuse::new(true);
    assert_eq!(reuse.prepare(&mut session, &a), 0, "nothing held yet");
    let limits = GenerateOptions {
        max_new_tokens: 6,
        stop_at_eog: false,
        sampling: SamplingParams::default(),
    };
    session.generate(&a, &limits, |_, _| {}).unwrap();
    let kept = reuse.prepare(&mut session, &b);
    assert_eq!(kept, shared);
    assert_eq!(session.n_past(), shared);
    let reused: Vec<f32> = session.prefill(&b[kept..]).unwrap().to_vec();

    let mut fresh = engine.session(opts).unwrap();
    let whole: Vec<f32> = fresh.prefill(&b).unwrap().to_vec();
    assert_eq!(reused.len(), whole.len());
    let worst = reused
        .iter()
        .zip(&whole)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-3, "largest logit difference {worst}");
    assert_eq!(argmax(&reused), argmax(&whole));
    assert_eq!(reuse.prompt_tokens(), (a.len() + b.len()) as u64);
    assert_eq!(reuse.reused(), shared as u64);

    // The same prompt again keeps all but its last token; reuse off keeps nothing.
    assert_eq!(reuse.prepare(&mut session, &b), b.len() - 1);
    assert_eq!(session.n_past(), b.len() - 1);
    let mut off = PrefixReuse::new(false);
    assert_eq!(off.prepare(&mut session, &b), 0);
    assert_eq!(off.prepare(&mut session, &b), 0);
    assert_eq!(session.n_past(), 0);
}
