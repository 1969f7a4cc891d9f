//! Small, defensive readers for sysfs attribute files under an arbitrary root.
//!
//! Implements the conventions of the Linux sysfs ABI (one value per file, trailing newline)
//! plus one tolerance that captured trees need: a *link stand-in* — a regular file whose only
//! content is a relative path such as `../cpufreq/policy0` — is followed like the symbolic
//! link it replaces (trees copied through tools that do not keep symlinks look like that).
//! Real symbolic links are followed by the file system itself.
//!
//! No read can hang: every file is opened non-blocking (`O_NONBLOCK`: opening a FIFO with no
//! writer returns at once instead of waiting for one) and anything but a regular file — a
//! FIFO, a socket, a device node planted in a tree — is refused before a byte is read; a read
//! takes at most 64 KiB, so it ends.

use std::fs;
use std::path::{Component, Path, PathBuf};

use super::TelemetryError;

/// Largest attribute we are willing to read (sysfs attributes are at most one page).
const MAX_ATTR_BYTES: u64 = 64 * 1024;
/// Link stand-ins chained deeper than this are treated as broken.
const MAX_LINK_DEPTH: usize = 8;

/// Reads an attribute file and returns its content with surrounding whitespace trimmed and
/// control characters escaped ([`printable`]).
/// One open and one read (no separate stat: the sampler calls this dozens of times a tick).
pub fn read_trimmed(path: &Path) -> Result<String, TelemetryError> {
    use std::io::Read;
    let read_err = |source: std::io::Error| TelemetryError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = open_regular(path).map_err(read_err)?;
    let mut bytes = Vec::with_capacity(64);
    // Reading a directory fails with EISDIR, reported like any failing read.
    file.take(MAX_ATTR_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_ATTR_BYTES {
        return Err(TelemetryError::Parse {
            path: path.to_path_buf(),
            value: format!("more than {MAX_ATTR_BYTES} bytes"),
            expected: "an attribute file of at most 64 KiB",
        });
    }
    Ok(printable(String::from_utf8_lossy(&bytes).trim()))
}

/// `text` with every control character but newline and tab (C0, DEL, C1: an escape
/// sequence's ESC, a bell, a carriage return) written as `\u{..}`, so a name read from a file
/// can never move the cursor, recolour or retitle a terminal it is printed to. Newlines stay:
/// multi-line attributes (ODPM's `energy_value`) are parsed line by line. Text without such
/// characters comes back unchanged.
pub fn printable(text: &str) -> String {
    let hostile = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(hostile) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hostile(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Opens `path` for reading without blocking and refuses anything but a regular file (sysfs
/// attributes, procfs files and link stand-ins are all regular files).
pub fn open_regular(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let ft = file.metadata()?.file_type();
    if ft.is_file() {
        Ok(file)
    } else if ft.is_dir() {
        // Reported as a read of a directory fails, so callers see the usual EISDIR.
        Err(std::io::Error::from_raw_os_error(libc::EISDIR))
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket or device node is not read)",
        ))
    }
}

/// Reads an attribute holding one signed integer.
pub fn read_i64(path: &Path) -> Result<i64, TelemetryError> {
    let text = read_trimmed(path)?;
    parse_i64(path, &text)
}

/// Parses one signed integer, naming the file in the error.
pub fn parse_i64(path: &Path, text: &str) -> Result<i64, TelemetryError> {
    text.trim()
        .parse::<i64>()
        .map_err(|_| TelemetryError::Parse {
            path: path.to_path_buf(),
            value: clip(text),
            expected: "a decimal integer",
        })
}

/// Reads an attribute holding one decimal number (integer or fraction).
pub fn read_f64(path: &Path) -> Result<f64, TelemetryError> {
    let text = read_trimmed(path)?;
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(TelemetryError::Parse {
            path: path.to_path_buf(),
            value: clip(&text),
            expected: "a decimal number",
        }),
    }
}

