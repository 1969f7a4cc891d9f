//! The lines the text formats print after the table: batched decode against single-sequence
//! decode, the roofline, memory, start-up and cold start.

use crate::tools::bench::rows::BenchReport;
use crate::tools::cold_start;

pub fn lines(r: &BenchReport) -> Vec<String> {
    let mut out = Vec::new();
    let rows = &r.rows;
    for b in rows.iter().filter(|x| x.batch > 1) {
        let single = rows.iter().find(|x| {
            x.model.model_path == b.model.model_path
                && x.threads == b.threads
                && x.is_single_decode()
                && x.n_gen == b.n_gen
                && x.n_depth == b.n_depth
        });
        if let Some(s) = single {
            out.push(format!(
                "{}: {} at {} threads is {:.2}x {} ({} sequences decoded together)",
                b.model.model,
                b.test,
                b.threads,
                b.tokens_per_s_median / s.tokens_per_s_median.max(1e-9),
                s.test,
                b.batch
            ));
        }
    }
    if let Some(roof) = &r.roofline {
        let llc = roof
            .llc_bytes
            .map_or("unknown".into(), |l| format!("{:.1} MB", l as f64 / 1e6));
        for m in &roof.models {
            let weights = rows
                .iter()
                .find(|x| x.model.model == m.model)
                .map_or(0.0, |x| x.weight_bytes_per_token as f64 / 1e6);
            out.push(format!(
                "{}: {weights:.1} MB of weights per decoded token (+ KV); model file {:.1} MB; LLC {llc}",
                m.model,
                m.model_file_bytes as f64 / 1e6
            ));
            for (p, q) in roof.dram.iter().zip(&m.model_sized) {
                let frac = m
                    .decode_fraction_of_dram
                    .iter()
                    .find(|(t, _)| *t == p.threads)
                    .map_or("-".into(), |(_, f)| format!("{:.0}%", f * 100.0));
                out.push(format!(
                    "{}: read bandwidth at {} threads {:.1} GB/s over {} MiB (DRAM), {:.1} GB/s over a model-sized buffer; decode at {frac} of DRAM",
                    m.model,
                    p.threads,
                    p.gb_per_s_best,
                    p.buffer_bytes >> 20,
                    q.gb_per_s_best
                ));
            }
        }
    }
    if let Some(p) = r.memory.peak_rss_bytes {
        out.push(format!(
            "peak RSS {:.1} MiB; budget (largest model + KV + 64 MiB) {:.1} MiB",
            p as f64 / 1048576.0,
            r.memory.budget_bytes as f64 / 1048576.0
        ));
    }
    if let Some(s) = &r.startup {
        out.push(format!(
            "start-up to first token ({} prompt tokens): median {:.1} ms (min {:.1}, max {:.1}, {} runs)",
            s.prompt_tokens, s.ms_median, s.ms_min, s.ms_max, s.runs
        ));
    }
    if let Some(c) = &r.cold_start {
        out.extend(cold_start::markdown_lines(c));
    }
    out
}
