//! Writes the MMLU-576 manifest computed from an MMLU copy to stdout; this is how
//! `datasets/mmlu/subset-576.csv` is produced:
//! `cargo run -p pocketperf-datasets --example write_subset_manifest -- <mmlu-dir>`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args_os().nth(1).map(PathBuf::from);
    let dir = pocketperf_datasets::resolve_mmlu_dir(arg.as_deref())?;
    let entries = pocketperf_datasets::compute_subset(&dir)?;
    print!("{}", pocketperf_datasets::subset::manifest_csv(&entries));
    Ok(())
}
