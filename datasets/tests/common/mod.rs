//! Test helpers: locating shared material (`$POCKETPERF_SHARED`, else `<workspace>/../shared`).

#![allow(dead_code)]

use std::path::PathBuf;

/// The shared-material directory; panics with instructions when it is missing.
pub fn shared_dir() -> PathBuf {
    let dir = pocketperf_testkit::shared_dir();
    assert!(
        dir.is_dir(),
        "shared material not found at {}: set POCKETPERF_SHARED to the directory holding datasets/mmlu",
        dir.display()
    );
    dir
}

/// The MMLU copy in the shared material (the directory holding `data/` and `categories.tsv`).
pub fn mmlu_dir() -> PathBuf {
    let dir = shared_dir().join("datasets").join("mmlu");
    assert!(
        dir.join("data").join("test").is_dir(),
        "MMLU not found at {}: the shared material must hold datasets/mmlu/data/{{dev,val,test}}",
        dir.display()
    );
    dir
}
