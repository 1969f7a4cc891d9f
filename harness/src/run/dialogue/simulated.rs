//! [`SimulatedSut`]: the dialogue scenario's decoder in virtual time, at a simulated
//! handset's own speed (tests and fast checks of the energy pipeline).

use anyhow::{Result, bail};
use pocketperf_runtime::tokenizer::ChatMessage;

use super::{DialogueSut, TurnOutput};
use crate::sim::model::Activity;
use crate::telemetry::VirtualRig;

/// A decoder that runs at a simulated handset's own speed in virtual time: prefill at
/// [`SimulatedSut::PREFILL_SPEEDUP`] × the decode rate, decode at the model's tokens/s for
/// the frequency level the vendor allows, the CPU 100 % busy while it works. Prompt lengths
/// are estimated at 4 characters a token (no tokenizer: the handset's energy, not the text,
/// is what this SUT exists for). The rig's clock advances as it works.
pub struct SimulatedSut<'r> {
    rig: &'r mut VirtualRig,
    in_kv: usize,
    rendered_chars: usize,
    gap_ns: u64,
}

impl<'r> SimulatedSut<'r> {
    /// Prefill throughput relative to decode (batched prefill amortizes the weight reads).
    pub const PREFILL_SPEEDUP: f64 = 8.0;

    /// A SUT driving `rig`; each dialogue is preceded by `gap_ns` of idle (the handset
    /// cools a little between dialogues, and dialogue boundaries fall between samples).
    pub fn new(rig: &'r mut VirtualRig, gap_ns: u64) -> Self {
        Self {
            rig,
            in_kv: 0,
            rendered_chars: 0,
            gap_ns,
        }
    }

    /// The rig.
    pub fn rig(&mut self) -> &mut VirtualRig {
        self.rig
    }

    fn work(&mut self, tokens: f64, speedup: f64) -> Result<()> {
        let top = self.rig.model().profile().max_level();
        let level = top.min(self.rig.model().vendor_cap_level());
        let tps = self.rig.model().profile().tokens_per_s(level, 1.0) * speedup;
        if !tps.is_finite() || tps <= 0.0 {
            bail!("simulated handset decodes at {tps} tokens/s");
        }
        let dt_ns = (tokens / tps * 1e9).round() as u64;
        self.rig.advance(
            dt_ns,
            Activity {
                busy: 1.0,
                freq_level: top,
            },
        )?;
        Ok(())
    }
}

impl DialogueSut for SimulatedSut<'_> {
    fn name(&self) -> &str {
        "simulated decoder (virtual time)"
    }

    fn kv_reuse(&self) -> bool {
        true
    }

    fn begin(&mut self) -> Result<()> {
        self.in_kv = 0;
        self.rendered_chars = 0;
        self.rig.advance(
            self.gap_ns,
            Activity {
                busy: 0.0,
                freq_level: 0,
            },
        )?;
        Ok(())
    }

    fn turn(
        &mut self,
        history: &[ChatMessage],
        max_new_tokens: u32,
        on_token: &mut dyn FnMut(),
    ) -> Result<TurnOutput> {
        let full = pocketperf_runtime::tokenizer::chat_prompt(history, true, None);
        let new_chars = full.len().saturating_sub(self.rendered_chars);
        let prefilled = new_chars.div_ceil(4).max(1);
        self.work(prefilled as f64, Self::PREFILL_SPEEDUP)?;
        for _ in 0..max_new_tokens {
            self.work(1.0, 1.0)?;
            on_token();
        }
        let reused = self.in_kv;
        self.in_kv += prefilled + max_new_tokens as usize;
        // The reply stands in as `max_new_tokens` four-character pieces.
        let reply = "word".repeat(max_new_tokens as usize);
        self.rendered_chars = full.len() + reply.len();
        Ok(TurnOutput {
            prefilled,
            reused,
            generated: max_new_tokens as usize,
            reply,
        })
    }
}
