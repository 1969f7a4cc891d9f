//! Chat prompts: the template families of the models we run, rendered as llama.cpp's built-in
//! templates (`src/llama-chat.cpp`) render them, and the default system prompt that a model's
//! own `tokenizer.chat_template` inserts when a conversation has none.
//!
//! - **ChatML** (SmolLM2, Qwen2): `<|im_start|>{role}\n{content}<|im_end|>\n` per message,
//!   then `<|im_start|>assistant\n` to ask for the reply.
//! - **Gemma**: `<start_of_turn>{role}\n{content}<end_of_turn>\n` per message with `assistant`
//!   spelled `model` and each content trimmed of surrounding whitespace; Gemma has no system
//!   role, so system messages are joined and put in front of the first user turn, followed by
//!   a blank line; `<start_of_turn>model\n` asks for the reply.
//!
//! The family comes from the template (`<|im_start|>` → ChatML, `<start_of_turn>` → Gemma, in
//! that order, as llama.cpp detects them) or, for a file without a template, from the control
//! tokens of the vocabulary; anything else renders as ChatML, llama.cpp's fallback too.
//!
//! Default system prompt: we follow the model's own Jinja template, as Hugging Face
//! `apply_chat_template` and llama.cpp's `--jinja` mode do. SmolLM2's template emits
//! `<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging
//! Face<|im_end|>\n` when the first message is not a system message, Qwen2.5's "You are Qwen,
//! created by Alibaba Cloud. You are a helpful assistant."; an explicit system message replaces
//! it. llama.cpp's built-in (non-Jinja) ChatML formatter omits it, so prompts built there
//! without `--jinja` differ from ours by exactly that turn. The default is found by
//! [`default_system_prompt`] only when the template holds it as a literal ChatML system turn
//! and tests the first message's role against `'system'`; any other template gives `None` (no
//! system turn is added).

use crate::gguf::GgufFile;

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// Renders `messages` in ChatML. When the first message is not a system message and
/// `default_system` is given, it is inserted first; with `add_generation_prompt` the text
/// ends with the assistant header so the model writes the reply.
pub fn chat_prompt(
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    default_system: Option<&str>,
) -> String {
    let mut out = String::new();
    let turn = |out: &mut String, role: &str, content: &str| {
        out.push_str("<|im_start|>");
        out.push_str(role);
        out.push('\n');
        out.push_str(content);
        out.push_str("<|im_end|>\n");
    };
    if let Some(sys) = default_system
        && messages.first().is_none_or(|m| m.role != "system")
    {
        turn(&mut out, "system", sys);
    }
    for m in messages {
        turn(&mut out, &m.role, &m.content);
    }
    if add_generation_prompt {
        out.push_str("<|im_start|>assistant\n");
    }
    out
}

/// A model's chat template family, with what it needs to render a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChatTemplate {
    /// ChatML, with the template's default system prompt when it has one.
    ChatMl { default_system: Option<String> },
    /// Gemma's turns.
    Gemma,
}

impl ChatTemplate {
    /// The family of the model: from `tokenizer.chat_template` when the file has one, else
    /// from the vocabulary's control tokens (`has_token` says whether a piece exists).
    pub fn from_gguf(g: &GgufFile, has_token: impl Fn(&str) -> bool) -> ChatTemplate {
        match g.get("tokenizer.chat_template").and_then(|v| v.as_str()) {
            Some(t) if t.contains("<|im_start|>") => ChatTemplate::ChatMl {
                default_system: system_prompt_in_template(t),
            },
            Some(t) if t.contains("<start_of_turn>") => ChatTemplate::Gemma,
            Some(_) => ChatTemplate::ChatMl {
                default_system: None,
            },
            None if !has_token("<|im_start|>") && has_token("<start_of_turn>") => {
                ChatTemplate::Gemma
            }
            None => ChatTemplate::ChatMl {
                default_system: None,
            },
        }
    }

