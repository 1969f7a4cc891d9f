//! POSIX `sh` quoting for the one command line `adb shell` hands to the device's shell.
//!
//! `adb shell CMD` runs `CMD` through the device shell (mksh or toybox `sh` on Android), so
//! every word of a remote command is quoted here: serials never reach a shell (they are
//! separate arguments of the host `adb` process), and paths or arguments with spaces, quotes,
//! `$`, backticks, globs, semicolons or newlines arrive as exactly one word. A NUL byte cannot
//! be passed through any shell and is refused.

use super::FarmError;

/// Characters that need no quoting anywhere in a POSIX shell word. `=` is left out so a
/// first word can never be read as an assignment, `~` so it is never tilde-expanded.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ':' | ',' | '+' | '@' | '%')
}

/// Quotes one word: unchanged when it is plain, otherwise wrapped in single quotes with each
/// `'` written as `'\''`. The empty string becomes `''`.
pub fn quote(word: &str) -> Result<String, FarmError> {
    if word.contains('\0') {
        return Err(FarmError::Quote {
            value: word.replace('\0', "\\0"),
        });
    }
    if !word.is_empty() && word.chars().all(is_plain) {
        return Ok(word.to_string());
    }
    let mut s = String::with_capacity(word.len() + 2);
    s.push('\'');
    for c in word.chars() {
        if c == '\'' {
            s.push_str("'\\''");
        } else {
            s.push(c);
        }
    }
    s.push('\'');
    Ok(s)
}

/// Quotes every word and joins them with spaces.
pub fn join<S: AsRef<str>>(words: &[S]) -> Result<String, FarmError> {
    let quoted: Result<Vec<String>, FarmError> = words.iter().map(|w| quote(w.as_ref())).collect();
    Ok(quoted?.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_readable() {
        assert_eq!(
            quote("/data/local/tmp/pocketperf").unwrap(),
            "/data/local/tmp/pocketperf"
        );
        assert_eq!(quote("--out").unwrap(), "--out");
        assert_eq!(quote("sim:pixel-8-pro").unwrap(), "sim:pixel-8-pro");
    }

    #[test]
    fn special_words_are_single_quoted() {
        assert_eq!(quote("").unwrap(), "''");
        assert_eq!(quote("a b").unwrap(), "'a b'");
        assert_eq!(quote("it's").unwrap(), "'it'\\''s'");
        assert_eq!(quote("$(reboot)").unwrap(), "'$(reboot)'");
        assert_eq!(quote("a=b").unwrap(), "'a=b'");
        assert_eq!(quote("~root").unwrap(), "'~root'");
        assert!(quote("a\0b").is_err());
        assert_eq!(join(&["ls", "-l", "x y"]).unwrap(), "ls -l 'x y'");
    }
}
