//! The tokenizer against llama.cpp's `llama-tokenize` on the three reference models: every
//! case of `reference/{smollm2-135m,gemma3-270m,qwen2.5-coder-0.5b}/tokenize_cases.json` must
//! give the same ids and pieces (honouring the case's `parse_special`), decode back to its
//! text and stream-decode without splitting characters; and the chat route must give exactly
//! the `prompt_ids` of each model's `chat_capital` reference case (BOS included where the model
//! adds one).

mod common;

use std::sync::OnceLock;
use std::time::Instant;

use pocketperf_runtime::gguf::GgufFile;
use pocketperf_runtime::tokenizer::{
    ChatMessage, ChatTemplate, Prompt, StreamDecoder, Tokenizer, chat_prompt, default_system_prompt,
};
use serde_json::Value as Json;

const MODELS: [&str; 3] = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"];

struct Loaded {
    gguf: GgufFile,
    tok: Tokenizer,
}

fn load(name: &str) -> &'static Loaded {
    static L: [OnceLock<Loaded>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let i = MODELS
        .iter()
        .position(|&m| m == name)
        .expect("catalog model");
    L[i].get_or_init(|| {
        let gguf = GgufFile::open(&common::model_path_for(name)).expect("model opens");
        let t0 = Instant::now();
        let tok = Tokenizer::from_gguf(&gguf).expect("tokenizer loads");
        eprintln!(
            "{name}: tokenizer of {} pieces built in {:.1} ms",
            tok.vocab_size(),
            t0.elapsed().as_secs_f64() * 1e3
        );
        Loaded { gguf, tok }
    })
}

fn tokenize_cases(name: &str) -> Vec<Json> {
    let p = common::reference_dir_for(name).join("tokenize_cases.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let j: Json = serde_json::from_str(&text).expect("json");
    j["cases"].as_array().expect("cases").clone()
}

fn strings(v: &Json) -> Vec<&str> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string"))
        .collect()
}

/// Every case identical to llama.cpp; returns how many cases were checked. `raw_pieces`: the
/// reference lists vocabulary strings (SmolLM2's `llama-tokenize` run) rather than the text of
/// each token (the llama-cpp-python runs of the newer references; see each file's notes).
fn check_cases(name: &str, raw_pieces: bool) -> usize {
    let tok = &load(name).tok;
    let cases = tokenize_cases(name);
    assert!(cases.len() >= 12, "{name}: {} cases", cases.len());
    for c in &cases {
        let case = c["name"].as_str().unwrap();
        let text = c["text"].as_str().unwrap();
        let special = c["parse_special"].as_bool().unwrap();
        let want = common::ids(&c["ids"]);
        let got = tok.encode(text, special).unwrap();
        assert_eq!(got, want, "{name} case {case}: {text:?}");
        if let Some(n) = c["n_tokens"].as_u64() {
            assert_eq!(got.len() as u64, n, "{name} case {case}");
        }
        let pieces: Vec<&str> = got.iter().map(|&i| tok.token_piece(i).unwrap()).collect();
        if raw_pieces {
            assert_eq!(pieces, strings(&c["pieces"]), "{name} case {case}");
        } else {
            // llama.cpp's `token_to_piece`: the token's bytes, as lossy UTF-8.
            let text_pieces: Vec<String> = got
                .iter()
                .map(|&i| String::from_utf8_lossy(&tok.token_bytes(i)).into_owned())
                .collect();
            assert_eq!(text_pieces, strings(&c["pieces"]), "{name} case {case}");
        }
        for (&id, p) in got.iter().zip(&pieces) {
            assert_eq!(tok.token_id(p), Some(id), "{name} case {case}: piece {p:?}");
        }
        // The decode direction: the ids give back the text, at once and streamed.
        assert_eq!(tok.decode(&got), text, "{name} case {case} round trip");
        let mut dec = StreamDecoder::default();
        let mut s = String::new();
        for &id in &got {
            let part = dec.push(tok, id);
            assert!(
                !part.contains('\u{fffd}'),
                "{name} case {case}: split character"
            );
            s.push_str(&part);
        }
        s.push_str(&dec.finish());
        assert_eq!(s, text, "{name} case {case} streamed");
    }
    cases.len()
}

