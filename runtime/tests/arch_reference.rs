//! The forward pass of the `gemma3` and `qwen2` families against llama.cpp's outputs on the
//! real models (`shared/reference/gemma3-270m`, `shared/reference/qwen2.5-coder-0.5b`):
//! top-1 at the last prompt position wherever llama.cpp's margin exceeds 0.25, greedy
//! continuations identical up to llama.cpp's first step with a margin below 0.5, RMS logit
//! differences against llama.cpp and the exact f64 reference (printed), and perplexity under
//! llama-perplexity's protocol as each `perplexity.json` states it (final and running after
//! each chunk). Runs under the ISA tier chosen by `POCKETPERF_ISA`.

mod common;
use common::{ids, rms, top2};

use pocketperf_runtime::model::{Forward, Model, SessionOptions};
use pocketperf_runtime::perplexity;
use pocketperf_runtime::pool::ThreadPool;
use pocketperf_runtime::quant;
use pocketperf_runtime::session::Engine;
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

fn forward(model: &Model, opts: SessionOptions) -> Forward {
    let isa = quant::isa_from_env().expect("POCKETPERF_ISA");
    Forward::new(model, opts, Arc::new(ThreadPool::new(2)), isa).unwrap()
}

/// Last-position logits and free-running greedy decoding of every reference case.
fn logits_and_greedy(name: &str) {
    let t0 = Instant::now();
    let model = Model::open(&common::model_path_for(name)).expect("open model");
    let dir = common::reference_dir_for(name).join("logits");
    let mut report = Vec::new();
    for c in common::cases_for(name) {
        let case = c["name"].as_str().unwrap().to_string();
        let prompt = ids(&c["prompt_ids"]);
        let greedy = ids(&c["greedy_ids"]);
        let steps = c["top5_per_generated_step"].as_array().unwrap();
        let mut f = forward(
            &model,
            SessionOptions {
                max_seq_len: 128,
                ..Default::default()
            },
        );
        let ours = f.forward(&model, &prompt).unwrap().to_vec();
        let lcpp = common::read_f32_le(&dir.join(format!("{case}.last_pos.f32")));
        let exact = common::read_f32_le(&dir.join(format!("{case}.last_pos.numpy_f64ref.f32")));
        let (r_l, r_e, r_ref) = (rms(&ours, &lcpp), rms(&ours, &exact), rms(&lcpp, &exact));
        let (ref_top, ref_margin) = top2(&lcpp);
        let (our_top, _) = top2(&ours);
        assert_eq!(
            c["top_logits_last_prompt_pos"][0]["id"].as_u64().unwrap() as u32,
            ref_top,
            "{case}: the reference's top-10 list disagrees with its raw logits"
        );
        if ref_margin > 0.25 {
            assert_eq!(
                our_top, ref_top,
                "{name}/{case}: top-1 differs (llama.cpp margin {ref_margin:.3})"
            );
        }
        // No farther from exact math than llama.cpp itself is, with slack.
        assert!(
            r_e <= (1.5 * r_ref).max(0.5),
            "{name}/{case}: RMS {r_e:.3} from the exact reference (llama.cpp's own: {r_ref:.3})"
        );
        // Greedy: identical up to the first step llama.cpp itself decides by less than 0.5.
        let mut margins = vec![ref_margin as f64];
        margins.extend(steps.iter().map(|s| {
            let t = s.as_array().unwrap();
            t[0]["logit"].as_f64().unwrap() - t[1]["logit"].as_f64().unwrap()
        }));
        let mut agreed = 0;
        let mut tok = our_top;
        for (i, &m) in margins.iter().enumerate().take(greedy.len()) {
            if m < 0.5 {
                break;
            }
            assert_eq!(
                tok, greedy[i],
                "{name}/{case}: greedy token {i} differs (llama.cpp margin {m:.3})"
            );
            agreed += 1;
            if i + 1 < greedy.len() && margins.get(i + 1).is_some_and(|&m| m >= 0.5) {
                tok = top2(f.forward(&model, &[tok]).unwrap()).0;
            }
        }
        report.push(format!(
            "{name}/{case}: rms vs llama.cpp {r_l:.3}, vs exact {r_e:.3} (llama.cpp vs exact \
             {r_ref:.3}); top1 {our_top} (ref {ref_top}, margin {ref_margin:.3}); greedy \
             identical for {agreed} tokens"
        ));
    }
    eprintln!(
        "{}\n{name}: {:.1} s",
        report.join("\n"),
        t0.elapsed().as_secs_f64()
    );
}

/// Largest relative difference from llama.cpp's running perplexity after any one chunk.
const RUNNING_TOL: f64 = 0.02;

/// Perplexity on the shared text under the protocol of the model's `perplexity.json`, through
/// the runtime's own route (`pocketperf_runtime::perplexity`).
fn perplexity(name: &str) {
    let t0 = Instant::now();
    let isa = quant::isa_from_env().expect("POCKETPERF_ISA");
    let engine = Engine::load(&common::model_path_for(name), 2, isa).expect("load model");
    let p = common::reference_dir_for(name).join("perplexity.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let add_bos = v["tool"]["add_bos"].as_bool().unwrap();
    let text_path = common::reference_dir_for("smollm2-135m").join("ppl_text.txt");
    let mut text = std::fs::read_to_string(&text_path).unwrap();
    // The reference tokenized the text without its trailing newline.
    if text.ends_with('\n') {
        text.pop();
    }
    assert_eq!(engine.tokenizer.add_bos(), add_bos, "{name}: BOS handling");
    let tokens = perplexity::text_tokens(&engine, &text).unwrap();
    assert_eq!(
        tokens.len() as u64,
        v["n_tokens"].as_u64().unwrap(),
        "{name}: token count"
    );
    let ctx = 128;
    let k = tokens.len() / ctx;
    let reference = v["final_ppl"].as_f64().unwrap();
    let r = perplexity::perplexity(&engine, &tokens, ctx).unwrap();
    assert_eq!((r.chunks, r.scored), (k, k * 63));
    // The running perplexity after each chunk, too, within 2%: the first chunks average only
    // 63 predictions, where one token's log-likelihood moves the mean by tenths of a percent.
    for (i, (ours, theirs)) in r
        .running_ppl
        .iter()
        .zip(v["running_ppl_per_chunk"].as_array().unwrap())
        .enumerate()
    {
        let theirs = theirs.as_f64().unwrap();
        assert!(
            (ours / theirs - 1.0).abs() < RUNNING_TOL,
            "{name}: running perplexity after chunk {} {ours:.4} vs llama.cpp {theirs:.4}",
            i + 1
        );
    }
    let ppl = r.ppl;
    eprintln!(
        "{name} ({isa:?}): perplexity over {k} chunks {ppl:.4} (llama.cpp {reference:.4}, {:+.3}%), {:.1} s",
        100.0 * (ppl / reference - 1.0),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        (ppl / reference - 1.0).abs() < 0.01,
        "{name}: perplexity over {k} chunks {ppl:.4} vs llama.cpp {reference}"
    );
}

#[test]
fn gemma3_logits_and_greedy_agree_with_llama_cpp() {
    logits_and_greedy("gemma3-270m");
}

#[test]
fn gemma3_perplexity_within_one_percent() {
    perplexity("gemma3-270m");
}

#[test]
fn qwen2_logits_and_greedy_agree_with_llama_cpp() {
    logits_and_greedy("qwen2.5-coder-0.5b");
}

#[test]
fn qwen2_perplexity_within_one_percent() {
    perplexity("qwen2.5-coder-0.5b");
}
