//! The dialogue scenario through an OpenAI-compatible server (`run --scenario dialogue --sut
//! http://HOST:PORT`, `docs/HTTP.md`). Every turn is one streamed, greedy request with
//! `ignore_eos` and `max_tokens` the turn's budget, carrying the whole conversation so far as
//! the API shape asks for it: the chat API gets the messages (the server renders its
//! template), the completions API the conversation rendered in the local model's chat
//! template, as token ids (the prompt the in-process SUT would see, re-tokenized from the
//! replies' text). Tokens are timed on arrival of their SSE events.
//!
//! Counts: generated tokens from the usage object, else the token chunks counted (as the other
//! scenarios, [`HttpRecord::token_count_source`]); the conversation's prompt tokens from the
//! usage object, else the local tokenizer's count of the rendered conversation, of which
//! `reused` come from the server's `timings` (`cache_n`, else `usage.prompt_tokens −
//! timings.prompt_n`; else 0) and the rest were `prefilled`. Whether the
//! server keeps the conversation's KV between turns is its own business: the harness cannot
//! reset or keep a remote cache.

use std::sync::Mutex;

use anyhow::{Result, anyhow};
use pocketperf_runtime::tokenizer::{ChatMessage, Tokenizer};
use serde_json::{Value, json};

use super::{DialogueSut, TurnOutput};
use crate::http::client::{ApiKind, HttpClient, ServerModel};
use crate::sut::http::{
    HttpPrompt, HttpRecord, HttpSutConfig, request_body, reused_tokens, with_retries,
};
use crate::sut::prompts::{encode_rendered, render_chat};

/// An OpenAI-compatible server as the dialogue scenario's system under test.
pub struct HttpDialogueSut<'t> {
    tokenizer: &'t Tokenizer,
    client: HttpClient,
    pub config: HttpSutConfig,
    pub model: ServerModel,
    record: Mutex<HttpRecord>,
    name: String,
    /// Turns sent so far (names them in the record).
    turns: u64,
}

impl<'t> HttpDialogueSut<'t> {
    /// Connects (asking `/v1/models`, which fails fast when nothing listens); `tokenizer` is
    /// the local model's, which renders and counts the conversation.
    pub fn connect(cfg: HttpSutConfig, tokenizer: &'t Tokenizer) -> Result<Self> {
        let client = HttpClient::new(&cfg.base_url, 1, cfg.request_timeout, cfg.stall_timeout)
            .map_err(|e| anyhow!(e))?;
        let model = client.model()?;
        let name = client.sut_name(&model, cfg.api);
        Ok(HttpDialogueSut {
            tokenizer,
            client,
            config: cfg,
            model,
            record: Mutex::new(HttpRecord::default()),
            name,
            turns: 0,
        })
    }

    /// A copy of the record so far.
    pub fn record(&self) -> HttpRecord {
        self.record
            .lock()
            .map(|r| r.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }
}

/// The request of one turn: `history` (ending with the user's message) as chat messages, or
/// as the token ids `prompt` of the rendered conversation.
pub fn turn_body(
    api: ApiKind,
    model: &str,
    history: &[ChatMessage],
    prompt: Vec<u32>,
    max_new_tokens: u32,
) -> Value {
    let p = HttpPrompt {
        text: String::new(),
        tokens: prompt,
        max_new_tokens: max_new_tokens as usize,
    };
    let mut body = request_body(api, model, &p);
    if api == ApiKind::Chat {
        let messages: Vec<Value> = history
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        body["messages"] = Value::Array(messages);
    }
    body
}

impl DialogueSut for HttpDialogueSut<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn kv_reuse(&self) -> bool {
        false
    }

    fn begin(&mut self) -> Result<()> {
        Ok(())
    }

    fn turn(
        &mut self,
        history: &[ChatMessage],
        max_new_tokens: u32,
        on_token: &mut dyn FnMut(),
    ) -> Result<TurnOutput> {
        let rendered = render_chat(self.tokenizer, history);
        let ids = encode_rendered(self.tokenizer, &rendered, true)?;
        let local_prompt = ids.len();
        let body = turn_body(
            self.config.api,
            &self.model.id,
            history,
            ids,
            max_new_tokens,
        );
        let what = format!("turn {}", self.turns);
        self.turns += 1;
        let r = with_retries(
            &self.client,
            &self.config,
            &body,
            &what,
            &self.record,
            |_| on_token(),
        );
        let mut rec = self.record.lock().unwrap_or_else(|e| e.into_inner());
        match r {
            Ok(out) => {
                let generated = rec.account(&what, &out, max_new_tokens as usize);
                let prompt = out.usage.map_or(local_prompt, |(p, _)| p as usize);
                let reused = reused_tokens(&out).min(prompt);
                Ok(TurnOutput {
                    prefilled: prompt - reused,
                    reused,
                    generated: generated as usize,
                    reply: out.text,
                })
            }
            Err(e) => {
                rec.failed.push(format!("{what}: {e}"));
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_turns_carry_the_conversation_and_completions_its_ids() {
        let h = [
            ChatMessage::new("user", "Hi"),
            ChatMessage::new("assistant", "Hello"),
            ChatMessage::new("user", "More"),
        ];
        let c = turn_body(ApiKind::Chat, "m", &h, vec![1, 2], 7);
        let roles: Vec<&str> = c["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(c["messages"][1]["content"], "Hello");
        assert_eq!(c["max_tokens"], 7);
        assert!(c.get("prompt").is_none());
        let p = turn_body(ApiKind::Completions, "m", &h, vec![1, 2], 7);
        assert_eq!(p["prompt"], json!([1, 2]));
        assert!(p.get("messages").is_none());
        assert_eq!(p["ignore_eos"], true);
        assert_eq!(p["stream"], true);
    }
}