#[test]
fn smollm2_cases_match_llama_cpp() {
    assert_eq!(check_cases("smollm2-135m", true), 12);
}

#[test]
fn gemma3_sentencepiece_cases_match_llama_cpp() {
    assert_eq!(check_cases("gemma3-270m", false), 12);
}

#[test]
fn qwen2_pretokenizer_cases_match_llama_cpp() {
    assert_eq!(check_cases("qwen2.5-coder-0.5b", false), 12);
}

/// The `chat_capital` case of a model's `greedy_and_logits.json`.
fn chat_capital(name: &str) -> Json {
    common::cases_for(name)
        .into_iter()
        .find(|c| c["name"] == "chat_capital")
        .unwrap_or_else(|| panic!("{name}: no chat_capital case"))
}

#[test]
fn chat_route_gives_the_reference_prompt_ids() {
    // Each reference built its chat prompt from this one user message (see its `prompt`).
    let question = "What is the capital of France?";
    for name in MODELS {
        let l = load(name);
        let case = chat_capital(name);
        let want = common::ids(&case["prompt_ids"]);
        let prompt = Prompt::text(question).chat(true);
        assert_eq!(
            l.tok.render_prompt(&prompt),
            case["prompt"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(l.tok.encode_prompt(&prompt).unwrap(), want, "{name}");
        // The same conversation given as messages.
        let msgs = [ChatMessage::new("user", question)];
        assert_eq!(
            l.tok.encode_prompt(&Prompt::messages(&msgs)).unwrap(),
            want,
            "{name}"
        );
        // A continuation never carries BOS.
        let cont = l.tok.encode_prompt(&prompt.continuation()).unwrap();
        let skip = usize::from(l.tok.add_bos());
        assert_eq!(cont, want[skip..], "{name}");
    }
}

#[test]
fn plain_prompts_get_bos_only_where_the_model_adds_it() {
    for (name, bos) in [
        ("smollm2-135m", None),
        ("gemma3-270m", Some(2)),
        ("qwen2.5-coder-0.5b", None),
    ] {
        let tok = &load(name).tok;
        let text = "Hello world";
        let body = tok.encode(text, false).unwrap();
        let got = tok.encode_prompt(&Prompt::text(text)).unwrap();
        let want: Vec<u32> = bos.into_iter().chain(body.iter().copied()).collect();
        assert_eq!(got, want, "{name}");
        assert_eq!(
            tok.encode_prompt(&Prompt::text(text).continuation())
                .unwrap(),
            body
        );
    }
    // parse_special decides whether control-token text is a control token.
    let tok = &load("qwen2.5-coder-0.5b").tok;
    let t = "<|im_start|>x";
    let parsed = tok
        .encode_prompt(&Prompt::text(t).parse_special(true))
        .unwrap();
    assert_eq!(parsed[0], 151644);
    let plain = tok.encode_prompt(&Prompt::text(t)).unwrap();
    assert!(!plain.contains(&151644));
    assert_eq!(tok.decode(&plain), t);
}

#[test]
fn vocabulary_facts_of_the_models() {
    let tok = &load("smollm2-135m").tok;
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos(), Some(1));
    assert_eq!(tok.eos(), Some(2));
    assert!(!tok.add_bos());
    assert_eq!(tok.eog_ids(), &[0, 2]);
    assert!(tok.is_eog(0) && tok.is_eog(2) && !tok.is_eog(1) && !tok.is_eog(504));
    assert_eq!(tok.token_piece(1), Some("<|im_start|>"));
    assert_eq!(tok.token_bytes(1), b"<|im_start|>");
    assert_eq!(tok.token_piece(905), Some("Ġworld"));
    assert_eq!(tok.token_bytes(905), b" world");
    assert_eq!(tok.token_piece(49152), None);
    assert!(tok.token_bytes(49152).is_empty());
    assert_eq!(tok.encode("", true).unwrap(), Vec::<u32>::new());

    // Gemma 3: facts from its README (BOS 2 added, EOS 1, `<end_of_turn>` ends a turn).
    let tok = &load("gemma3-270m").tok;
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(
        (tok.bos(), tok.eos(), tok.add_bos()),
        (Some(2), Some(1), true)
    );
    let eot = tok.token_id("<end_of_turn>").unwrap();
    assert!(tok.is_eog(1) && tok.is_eog(eot) && !tok.is_eog(2));
    assert_eq!(tok.chat_template(), &ChatTemplate::Gemma);
    // `▁` decodes to a space, `<0xNN>` to its byte.
    let world = tok.token_id("▁world").unwrap();
    assert_eq!(tok.token_bytes(world), b" world");
    let nl = tok.token_id("<0x0A>").unwrap();
    assert_eq!(tok.token_bytes(nl), b"\n");
    assert_eq!(tok.encode("", true).unwrap(), Vec::<u32>::new());

    let tok = &load("qwen2.5-coder-0.5b").tok;
    assert_eq!(tok.vocab_size(), 151_936);
    assert_eq!(tok.eos(), Some(151_645));
    assert!(!tok.add_bos());
    assert!(tok.is_eog(151_645) && tok.is_eog(151_643));
    assert_eq!(
        tok.chat_template(),
        &ChatTemplate::ChatMl {
            default_system: Some(
                "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.".into()
            )
        }
    );
}

#[test]
fn stream_decoder_never_splits_a_character() {
    for name in MODELS {
        let tok = &load(name).tok;
        // Each of these needs several byte tokens per character in some vocabulary.
        for text in ["🦀", "👨\u{200d}👩\u{200d}👧", "你好世界", "ﬁ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∮"]
        {
            let ids = tok.encode(text, false).unwrap();
            let mut dec = StreamDecoder::new();
            let mut out = String::new();
            for &id in &ids {
                let part = dec.push(tok, id);
                assert!(!part.contains('\u{fffd}'), "{name} {text:?}");
                out.push_str(&part);
            }
            assert_eq!(dec.finish(), "");
            assert_eq!(out, text, "{name}");
        }
    }
    // A sequence cut in the middle of a character flushes as U+FFFD at the end.
    let tok = &load("smollm2-135m").tok;
    let ids = tok.encode("🦀", false).unwrap();
    assert!(ids.len() > 1);
    let mut dec = StreamDecoder::new();
    let mut out = String::new();
    for &id in &ids[..ids.len() - 1] {
        out.push_str(&dec.push(tok, id));
    }
    assert_eq!(out, "");
    assert_eq!(dec.finish(), "\u{fffd}");
}

#[test]
fn chat_prompt_for_two_turns_in_chatml() {
    let l = load("smollm2-135m");
    let sys = default_system_prompt(&l.gguf);
    assert_eq!(
        sys.as_deref(),
        Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
    );
    let msgs = [
        ChatMessage::new("user", "What is 2+2?"),
        ChatMessage::new("assistant", "4."),
        ChatMessage::new("user", "And 3+3?"),
    ];
    let p = chat_prompt(&msgs, true, sys.as_deref());
    let want = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
                <|im_start|>user\nWhat is 2+2?<|im_end|>\n\
                <|im_start|>assistant\n4.<|im_end|>\n\
                <|im_start|>user\nAnd 3+3?<|im_end|>\n\
                <|im_start|>assistant\n";
    assert_eq!(p, want);
    assert_eq!(l.tok.render_prompt(&Prompt::messages(&msgs)), want);
    // An explicit system message replaces the default; no generation prompt when not asked.
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
    ];
    assert_eq!(
        chat_prompt(&msgs, false, sys.as_deref()),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
    assert_eq!(
        l.tok
            .render_prompt(&Prompt::messages(&msgs).generation_prompt(false)),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
    assert_eq!(
        chat_prompt(&msgs[1..], false, None),
        "<|im_start|>user\nHi<|im_end|>\n"
    );
    // The prompt tokenizes with one control token per turn marker.
    let ids = l.tok.encode(&p, true).unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == 1).count(), 5);
    assert_eq!(ids.iter().filter(|&&i| i == 2).count(), 4);
}

