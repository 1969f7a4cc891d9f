//! Chat prompts in ChatML, the format of the SmolLM2 and Qwen2 families
//! (`<|im_start|>{role}\n{content}<|im_end|>\n` per message), and the default system prompt
//! that a model's `tokenizer.chat_template` inserts when a conversation has none.
//!
//! Default system prompt: we follow the model's own Jinja template, as Hugging Face
//! `apply_chat_template` and llama.cpp's `--jinja` mode do. SmolLM2's template emits
//! `<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging
//! Face<|im_end|>\n` when the first message is not a system message; an explicit system message
//! replaces it. llama.cpp's built-in (non-Jinja) ChatML formatter omits it, so prompts built
//! there without `--jinja` differ from ours by exactly that turn. The default is found by
//! [`default_system_prompt`] only when the template holds it as a literal ChatML system turn
//! behind a `!= 'system'` test; any other template gives `None` (no system turn is added).

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
    let conditional = template.contains("!= 'system'") || template.contains("!= \"system\"");
    if !conditional {
        return None;
    }
    for head in ["<|im_start|>system\n", "<|im_start|>system\\n"] {
        if let Some(start) = template.find(head) {
            let body = &template[start + head.len()..];
            let end = body.find("<|im_end|>")?;
            let text = &body[..end];
            // A template that splices a variable here has no fixed default.
            if text.contains("{{") || text.contains("' +") || text.contains("\" +") {
                return None;
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
    }
}