/// Reads a whitespace-separated list of unsigned integers (e.g. `related_cpus`,
/// `scaling_available_frequencies`, which the kernel prints with a trailing space).
pub fn read_u64_list(path: &Path) -> Result<Vec<u64>, TelemetryError> {
    let text = read_trimmed(path)?;
    text.split_whitespace()
        .map(|tok| {
            tok.parse::<u64>().map_err(|_| TelemetryError::Parse {
                path: path.to_path_buf(),
                value: clip(tok),
                expected: "a whitespace-separated list of unsigned integers",
            })
        })
        .collect()
}

/// Cuts a value to a length fit for an error message.
pub fn clip(text: &str) -> String {
    const MAX: usize = 60;
    if text.chars().count() <= MAX {
        text.to_string()
    } else {
        let head: String = text.chars().take(MAX).collect();
        format!("{head}…")
    }
}

/// Resolves `path` to a directory: a directory (or symlink to one) is returned as is; a link
/// stand-in file is followed relative to its parent. `None` when it leads to no directory.
pub fn resolve_dir(path: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINK_DEPTH {
        let meta = fs::metadata(&current).ok()?;
        if meta.is_dir() {
            return Some(current);
        }
        if !meta.is_file() || meta.len() > 4096 {
            return None;
        }
        let mut target = String::new();
        open_regular(&current)
            .ok()?
            .take(4096)
            .read_to_string(&mut target)
            .ok()?;
        let target = target.trim();
        if target.is_empty() || target.contains('\n') || !is_relative_link(target) {
            return None;
        }
        let parent = current.parent()?.to_path_buf();
        current = normalize(&parent.join(target));
    }
    None
}

fn is_relative_link(target: &str) -> bool {
    target.starts_with("../") || target.starts_with("./")
}

/// Lexically normalizes `a/b/../c` to `a/c` (sysfs links are resolved against the link's
/// directory, which in a captured tree is itself a plain directory).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in path.components() {
        match comp {
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Lists the entries of `dir` whose name starts with `prefix` and continues with a decimal
/// index (`thermal_zone12`, `policy7`), sorted by that index.
pub fn list_indexed(dir: &Path, prefix: &str) -> Vec<(u32, String)> {
    let mut found: Vec<(u32, String)> = list_names(dir)
        .into_iter()
        .filter_map(|name| {
            let idx = name.strip_prefix(prefix)?.parse::<u32>().ok()?;
            Some((idx, name))
        })
        .collect();
    found.sort();
    found
}

/// Lists the entry names of `dir`, sorted; an unreadable directory lists nothing.
pub fn list_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_read_from_a_file_are_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("type");
        fs::write(&p, "soc\x1b[31mRED\x07\r\u{9b}2J\n").unwrap();
        let got = read_trimmed(&p).unwrap();
        assert_eq!(got, "soc\\u{1b}[31mRED\\u{7}\\u{d}\\u{9b}2J");
        assert!(!got.chars().any(char::is_control));
        assert_eq!(printable("cpu-thermal 0"), "cpu-thermal 0");
        assert_eq!(printable("t=1\nCH0, 5\tx"), "t=1\nCH0, 5\tx");
    }

    #[test]
    fn a_fifo_is_refused_at_once_instead_of_blocking_the_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("temp");
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path and mode.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let t0 = std::time::Instant::now();
        assert!(read_i64(&p).is_err());
        assert!(resolve_dir(&p).is_none());
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn normalize_resolves_parent_components() {
        assert_eq!(
            normalize(Path::new("a/b/c/../../d/./e")),
            PathBuf::from("a/d/e")
        );
    }

    #[test]
    fn link_stand_in_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x/policy0");
        fs::create_dir_all(&target).unwrap();
        fs::create_dir_all(dir.path().join("x/cpu0")).unwrap();
        fs::write(dir.path().join("x/cpu0/cpufreq"), "../policy0\n").unwrap();
        assert_eq!(
            resolve_dir(&dir.path().join("x/cpu0/cpufreq")),
            Some(target)
        );
        fs::write(dir.path().join("x/cpu0/bogus"), "hello\n").unwrap();
        assert_eq!(resolve_dir(&dir.path().join("x/cpu0/bogus")), None);
    }
}