#[test]
fn gemma_chat_folds_a_system_message_into_the_first_turn() {
    let tok = &load("gemma3-270m").tok;
    let msgs = [
        ChatMessage::new("system", "Answer in one word."),
        ChatMessage::new("user", "Capital of France?"),
        ChatMessage::new("assistant", "Paris"),
        ChatMessage::new("user", "And of Italy?"),
    ];
    let text = tok.render_prompt(&Prompt::messages(&msgs));
    assert_eq!(
        text,
        "<start_of_turn>user\nAnswer in one word.\n\nCapital of France?<end_of_turn>\n\
         <start_of_turn>model\nParis<end_of_turn>\n\
         <start_of_turn>user\nAnd of Italy?<end_of_turn>\n<start_of_turn>model\n"
    );
    let ids = tok.encode_prompt(&Prompt::messages(&msgs)).unwrap();
    let sot = tok.token_id("<start_of_turn>").unwrap();
    let eot = tok.token_id("<end_of_turn>").unwrap();
    assert_eq!(ids[0], 2);
    assert_eq!(ids[1], sot);
    assert_eq!(ids.iter().filter(|&&i| i == sot).count(), 4);
    assert_eq!(ids.iter().filter(|&&i| i == eot).count(), 3);
    assert_eq!(tok.decode(&ids[1..]), text);
}

