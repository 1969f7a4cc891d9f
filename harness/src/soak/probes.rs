//! The fixed probe set of a soak: greedy generations of fixed prompts (token ids must stay
//! bit-identical to the first round) and a slice of MMLU-576 scored by the log-probabilities
//! of " A" … " D" (the four values must stay bit-identical; the choice and its correctness are
//! reported). Probes always run from an empty cache, so their results do not depend on what
//! ran before them.

use std::path::Path;

use pocketperf_datasets::mmlu::{Letter, Question};
use pocketperf_datasets::{prompt, subset};

/// Greedy probe prompts (original text). The first `--probe-prompts` are used.
pub const GREEDY_PROMPTS: [&str; 8] = [
    "Name the three primary colours of light.",
    "In one sentence, why does ice float on water?",
    "Write a haiku about a lighthouse in fog.",
    "What is 17 multiplied by 23? Show the steps.",
    "Give two tips for keeping houseplants alive.",
    "Translate 'good morning, how are you?' into Spanish.",
    "Explain what a prime number is to a ten-year-old.",
    "List the planets of the solar system in order.",
];

/// Continuations scored for an MMLU probe, in letter order.
pub const ANSWER_CONTINUATIONS: [&str; 4] = [" A", " B", " C", " D"];

/// One probe.
#[derive(Clone, Debug, PartialEq)]
pub enum Probe {
    /// Greedy generation of a chat prompt.
    Greedy { id: String, prompt: String },
    /// An MMLU question, 0-shot text prompt.
    Mmlu {
        id: String,
        prompt: String,
        answer: Letter,
    },
}

impl Probe {
    pub fn id(&self) -> &str {
        match self {
            Probe::Greedy { id, .. } | Probe::Mmlu { id, .. } => id,
        }
    }
}

/// Probe-set errors.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("--probe-prompts {0}: at most {max} greedy prompts exist", max = GREEDY_PROMPTS.len())]
    TooManyPrompts(usize),
    #[error("--probe-mmlu {0}: the MMLU-576 subset has only {1} questions")]
    TooManyQuestions(usize, usize),
    #[error(transparent)]
    Dataset(#[from] pocketperf_datasets::Error),
}

/// Indices of `n` questions spread evenly over a list of `total`: `floor(i·total/n)`.
pub fn spread(n: usize, total: usize) -> Vec<usize> {
    (0..n).map(|i| i * total / n.max(1)).collect()
}

/// The probe set: `prompts` greedy prompts, then `mmlu` questions of the MMLU-576 subset
/// (spread over its manifest order, so over subjects) from the copy at `mmlu_dir`.
pub fn probe_set(
    prompts: usize,
    mmlu: usize,
    mmlu_dir: Option<&Path>,
) -> Result<Vec<Probe>, ProbeError> {
    if prompts > GREEDY_PROMPTS.len() {
        return Err(ProbeError::TooManyPrompts(prompts));
    }
    let mut out: Vec<Probe> = GREEDY_PROMPTS[..prompts]
        .iter()
        .enumerate()
        .map(|(i, p)| Probe::Greedy {
            id: format!("greedy/{i}"),
            prompt: (*p).to_string(),
        })
        .collect();
    if mmlu > 0 {
        let manifest = subset::manifest();
        if mmlu > manifest.len() {
            return Err(ProbeError::TooManyQuestions(mmlu, manifest.len()));
        }
        let dir = match mmlu_dir {
            Some(d) => d.to_path_buf(),
            None => pocketperf_datasets::resolve_mmlu_dir(None)?,
        };
        let chosen: Vec<_> = spread(mmlu, manifest.len())
            .into_iter()
            .map(|i| manifest[i].clone())
            .collect();
        let questions: Vec<Question> = subset::load_subset_from(&dir, &chosen)?;
        for q in questions {
            out.push(Probe::Mmlu {
                id: format!("mmlu/{}/{}", q.subject, q.row),
                prompt: prompt::zero_shot(&q).text,
                answer: q.answer,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_even_and_starts_at_zero() {
        assert_eq!(spread(4, 576), vec![0, 144, 288, 432]);
        assert_eq!(spread(3, 3), vec![0, 1, 2]);
        assert!(spread(0, 576).is_empty());
    }

    #[test]
    fn greedy_only_needs_no_mmlu() {
        let p = probe_set(3, 0, None).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[2].id(), "greedy/2");
        assert!(matches!(
            probe_set(9, 0, None),
            Err(ProbeError::TooManyPrompts(9))
        ));
    }
}
