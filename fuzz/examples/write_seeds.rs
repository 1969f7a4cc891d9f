//! Writes the seed corpus of the `gguf_open` target: `write_seeds DIR`.

use std::path::PathBuf;

fn main() -> std::process::ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: write_seeds DIR");
        return std::process::ExitCode::from(2);
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("{}: {e}", dir.display());
        return std::process::ExitCode::from(2);
    }
    for (name, bytes) in pocketperf_fuzz::seeds() {
        let p = dir.join(format!("{name}.gguf"));
        if let Err(e) = std::fs::write(&p, bytes) {
            eprintln!("{}: {e}", p.display());
            return std::process::ExitCode::from(2);
        }
        println!("{}", p.display());
    }
    std::process::ExitCode::SUCCESS
}