#[test]
fn the_perplexity_text_has_the_reference_token_count() {
    // `perplexity.json` of each model: the shared text without its trailing newline,
    // tokenized with BOS first where the model adds one; SmolLM2's file lists the ids too.
    let mut text =
        std::fs::read_to_string(common::reference_dir_for("smollm2-135m").join("ppl_text.txt"))
            .expect("ppl_text.txt");
    if text.ends_with('\n') {
        text.pop();
    }
    for name in MODELS {
        let tok = &load(name).tok;
        let p = common::reference_dir_for(name).join("perplexity.json");
        let j: Json = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let t0 = Instant::now();
        let ids = tok.encode_prompt(&Prompt::text(&text)).unwrap();
        eprintln!(
            "{name}: {} bytes to {} tokens in {:.1} ms",
            text.len(),
            ids.len(),
            t0.elapsed().as_secs_f64() * 1e3
        );
        assert_eq!(ids.len() as u64, j["n_tokens"].as_u64().unwrap(), "{name}");
        let skip = usize::from(tok.add_bos());
        assert_eq!(tok.decode(&ids[skip..]), text, "{name}");
        if j["token_ids"].is_array() {
            assert_eq!(ids, common::ids(&j["token_ids"]), "{name}");
        }
    }
}

#[test]
fn a_dialogue_turn_appends_to_the_previous_one() {
    // What a dialogue runner with KV reuse does: the next turn's rendered text extends the
    // previous prompt plus the reply, and the extension (which opens with the end-of-turn
    // special token) encodes as a continuation to the ids of the whole conversation.
    for name in MODELS {
        let tok = &load(name).tok;
        let mut msgs = vec![ChatMessage::new("user", "Capital of France?")];
        let first = tok.render_prompt(&Prompt::messages(&msgs));
        let mut ids = tok.encode_prompt(&Prompt::messages(&msgs)).unwrap();
        let reply = "Paris.";
        ids.extend(tok.encode(reply, false).unwrap());
        msgs.push(ChatMessage::new("assistant", reply));
        msgs.push(ChatMessage::new("user", "And of Italy?"));
        let full = tok.render_prompt(&Prompt::messages(&msgs));
        let held = format!("{first}{reply}");
        let suffix = full
            .strip_prefix(held.as_str())
            .expect("append-only template");
        let more = Prompt::text(suffix).parse_special(true).continuation();
        ids.extend(tok.encode_prompt(&more).unwrap());
        assert_eq!(
            ids,
            tok.encode_prompt(&Prompt::messages(&msgs)).unwrap(),
            "{name}"
        );
    }
}
