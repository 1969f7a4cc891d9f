//! The names inventory and suite files share: the rule for device and step names (they
//! become directory names of the result tree) and the placeholders every suite step gets
//! built in, which inventory `vars` may not shadow.

/// Placeholders the farm always defines.
pub const BUILTIN_PLACEHOLDERS: &[&str] = &["model", "out", "device", "suite", "dir"];

/// A name usable as one directory component: `[A-Za-z0-9][A-Za-z0-9._-]*`, at most 64 bytes.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}
