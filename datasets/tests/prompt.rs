//! MMLU prompt formats against hand-written expectations in the original `evaluate.py`
//! format, shot dropping, the shared prefix, and the chat form.

mod common;

use pocketperf_datasets::mmlu::{self, Letter, Question, Split};
use pocketperf_datasets::prompt::{few_shot_prefix, format_question, format_subject, header};
use pocketperf_datasets::{Error, Role, build_chat, build_prompt, load_subset, zero_shot};

fn q(subject: &str, row: u64, text: &str, answer: Letter) -> Question {
    Question {
        subject: subject.into(),
        row,
        question: text.into(),
        choices: [
            format!("{text}-a"),
            format!("{text}-b"),
            format!("{text}-c"),
            format!("{text}-d"),
        ],
        answer,
    }
}

#[test]
fn text_format_matches_the_original_character_for_character() {
    assert_eq!(
        format_subject("high_school_us_history"),
        " high school us history"
    );
    assert_eq!(
        header("abstract_algebra"),
        "The following are multiple choice questions (with answers) about  abstract algebra.\n\n"
    );
    let shots = [
        q("abstract_algebra", 0, "S1", Letter::B),
        q("abstract_algebra", 1, "S2", Letter::D),
    ];
    let test = q("abstract_algebra", 7, "T", Letter::A);
    let p = build_prompt(&test, &shots, |_| true).unwrap();
    let expected = "The following are multiple choice questions (with answers) about  abstract algebra.\n\n\
S1\nA. S1-a\nB. S1-b\nC. S1-c\nD. S1-d\nAnswer: B\n\n\
S2\nA. S2-a\nB. S2-b\nC. S2-c\nD. S2-d\nAnswer: D\n\n\
T\nA. T-a\nB. T-b\nC. T-c\nD. T-d\nAnswer:";
    assert_eq!(p.text, expected);
    assert_eq!(p.shots_used, 2);
    assert_eq!(p.prefix(), few_shot_prefix("abstract_algebra", &shots));
    assert_eq!(&p.text[p.prefix_len_bytes..], format_question(&test, false));
    assert!(p.text.ends_with("Answer:"));

    let z = zero_shot(&test);
    assert_eq!(
        z.text,
        "The following are multiple choice questions (with answers) about  abstract algebra.\n\n\
T\nA. T-a\nB. T-b\nC. T-c\nD. T-d\nAnswer:"
    );
    assert_eq!(
        (z.shots_used, z.prefix_len_bytes),
        (0, header("abstract_algebra").len())
    );
}

#[test]
fn shots_are_dropped_whole_from_the_front_until_the_prompt_fits() {
    let shots: Vec<Question> = (0..5)
        .map(|i| q("anatomy", i, &format!("Shot{i}"), Letter::C))
        .collect();
    let test = q("anatomy", 3, "Test", Letter::B);
    let full = build_prompt(&test, &shots, |_| true).unwrap();
    // A budget that admits the prompt with three shots but not four.
    let three = build_prompt(&test, &shots[2..], |_| true).unwrap();
    let budget = three.text.len();
    let fitted = build_prompt(&test, &shots, |t| t.len() <= budget).unwrap();
    assert!(full.text.len() > budget);
    assert_eq!(fitted.shots_used, 3);
    assert_eq!(fitted, three);
    assert!(!fitted.text.contains("Shot0") && !fitted.text.contains("Shot1"));
    assert!(fitted.text.contains("Shot2\n") && fitted.text.contains("Shot4\n"));

    // Only the 0-shot prompt fits.
    let z = build_prompt(&test, &shots, |t| t.len() <= zero_shot(&test).text.len()).unwrap();
    assert_eq!(z, zero_shot(&test));
    // Nothing fits: an error naming the question, not a truncated prompt.
    let err = build_prompt(&test, &shots, |_| false).unwrap_err();
    assert!(
        matches!(err, Error::PromptTooLong { row: 3, .. }),
        "{err:?}"
    );
}

#[test]
fn the_few_shot_prefix_is_shared_by_every_question_of_a_subject() {
    let dir = common::mmlu_dir();
    let questions = load_subset(&dir).unwrap();
    let shots =
        pocketperf_datasets::load_dev_shots(&dir, questions.iter().map(|q| q.subject.as_str()))
            .unwrap();
    assert_eq!(shots.len(), 57);
    assert!(shots.values().all(|s| s.len() == 5));
    let dev = &shots["professional_law"];
    assert_eq!(
        dev,
        &mmlu::load_split(&dir, Split::Dev, "professional_law").unwrap()
    );
    let law: Vec<_> = questions
        .iter()
        .filter(|q| q.subject == "professional_law")
        .collect();
    assert_eq!(law.len(), 63);
    let prompts: Vec<_> = law
        .iter()
        .map(|q| build_prompt(q, dev, |_| true).unwrap())
        .collect();
    let prefix = prompts[0].prefix().to_string();
    assert!(prefix.starts_with(
        "The following are multiple choice questions (with answers) about  professional law.\n\n"
    ));
    assert_eq!(prefix.matches("\nAnswer: ").count(), 5);
    for (p, q) in prompts.iter().zip(&law) {
        assert_eq!(p.shots_used, 5);
        assert_eq!(p.prefix(), prefix);
        assert!(p.text[p.prefix_len_bytes..].starts_with(q.question.as_str()));
    }
}

#[test]
fn chat_form_has_user_assistant_turns_per_shot() {
    let shots = [
        q("virology", 0, "S1", Letter::A),
        q("virology", 1, "S2", Letter::C),
    ];
    let test = q("virology", 9, "T", Letter::D);
    let chat = build_chat(&test, &shots, |_| true).unwrap();
    let roles: Vec<Role> = chat.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::User
        ]
    );
    assert_eq!(
        chat.messages[0].content,
        "The following are multiple choice questions (with answers) about  virology.\n\n\
S1\nA. S1-a\nB. S1-b\nC. S1-c\nD. S1-d\nAnswer:"
    );
    assert_eq!(chat.messages[1].content, "A");
    assert_eq!(chat.messages[3].content, "C");
    assert_eq!(chat.messages[4].content, format_question(&test, false));
    assert_eq!((chat.shots_used, chat.prefix_messages), (2, 4));

    // Fitting drops the first shot; with none left the single turn is the 0-shot text.
    let one = build_chat(&test, &shots, |m| m.len() <= 3).unwrap();
    assert_eq!(one.shots_used, 1);
    assert!(
        one.messages[0].content.contains("S2\n")
            && one.messages[0].content.starts_with("The following")
    );
    let none = build_chat(&test, &shots, |m| m.len() == 1).unwrap();
    assert_eq!(none.messages.len(), 1);
    assert_eq!(none.messages[0].content, zero_shot(&test).text);
    assert!(build_chat(&test, &shots, |_| false).is_err());

    let json = serde_json::to_string(&chat.messages[1]).unwrap();
    assert_eq!(json, r#"{"role":"assistant","content":"A"}"#);
}
