//! The sweep of one `bench` run: the lists of prompt lengths, generation lengths, depths and
//! batch sizes whose cross product is measured at each thread count of each model, and the
//! checks against a model's context length.

use anyhow::{Result, bail};

/// The test lists (0 in `pp`, `tg` or `batch` skips that kind of test; depth 0 is an empty
/// KV cache).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Sweep {
    pub pp: Vec<usize>,
    pub tg: Vec<usize>,
    pub depth: Vec<usize>,
    pub batch: Vec<usize>,
}

impl Sweep {
    /// The prompt-processing lengths measured (zeros left out).
    pub fn pp_tests(&self) -> Vec<usize> {
        nonzero(&self.pp)
    }

    pub fn tg_tests(&self) -> Vec<usize> {
        nonzero(&self.tg)
    }

    pub fn batch_tests(&self) -> Vec<usize> {
        nonzero(&self.batch)
    }

    /// The lists' consistency: a batched test needs a tg length, a depth needs a pp or tg
    /// test to run on top of it.
    pub fn check(&self) -> Result<()> {
        if !self.batch_tests().is_empty() && self.tg_tests().is_empty() {
            bail!(
                "--batch {}: a batched test decodes --tg tokens; give a --tg length above 0 or --batch 0",
                join(&self.batch)
            );
        }
        if self.depth.iter().any(|&d| d > 0)
            && self.pp_tests().is_empty()
            && self.tg_tests().is_empty()
        {
            bail!(
                "--depth {}: a depth is the KV fill a --pp or --tg test runs on; give one",
                join(&self.depth)
            );
        }
        Ok(())
    }

    /// Tokens one sequence holds at most: the deepest KV plus the longest test on top.
    pub fn max_tokens(&self) -> usize {
        let deepest = self.depth.iter().copied().max().unwrap_or(0);
        let longest = self.pp.iter().chain(&self.tg).copied().max().unwrap_or(0);
        deepest + longest
    }

    /// Refuses a sweep whose deepest test does not fit in `model`'s context length.
    pub fn check_context(&self, model: &str, context_length: usize) -> Result<()> {
        let deepest = self.depth.iter().copied().max().unwrap_or(0);
        for (flag, list) in [("--pp", &self.pp), ("--tg", &self.tg)] {
            let longest = list.iter().copied().max().unwrap_or(0);
            if longest > 0 && deepest + longest > context_length {
                bail!(
                    "--depth {deepest} + {flag} {longest} = {} tokens does not fit in the context length of {model} ({context_length} tokens, from its GGUF metadata)",
                    deepest + longest
                );
            }
        }
        Ok(())
    }
}

fn nonzero(v: &[usize]) -> Vec<usize> {
    v.iter().copied().filter(|&x| x > 0).collect()
}

fn join(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(pp: &[usize], tg: &[usize], depth: &[usize], batch: &[usize]) -> Sweep {
        Sweep {
            pp: pp.to_vec(),
            tg: tg.to_vec(),
            depth: depth.to_vec(),
            batch: batch.to_vec(),
        }
    }

    #[test]
    fn the_deepest_longest_test_must_fit_the_context() {
        let s = sweep(&[512, 64], &[128], &[0, 4096], &[0]);
        assert_eq!(s.max_tokens(), 4608);
        assert!(s.check_context("m", 4608).is_ok());
        let e = s.check_context("m", 4607).unwrap_err().to_string();
        assert!(e.contains("--depth 4096 + --pp 512 = 4608"), "{e}");
        assert!(e.contains("4607 tokens"), "{e}");
        let s = sweep(&[0], &[256], &[2000], &[0]);
        let e = s.check_context("m", 2048).unwrap_err().to_string();
        assert!(e.contains("--tg 256"), "{e}");
    }

    #[test]
    fn batch_without_tg_and_depth_without_tests_are_refused() {
        let e = sweep(&[16], &[0], &[0], &[4]).check().unwrap_err();
        assert!(e.to_string().contains("--batch 4"), "{e}");
        let e = sweep(&[0], &[0], &[0, 64], &[0]).check().unwrap_err();
        assert!(e.to_string().contains("--depth 0,64"), "{e}");
        assert!(sweep(&[0], &[0], &[0], &[0]).check().is_ok());
        assert_eq!(sweep(&[0, 8], &[4], &[0], &[0, 2]).pp_tests(), vec![8]);
    }
}
