//! Datasets: MMLU reader, the 576-question subset, prompt sets and dialogues.
