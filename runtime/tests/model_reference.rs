//! The forward pass against llama.cpp's outputs on the reference model
//! (`shared/reference/smollm2-135m`): last-position logits, top-1 agreement, teacher-forced
//! greedy agreement and perplexity. Runs under the ISA tier chosen by `POCKETPERF_ISA`.

mod common;
use common::{cases, ids, rms, top2};

use pocketperf_runtime::model::{Forward, Model, SessionOptions};
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant;
use serde_json::Value;
use std::sync::{Arc, OnceLock};

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| Model::open(&common::model_path()).expect("open reference model"))
}

fn forward(opts: SessionOptions) -> Forward {
    let isa = quant::isa_from_env().expect("POCKETPERF_ISA");
    Forward::new(model(), opts, Arc::new(ThreadPool::new(2)), isa).unwrap()
}

#[test]
fn last_position_logits_agree_with_llama_cpp() {
    let mut report = Vec::new();
    for c in cases() {
        let name = c["name"].as_str().unwrap().to_string();
        let prompt = ids(&c["prompt_ids"]);
        let mut f = forward(SessionOptions {
            max_seq_len: 256,
            ..Default::default()
        });
        let ours = f.forward(model(), &prompt).unwrap().to_vec();
        let dir = common::reference_dir().join("logits");
        let lcpp = common::read_f32_le(&dir.join(format!("{name}.last_pos.f32")));
        let exact = common::read_f32_le(&dir.join(format!("{name}.last_pos.numpy_f64ref.f32")));
        let (r_l, r_e) = (rms(&ours, &lcpp), rms(&ours, &exact));
        let (ref_top, ref_margin) = top2(&lcpp);
        let (our_top, _) = top2(&ours);
        report.push(format!("{name}: rms vs llama.cpp {r_l:.3}, vs exact {r_e:.3}, top1 {our_top} (ref {ref_top}, margin {ref_margin:.2})"));
        assert!(
            r_l <= 0.5 || r_e <= 0.15,
            "{name}: RMS logit difference {r_l:.3} from llama.cpp and {r_e:.3} from exact math"
        );
        if ref_margin > 0.25 {
            assert_eq!(
                our_top, ref_top,
                "{name}: top-1 differs (llama.cpp margin {ref_margin})"
            );
        }
        // the reference's own top-10 list agrees with its raw file
        assert_eq!(
            c["top_logits_last_prompt_pos"][0]["id"].as_u64().unwrap() as u32,
            ref_top
        );
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn teacher_forced_greedy_agrees_where_llama_cpp_is_confident() {
    for c in cases() {
        let name = c["name"].as_str().unwrap();
        let prompt = ids(&c["prompt_ids"]);
        let greedy = ids(&c["greedy_ids"]);
        let steps = c["top5_per_generated_step"].as_array().unwrap();
        let mut f = forward(SessionOptions {
            max_seq_len: 256,
            ..Default::default()
        });
        f.forward(model(), &prompt).unwrap();
        let mut checked = 0;
        for (i, step) in steps.iter().enumerate() {
            let l = f.forward(model(), &[greedy[i]]).unwrap();
            let top5 = step.as_array().unwrap();
            let margin = top5[0]["logit"].as_f64().unwrap() - top5[1]["logit"].as_f64().unwrap();
            let (ours, _) = top2(l);
            assert_eq!(top5[0]["id"].as_u64().unwrap() as u32, greedy[i + 1]);
            if margin > 1.0 {
                checked += 1;
                assert_eq!(
                    ours,
                    greedy[i + 1],
                    "{name}: step {i} top-1 differs (llama.cpp margin {margin:.2})"
                );
            }
        }
        assert!(checked > 5, "{name}: only {checked} confident steps");
    }
}

#[test]
fn perplexity_matches_llama_cpp_within_one_percent() {
    let p = common::reference_dir().join("perplexity.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let tokens = ids(&v["token_ids"]);
    let reference = v["llama_cpp"]["final_ppl"].as_f64().unwrap();
    let ctx = 128;
    let mut f = forward(SessionOptions {
        max_seq_len: ctx,
        max_batch: ctx,
        logits_all: true,
        ..Default::default()
    });
    let vocab = model().config().vocab_size;
    let (mut nll, mut n) = (0.0f64, 0usize);
    for chunk in tokens.chunks_exact(ctx) {
        f.reset();
        f.forward(model(), chunk).unwrap();
        let all = f.logits();
        for pos in ctx / 2..ctx - 1 {
            let row = &all[pos * vocab..(pos + 1) * vocab];
            nll -= pocketperf_runtime::session::log_prob(row, chunk[pos + 1]);
            n += 1;
        }
    }
    assert_eq!(n, 10 * 63);
    let ppl = (nll / n as f64).exp();
    eprintln!("perplexity {ppl:.4} (llama.cpp {reference})");
    assert!(
        (ppl / reference - 1.0).abs() < 0.01,
        "perplexity {ppl:.4} vs llama.cpp {reference}"
    );
}

#[test]
fn batched_prefill_equals_token_by_token() {
    let c = &cases()[1];
    let prompt = ids(&c["prompt_ids"]);
    let mut a = forward(SessionOptions {
        max_seq_len: 64,
        ..Default::default()
    });
    let la = a.forward(model(), &prompt).unwrap().to_vec();
    let mut b = forward(SessionOptions {
        max_seq_len: 64,
        max_batch: 1,
        ..Default::default()
    });
    let lb = b.forward(model(), &prompt).unwrap().to_vec();
    // Same kernels, different tiling: equal up to float summation order.
    assert!(rms(&la, &lb) < 0.05, "rms {}", rms(&la, &lb));
    assert_eq!(top2(&la).0, top2(&lb).0);
}

/// `set_logits_all(false)` then `(true)` across two calls (the perplexity route's split of a
/// chunk) gives the very bits of one `logits_all` call over the whole chunk; switching it on
/// is refused for a session created without `logits_all`.
#[test]
fn logits_all_switched_per_call_gives_the_same_bits() {
    let p = common::reference_dir().join("perplexity.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let tokens = &ids(&v["token_ids"])[..32];
    let vocab = model().config().vocab_size;
    let opts = SessionOptions {
        max_seq_len: 32,
        max_batch: 32,
        logits_all: true,
        ..Default::default()
    };
    let mut whole = forward(opts.clone());
    whole.forward(model(), tokens).unwrap();
    let want = whole.logits()[..32 * vocab].to_vec();
    let mut split = forward(opts);
    split.set_logits_all(false).unwrap();
    let last = split.forward(model(), &tokens[..20]).unwrap().to_vec();
    assert_eq!(
        last,
        want[19 * vocab..20 * vocab],
        "last row of the first call"
    );
    split.set_logits_all(true).unwrap();
    split.forward(model(), &tokens[20..]).unwrap();
    assert_eq!(
        split.logits()[..12 * vocab],
        want[20 * vocab..],
        "rows of the second call"
    );

    let mut plain = forward(SessionOptions {
        max_seq_len: 32,
        ..Default::default()
    });
    let e = plain.set_logits_all(true).unwrap_err().to_string();
    assert!(e.contains("logits_all"), "{e}");
    plain.set_logits_all(false).unwrap();
}
