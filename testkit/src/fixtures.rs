//! Captured sysfs trees (`../shared/fixtures/sysfs/*`) as tests use them: copied into a
//! scratch directory so a test can mutate them, with their links intact.
//!
//! A captured tree holds links in one of two forms: a real symbolic link, or a "link
//! stand-in" — a small regular file whose one line is the link's relative target (what a copy
//! without symlink support leaves; the fixture READMEs describe the links). The helpers here
//! treat both alike: [`link_target`] reads either, [`set_link_target`] rewrites either in its
//! own form, [`follow_link`] resolves either, and [`copy_tree_as`] can turn stand-ins into
//! real links so a test covers both forms whatever the checkout holds.

use std::fs;
use std::path::{Component, Path, PathBuf};

/// How [`copy_tree_as`] writes the links of the tree it copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Each link in the form it has in the source.
    AsFound,
    /// Stand-ins become real symbolic links.
    Real,
}

/// Copies `src` into `dst` (created), keeping every link in the form it has; copied files are
/// made writable.
pub fn copy_tree(src: &Path, dst: &Path) {
    copy_tree_as(src, dst, Links::AsFound)
}

/// [`copy_tree`] with the links written as `links` says.
pub fn copy_tree_as(src: &Path, dst: &Path, links: Links) {
    fs::create_dir_all(dst).unwrap_or_else(|e| panic!("{}: {e}", dst.display()));
    let entries = fs::read_dir(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    for e in entries {
        let e = e.unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        let from = e.path();
        let to = dst.join(e.file_name());
        let ft = e
            .file_type()
            .unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        if ft.is_symlink() {
            let target = fs::read_link(&from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
            symlink(&target, &to);
        } else if ft.is_dir() {
            copy_tree_as(&from, &to, links);
        } else if let (Links::Real, Some(target)) = (links, stand_in_target(&from)) {
            symlink(&target, &to);
        } else {
            fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
            let mut perm = fs::metadata(&to)
                .unwrap_or_else(|e| panic!("{}: {e}", to.display()))
                .permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perm.set_readonly(false);
            fs::set_permissions(&to, perm).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
        }
    }
}

fn symlink(target: &Path, at: &Path) {
    std::os::unix::fs::symlink(target, at)
        .unwrap_or_else(|e| panic!("{} -> {}: {e}", at.display(), target.display()));
}

/// `path` with the relative `target` applied to its parent, lexically (`..` pops).
fn resolve(path: &Path, target: &Path) -> PathBuf {
    let mut out = path.parent().map(Path::to_path_buf).unwrap_or_default();
    for comp in target.components() {
        match comp {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c.as_os_str()),
        }
    }
    out
}

/// The target a link stand-in holds: a regular file of one short line that reads as a
/// relative path and resolves to an existing entry. `None` for any other file.
pub fn stand_in_target(path: &Path) -> Option<PathBuf> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > 1024 {
        return None;
    }
    let text = fs::read_to_string(path).ok()?;
    let line = text.trim();
    if line.is_empty() || line.contains(char::is_whitespace) || !line.starts_with("..") {
        return None;
    }
    let target = PathBuf::from(line);
    resolve(path, &target).exists().then_some(target)
}

/// The target of a link in either form, or `None` when `path` is neither.
pub fn link_target(path: &Path) -> Option<PathBuf> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => fs::read_link(path).ok(),
        Ok(_) => stand_in_target(path),
        Err(_) => None,
    }
}

/// Points the link at `path` to `target`, keeping its form (a real link stays a link, a
/// stand-in stays a file).
pub fn set_link_target(path: &Path, target: &Path) {
    let meta = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if meta.file_type().is_symlink() {
        fs::remove_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        symlink(target, path);
    } else {
        fs::write(path, format!("{}\n", target.display()))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// The directory a link in either form leads to (`path` itself when it is a directory).
pub fn follow_link(path: &Path) -> PathBuf {
    if path.is_dir() {
        return path.to_path_buf();
    }
    let target = link_target(path)
        .unwrap_or_else(|| panic!("{} is neither a directory nor a link", path.display()));
    let out = resolve(path, &target);
    assert!(
        out.is_dir(),
        "{} → {} is not a directory",
        path.display(),
        out.display()
    );
    out
}
