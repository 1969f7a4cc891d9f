//! `logits`: one prefill of the prompt, then the `top_k` logits at its last position with
//! their log-probabilities and pieces (text or JSON), and optionally every logit as f32
//! little-endian to a file.

use anyhow::{Result, bail};
use pocketperf_runtime::kv::KvType;
use pocketperf_runtime::model::SessionOptions;
use pocketperf_runtime::session::{Engine, log_prob};
use std::path::Path;

/// Prefills `ids` and prints the top `top_k` logits; writes all of them to `raw_out`.
pub fn logits(
    engine: &Engine,
    ids: &[u32],
    top_k: usize,
    raw_out: Option<&Path>,
    json: bool,
    kv_type: KvType,
) -> Result<()> {
    if ids.is_empty() {
        bail!("the prompt is empty");
    }
    let mut s = engine.session(SessionOptions {
        max_seq_len: ids.len().max(1),
        max_batch: ids.len().clamp(1, 512),
        kv_type,
        ..Default::default()
    })?;
    let l = s.prefill(ids)?.to_vec();
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.sort_by(|&x, &y| l[y].total_cmp(&l[x]).then(x.cmp(&y)));
    let top: Vec<serde_json::Value> = order
        .iter()
        .take(top_k)
        .map(|&i| {
            serde_json::json!({"id": i, "logit": l[i], "logprob": log_prob(&l, i as u32),
                "piece": engine.tokenizer.token_piece(i as u32).unwrap_or("")})
        })
        .collect();
    if let Some(p) = raw_out {
        let bytes: Vec<u8> = l.iter().flat_map(|x| x.to_le_bytes()).collect();
        pocketperf_reports::files::replace_file(p, &bytes)
            .map_err(|(f, e)| anyhow::anyhow!("{}: cannot write: {e}", f.display()))?;
    }
    if json {
        println!("{}", serde_json::json!({"prompt_ids": ids, "top": top}));
    } else {
        for t in &top {
            println!(
                "{:>6} {:>10.4} {:>10.4} {:?}",
                t["id"],
                t["logit"].as_f64().unwrap_or(0.0),
                t["logprob"].as_f64().unwrap_or(0.0),
                t["piece"].as_str().unwrap_or("")
            );
        }
    }
    Ok(())
}
