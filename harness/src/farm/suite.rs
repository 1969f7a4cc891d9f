//! The nightly suite (`ci/nightly.toml`): the model to push, extra files to push beside it,
//! and the `pocketperf` invocations ("steps") each device runs, with placeholders the farm
//! fills per device.
//!
//! Placeholders in step arguments: `{model}` (the model on the device), `{out}` (the step's
//! result directory on the device), `{device}` (`local` on adb and local devices,
//! `sim:<profile>` on simulated ones), `{suite}` (the directory the suite's files were pushed
//! to), `{dir}` (the device's working directory), and any `vars` of the inventory. `{{` and
//! `}}` are literal braces. Relative paths are resolved against the suite file's directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::FarmError;
pub use super::names::{BUILTIN_PLACEHOLDERS, valid_name};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    name: String,
    args: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGate {
    rules: Option<PathBuf>,
    baseline: Option<String>,
    drift_window: Option<usize>,
    drift_threshold: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSuite {
    name: String,
    model: Option<String>,
    #[serde(default)]
    files: Vec<PathBuf>,
    gate: Option<RawGate>,
    #[serde(default)]
    step: Vec<RawStep>,
}

/// One `pocketperf` invocation of the suite.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Unique name; also the result directory's name.
    pub name: String,
    /// Arguments after the binary, with placeholders.
    pub args: Vec<String>,
}

/// Which model the suite pushes.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelChoice {
    /// The cached reference model (fetched on first use).
    Reference,
    /// A GGUF file.
    File(PathBuf),
}

/// The parsed suite.
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    /// File it was read from.
    pub path: PathBuf,
    /// Suite name.
    pub name: String,
    /// Model to push.
    pub model: ModelChoice,
    /// Extra files pushed into `{suite}` (LoadGen configs and the like).
    pub files: Vec<PathBuf>,
    /// Gate rules for the comparison with the baseline night, when the suite names them.
    pub gate_rules: Option<PathBuf>,
    /// Baseline choice and drift window over nights (`[gate] baseline`, `drift_window`,
    /// `drift_threshold`).
    pub nights: super::nights::NightRules,
    /// Steps in order.
    pub steps: Vec<Step>,
}

/// One piece of a step argument.
#[derive(Debug, Clone, PartialEq)]
enum Piece<'a> {
    Text(&'a str),
    Var(&'a str),
}

fn pieces(arg: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = arg;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("{{") {
            out.push(Piece::Text("{"));
            rest = r;
        } else if let Some(r) = rest.strip_prefix("}}") {
            out.push(Piece::Text("}"));
            rest = r;
        } else if let Some(r) = rest.strip_prefix('{') {
            let end = r
                .find('}')
                .ok_or_else(|| format!("`{arg}`: unclosed `{{` (write `{{{{` for a brace)"))?;
            out.push(Piece::Var(&r[..end]));
            rest = &r[end + 1..];
        } else if rest.starts_with('}') {
            return Err(format!("`{arg}`: stray `}}` (write `}}}}` for a brace)"));
        } else {
            let end = rest.find(['{', '}']).unwrap_or(rest.len());
            out.push(Piece::Text(&rest[..end]));
            rest = &rest[end..];
        }
    }
    Ok(out)
}

/// Names of the placeholders an argument uses.
pub fn placeholders(arg: &str) -> Result<Vec<String>, String> {
    Ok(pieces(arg)?
        .into_iter()
        .filter_map(|p| match p {
            Piece::Var(v) => Some(v.to_string()),
            Piece::Text(_) => None,
        })
        .collect())
}

/// Fills the placeholders of one argument; an undefined one is an error naming it.
pub fn substitute(arg: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut s = String::with_capacity(arg.len());
    for p in pieces(arg)? {
        match p {
            Piece::Text(t) => s.push_str(t),
            Piece::Var(v) => s.push_str(
                vars.get(v)
                    .ok_or_else(|| format!("`{arg}`: placeholder `{{{v}}}` is not defined"))?,
            ),
        }
    }
    Ok(s)
}

impl Suite {
    /// Reads and validates a suite file.
    pub fn from_file(path: &Path) -> Result<Self, FarmError> {
        let text = std::fs::read_to_string(path).map_err(|source| FarmError::Io {
            action: "reading",
            path: path.into(),
            source,
        })?;
        Self::from_toml_str(&text, path)
    }