    /// A short name for logs and results (`chatml`, `gemma`).
    pub fn name(&self) -> &'static str {
        match self {
            ChatTemplate::ChatMl { .. } => "chatml",
            ChatTemplate::Gemma => "gemma",
        }
    }

    /// Renders `messages`; with `add_generation_prompt` the text ends with the header of the
    /// model's reply.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> String {
        match self {
            ChatTemplate::ChatMl { default_system } => {
                chat_prompt(messages, add_generation_prompt, default_system.as_deref())
            }
            ChatTemplate::Gemma => gemma_prompt(messages, add_generation_prompt),
        }
    }
}

/// Whitespace as C's `isspace` sees it (what llama.cpp's template code trims).
fn trim_c(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c'])
}

/// Renders `messages` in Gemma's turns (see the module header).
pub fn gemma_prompt(messages: &[ChatMessage], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    let mut system = String::new();
    for m in messages {
        if m.role == "system" {
            system.push_str(trim_c(&m.content));
            continue;
        }
        let role = if m.role == "assistant" {
            "model"
        } else {
            m.role.as_str()
        };
        out.push_str("<start_of_turn>");
        out.push_str(role);
        out.push('\n');
        if !system.is_empty() && role != "model" {
            out.push_str(&system);
            out.push_str("\n\n");
            system.clear();
        }
        out.push_str(trim_c(&m.content));
        out.push_str("<end_of_turn>\n");
    }
    if add_generation_prompt {
        out.push_str("<start_of_turn>model\n");
    }
    out
}

/// The system prompt that the model's chat template inserts when the conversation does not
/// start with one (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging
/// Face"), or `None` when the template inserts none.
pub fn default_system_prompt(g: &GgufFile) -> Option<String> {
    let template = g.get("tokenizer.chat_template")?.as_str()?;
    system_prompt_in_template(template)
}

/// Finds a literal ChatML system turn in a template that is emitted only when the first
/// message is not a system message.
fn system_prompt_in_template(template: &str) -> Option<String> {
    let conditional = [
        "!= 'system'",
        "!= \"system\"",
        "== 'system'",
        "== \"system\"",
    ]
    .iter()
    .any(|t| template.contains(t));
    if !conditional {
        return None;
    }
    // The first literal system turn: a head followed by plain text up to `<|im_end|>`. A turn
    // that splices a variable (the explicit system message) holds quotes or braces instead.
    for head in ["<|im_start|>system\n", "<|im_start|>system\\n"] {
        for (start, _) in template.match_indices(head) {
            let body = &template[start + head.len()..];
            let Some(end) = body.find("<|im_end|>") else {
                continue;
            };
            let text = &body[..end];
            if text.is_empty() || text.contains(['\'', '"', '{', '}', '+']) {
                continue;
            }
            return Some(text.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_conditional_default_only() {
        let t = "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nBe kind<|im_end|>\n' }}{% endif %}";
        assert_eq!(system_prompt_in_template(t).as_deref(), Some("Be kind"));
        let plain = "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n'}}{% endfor %}";
        assert_eq!(system_prompt_in_template(plain), None);
        // Qwen2.5's shape: an if/else on `== 'system'`, the explicit turn spliced first.
        let qwen = "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + \
                    messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- \
                    '<|im_start|>system\\nYou are Q.<|im_end|>\\n' }}{%- endif %}";
        assert_eq!(
            system_prompt_in_template(qwen).as_deref(),
            Some("You are Q.")
        );
    }

    #[test]
    fn gemma_turns_fold_the_system_message_into_the_first_user_turn() {
        let msgs = [
            ChatMessage::new("system", " Be brief. "),
            ChatMessage::new("user", "Hi\n"),
            ChatMessage::new("assistant", "Hello."),
            ChatMessage::new("user", "Bye"),
        ];
        assert_eq!(
            gemma_prompt(&msgs, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n\
             <start_of_turn>model\nHello.<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(
            gemma_prompt(&msgs[1..2], false),
            "<start_of_turn>user\nHi<end_of_turn>\n"
        );
    }
}
