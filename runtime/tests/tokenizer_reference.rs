//! The tokenizer against llama.cpp's `llama-tokenize` on the reference model: every case of
//! `reference/smollm2-135m/tokenize_cases.json` must give the same ids and pieces, decode
//! back to its text, and stream-decode without splitting characters.

use std::path::{Path, PathBuf};

use pocketperf_runtime::gguf::GgufFile;
use pocketperf_runtime::tokenizer::{
    ChatMessage, StreamDecoder, Tokenizer, chat_prompt, default_system_prompt,
};
use serde_json::Value as Json;

fn shared_dir() -> PathBuf {
    match std::env::var_os("POCKETPERF_SHARED") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .join("../shared"),
    }
}

fn model_path() -> PathBuf {
    const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
    let p = if let Some(p) = std::env::var_os("POCKETPERF_MODEL") {
        PathBuf::from(p)
    } else if let Some(c) = std::env::var_os("POCKETPERF_CACHE") {
        PathBuf::from(c).join("models").join(FILE)
    } else if let Some(c) = std::env::var_os("XDG_CACHE_HOME") {
        PathBuf::from(c).join("pocketperf/models").join(FILE)
    } else {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/pocketperf/models")
            .join(FILE)
    };
    assert!(
        p.is_file(),
        "reference model not found at {} (set POCKETPERF_MODEL or fetch it into the cache)",
        p.display()
    );
    p
}

fn load() -> (GgufFile, Tokenizer) {
    let g = GgufFile::open(&model_path()).expect("model opens");
    let t = Tokenizer::from_gguf(&g).expect("tokenizer loads");
    (g, t)
}

fn cases() -> Vec<Json> {
    let p = shared_dir().join("reference/smollm2-135m/tokenize_cases.json");
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("cannot read {} ({e}); set POCKETPERF_SHARED", p.display()));
    let j: Json = serde_json::from_str(&text).expect("json");
    j["cases"].as_array().expect("cases").clone()
}

#[test]
fn every_reference_case_matches_llama_cpp() {
    let (_, tok) = load();
    let cases = cases();
    assert!(cases.len() >= 12);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        let text = c["text"].as_str().unwrap();
        let special = c["parse_special"].as_bool().unwrap();
        let want: Vec<u32> = c["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text, special).unwrap();
        assert_eq!(got, want, "case {name}: {text:?}");
        let pieces: Vec<&str> = got.iter().map(|&i| tok.token_piece(i).unwrap()).collect();
        let want_pieces: Vec<&str> = c["pieces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(pieces, want_pieces, "case {name}");
        assert_eq!(
            got.len() as u64,
            c["n_tokens"].as_u64().unwrap(),
            "case {name}"
        );
        assert_eq!(tok.decode(&got), text, "case {name} round trip");
        // Token ids resolve back through the piece table.
        for (&id, p) in got.iter().zip(&pieces) {
            assert_eq!(tok.token_id(p), Some(id));
        }
        // Streaming gives the same text however it is cut.
        let mut dec = StreamDecoder::default();
        let mut s = String::new();
        for &id in &got {
            let part = dec.push(&tok, id);
            assert!(!part.contains('\u{fffd}'), "case {name}: split character");
            s.push_str(&part);
        }
        s.push_str(&dec.finish());
        assert_eq!(s, text, "case {name} streamed");
    }
}

#[test]
fn special_token_text_is_plain_text_without_parse_special() {
    let (_, tok) = load();
    let with = tok.encode("<|im_start|>user\nHi<|im_end|>", true).unwrap();
    assert_eq!(with[0], 1);
    assert_eq!(*with.last().unwrap(), 2);
    let without = tok.encode("<|im_start|>user\nHi<|im_end|>", false).unwrap();
    assert!(!without.contains(&1) && !without.contains(&2));
    assert_eq!(tok.decode(&without), "<|im_start|>user\nHi<|im_end|>");
    assert_eq!(tok.decode(&with), "<|im_start|>user\nHi<|im_end|>");
}

#[test]
fn vocabulary_facts_of_the_model() {
    let (_, tok) = load();
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
}

#[test]
fn stream_decoder_never_splits_a_character() {
    let (_, tok) = load();
    // Each of these needs several byte tokens per character.
    for text in ["🦀", "👨\u{200d}👩\u{200d}👧", "你好世界", "ﬁ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∮"]
    {
        let ids = tok.encode(text, false).unwrap();
        let multi = ids
            .iter()
            .any(|&i| std::str::from_utf8(&tok.token_bytes(i)).is_err());
        assert!(multi, "{text:?} should need partial-character tokens");
        let mut dec = StreamDecoder::new();
        let mut out = String::new();
        for &id in &ids {
            let part = dec.push(&tok, id);
            assert!(!part.contains('\u{fffd}'), "{text:?}");
            out.push_str(&part);
        }
        assert_eq!(dec.finish(), "");
        assert_eq!(out, text);
    }
    // A sequence cut in the middle of a character flushes as U+FFFD at the end.
    let ids = tok.encode("🦀", false).unwrap();
    let mut dec = StreamDecoder::new();
    let mut out = String::new();
    for &id in &ids[..ids.len() - 1] {
        out.push_str(&dec.push(&tok, id));
    }
    assert_eq!(out, "");
    assert_eq!(dec.finish(), "\u{fffd}");
}

#[test]
fn chat_prompt_for_two_turns_in_chatml() {
    let (g, tok) = load();
    let sys = default_system_prompt(&g);
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
        chat_prompt(&msgs[1..], false, None),
        "<|im_start|>user\nHi<|im_end|>\n"
    );
    // The prompt tokenizes with one control token per turn marker.
    let ids = tok.encode(&p, true).unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == 1).count(), 5);
    assert_eq!(ids.iter().filter(|&&i| i == 2).count(), 4);
}