    /// Parses suite text; `path` names the file in errors and anchors relative paths.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Self, FarmError> {
        let bad = |problem: String| FarmError::Suite {
            path: path.into(),
            problem,
        };
        let raw: RawSuite = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let anchor = |p: PathBuf| if p.is_relative() { base.join(p) } else { p };
        if raw.step.is_empty() {
            return Err(bad("no [[step]] entries".into()));
        }
        let mut steps: Vec<Step> = Vec::new();
        for s in raw.step {
            if !valid_name(&s.name) {
                return Err(bad(format!(
                    "step `{}`: name must match [A-Za-z0-9][A-Za-z0-9._-]* (it becomes a directory name)",
                    s.name
                )));
            }
            if steps.iter().any(|x| x.name == s.name) {
                return Err(bad(format!("step `{}`: duplicate name", s.name)));
            }
            let mut uses_out = false;
            for a in &s.args {
                let vars = placeholders(a).map_err(|e| bad(format!("step `{}`: {e}", s.name)))?;
                uses_out |= vars.iter().any(|v| v == "out");
                if a.contains('\0') {
                    return Err(bad(format!(
                        "step `{}`: an argument contains a NUL byte",
                        s.name
                    )));
                }
            }
            if !uses_out {
                return Err(bad(format!(
                    "step `{}`: its args must pass `{{out}}` (where the result directory goes)",
                    s.name
                )));
            }
            steps.push(Step {
                name: s.name,
                args: s.args,
            });
        }
        let model = match raw.model.as_deref() {
            None | Some("reference") => ModelChoice::Reference,
            Some(p) => ModelChoice::File(anchor(PathBuf::from(p))),
        };
        let mut files = Vec::with_capacity(raw.files.len());
        for f in raw.files {
            let name_ok = f.file_name().is_some();
            if !name_ok {
                return Err(bad(format!("files: `{}` names no file", f.display())));
            }
            files.push(anchor(f));
        }
        let mut nights = super::nights::NightRules::default();
        if let Some(g) = &raw.gate {
            match g.baseline.as_deref() {
                None | Some("latest-passing") => {}
                Some(n) if super::names::valid_name(n) => {
                    nights.baseline = super::nights::BaselineRule::Pinned(n.to_string())
                }
                Some(n) => {
                    return Err(bad(format!(
                        "gate.baseline = {n:?}: \"latest-passing\" or the name of a dated run directory"
                    )));
                }
            }
            if let Some(w) = g.drift_window {
                if !(2..=365).contains(&w) {
                    return Err(bad(format!(
                        "gate.drift_window = {w}: must be 2 to 365 nights"
                    )));
                }
                nights.drift_window = w;
            }
            if let Some(t) = g.drift_threshold {
                if !(t.is_finite() && t > 0.0 && t < 1.0) {
                    return Err(bad(format!(
                        "gate.drift_threshold = {t}: must lie strictly between 0 and 1"
                    )));
                }
                nights.drift_threshold = t;
            }
        }
        Ok(Suite {
            path: path.into(),
            name: raw.name,
            model,
            files,
            gate_rules: raw.gate.and_then(|g| g.rules).map(anchor),
            nights,
            steps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_braces() {
        let mut v = BTreeMap::new();
        v.insert("out".to_string(), "/d/o u t".to_string());
        assert_eq!(substitute("--out={out}", &v).unwrap(), "--out=/d/o u t");
        assert_eq!(substitute("{{out}}", &v).unwrap(), "{out}");
        assert!(substitute("{nope}", &v).unwrap_err().contains("`{nope}`"));
        assert!(substitute("{out", &v).is_err());
        assert!(substitute("out}", &v).is_err());
    }

    #[test]
    fn steps_must_write_somewhere() {
        let e = Suite::from_toml_str(
            "name = \"x\"\n[[step]]\nname = \"a\"\nargs = [\"run\"]\n",
            Path::new("s.toml"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("{out}"), "{e}");
        let e = Suite::from_toml_str(
            "name = \"x\"\n[[step]]\nname = \"../a\"\nargs = [\"{out}\"]\n",
            Path::new("s.toml"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("directory name"), "{e}");
    }
}
