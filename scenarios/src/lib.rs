//! LoadGen-equivalent scenario engine (SingleStream, Offline, Server), LLM-agnostic.
