//! Runs that fill a result directory, one module per kind of run; `main` picks one from
//! `pocketperf run --scenario`.
//!
//! - [`perf`] — SingleStream, Offline and Server through the scenario engine;
//! - [`dialogue`] — scripted multi-turn chats with energy per dialogue.

pub mod dialogue;
pub mod perf;
