//! A run's settings (every CLI setting, as `meta.settings` records them) in a collapsed block:
//! in HTML a `<details>` with one table row per setting (nested objects flattened to dotted
//! keys such as `cli.engine.threads`, built by the HTML renderer from [`settings_pairs`]), in Markdown a `<details>` around a pretty-printed JSON
//! code block. The provenance tables leave the one-line JSON out and point here.

use serde_json::Value;

/// `(dotted key, value)` pairs of a settings object, in the object's key order; strings
/// bare, other scalars and arrays as compact JSON. A value that is not an object is one pair
/// with an empty key.
pub fn settings_pairs(settings: &Value) -> Vec<(String, String)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            Value::String(s) => out.push((prefix.to_string(), s.clone())),
            other => out.push((prefix.to_string(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    walk("", settings, &mut out);
    out
}

/// The settings as parsed from the provenance's compact JSON (`Value::String` of the text
/// when it does not parse, so it is still shown).
pub fn parse(settings_json: &str) -> Value {
    serde_json::from_str(settings_json).unwrap_or_else(|_| Value::String(settings_json.into()))
}

/// The collapsed Markdown settings block: pretty JSON in a fenced code block whose fence is
/// longer than any run of backticks inside, so no setting can close it.
pub fn settings_markdown(settings_json: &str) -> String {
    let pretty = serde_json::to_string_pretty(&parse(settings_json))
        .unwrap_or_else(|_| settings_json.to_string());
    let longest = pretty.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!(
        "<details><summary>Settings</summary>\n\n{fence}json\n{pretty}\n{fence}\n\n</details>\n"
    )
}
