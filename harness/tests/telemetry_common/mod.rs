//! Helpers shared by the telemetry tests: locating the sysfs fixtures, copying a fixture tree
//! so a test can mutate it, and reading fixture files the way the READMEs describe them
//! (independently of the code under test).
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

#[allow(unused_imports)]
pub use pocketperf_testkit::fixtures::{
    Links, copy_tree_as, follow_link, link_target, set_link_target,
};

pub use pocketperf_testkit::shared_dir;

/// A fixture tree by name (`snapdragon-8gen3`, `pixel-8-pro`).
pub fn fixture(name: &str) -> PathBuf {
    let d = shared_dir().join("fixtures/sysfs").join(name);
    assert!(
        d.is_dir(),
        "sysfs fixture not found at {} (set POCKETPERF_SHARED)",
        d.display()
    );
    d
}

/// Copies a fixture tree (files, directories, and links in the form they have) into a fresh
/// temp dir and returns (guard, root of the copy). Copied files are made writable.
pub fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    copy_fixture_as(name, Links::AsFound)
}

/// [`copy_fixture`] with the links written as `links` says (`Links::Real` turns link
/// stand-ins into real symbolic links).
pub fn copy_fixture_as(name: &str, links: Links) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dst = tmp.path().join(name);
    copy_tree_as(&fixture(name), &dst, links);
    (tmp, dst)
}

/// Reads a fixture file, trimmed.
pub fn read(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// Reads an integer fixture file.
pub fn read_i64(path: &Path) -> i64 {
    let t = read(path);
    t.parse()
        .unwrap_or_else(|_| panic!("{}: `{t}` is not an integer", path.display()))
}

/// Follows a directory that may be a real link or a link stand-in file (a file holding a
/// relative path, as in the fixtures).
pub fn follow(path: &Path) -> PathBuf {
    follow_link(path)
}

/// Entries of a directory whose names start with `prefix` followed by digits, with the index.
pub fn indexed(dir: &Path, prefix: &str) -> Vec<(u32, PathBuf)> {
    let mut v: Vec<(u32, PathBuf)> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_str()?.to_string();
            let idx: u32 = name.strip_prefix(prefix)?.parse().ok()?;
            Some((idx, e.path()))
        })
        .collect();
    v.sort();
    v
}

/// Whitespace-separated integers.
pub fn ints(text: &str) -> Vec<u64> {
    text.split_whitespace()
        .map(|t| {
            t.parse()
                .unwrap_or_else(|_| panic!("`{t}` is not an integer"))
        })
        .collect()
}

/// The fixture READMEs' rule for zones that are not temperatures.
pub fn readme_not_a_temperature(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("-bcl-") || n.contains("ibat") || n.contains("vbat") || n.starts_with("socd")
}

/// An ODPM device as the README describes it: `name`, `enabled_rails` lines
/// `CH<n>[<rail>]:<subsystem>`, `energy_value` lines `CH<n>(T=..)[<rail>], <µW·s>`.
#[derive(Debug, Clone, PartialEq)]
pub struct OdpmFixture {
    pub name: String,
    pub rails: Vec<(u32, String, String, u64)>,
    pub t_ms: u64,
}

pub fn odpm_fixtures(root: &Path) -> Vec<OdpmFixture> {
    let base = root.join("bus/iio/devices");
    let mut out = Vec::new();
    for e in fs::read_dir(&base).expect("iio devices") {
        let dir = follow(&e.expect("entry").path());
        let name = read(&dir.join("name"));
        let energy = read(&dir.join("energy_value"));
        let mut lines = energy.lines();
        let t_ms: u64 = lines
            .next()
            .and_then(|l| l.strip_prefix("t="))
            .and_then(|v| v.trim().parse().ok())
            .expect("t= line");
        let values: Vec<(String, u64)> = lines
            .map(|l| {
                let rail = l[l.find('[').unwrap() + 1..l.find(']').unwrap()].to_string();
                let v = l.rsplit(',').next().unwrap().trim().parse().unwrap();
                (rail, v)
            })
            .collect();
        let rails = read(&dir.join("enabled_rails"))
            .lines()
            .map(|l| {
                let ch: u32 = l[2..l.find('[').unwrap()].parse().unwrap();
                let rail = l[l.find('[').unwrap() + 1..l.find(']').unwrap()].to_string();
                let sub = l[l.find("]:").unwrap() + 2..].to_string();
                let v = values
                    .iter()
                    .find(|(r, _)| *r == rail)
                    .expect("rail value")
                    .1;
                (ch, rail, sub, v)
            })
            .collect();
        out.push(OdpmFixture { name, rails, t_ms });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
