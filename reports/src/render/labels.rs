//! Readable names for telemetry columns and table cells: a legend says "SoC temperature (°C)",
//! not `temp.soc.c`, and a table prints a count as `64` and a flag as `true`, not `64.000`
//! and `1.000`.

/// The legend name of a `telemetry.csv` column (names as in `docs/TELEMETRY.md`), with the
/// unit the reports plot it in: temperatures in °C, frequencies in MHz, power in mW, memory
/// in MiB. Columns of no known family keep their own name.
pub fn column_label(column: &str) -> String {
    let between = |prefix: &str, suffix: &str| -> Option<&str> {
        column
            .strip_prefix(prefix)?
            .strip_suffix(suffix)
            .filter(|s| !s.is_empty())
    };
    let cpu = |policy: &str| match policy.strip_prefix("policy") {
        Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            format!("CPU{n} cluster")
        }
        _ => format!("CPU {policy}"),
    };
    match column {
        "temp.soc.c" => return "SoC temperature (°C)".into(),
        "temp.skin.c" => return "skin temperature (°C)".into(),
        "gov.temp.c" => return "governor temperature (°C)".into(),
        "gpufreq.khz" => return "GPU frequency (MHz)".into(),
        "gpu.busy.pct" => return "GPU busy (%)".into(),
        "power.total.mw" => return "total power (mW)".into(),
        "energy.total.mj" => return "energy (mJ)".into(),
        "rss.kib" => return "resident memory (MiB)".into(),
        "battery.voltage.mv" => return "battery voltage (mV)".into(),
        "battery.current.ma" => return "battery current (mA)".into(),
        _ => {}
    }
    if let Some(zone) = between("temp.", ".c") {
        format!("{zone} temperature (°C)")
    } else if let Some(policy) = between("cpufreq.", ".khz") {
        format!("{} frequency (MHz)", cpu(policy))
    } else if let Some(policy) = between("cpumax.", ".khz") {
        format!("{} frequency cap (MHz)", cpu(policy))
    } else if let Some(rail) = between("power.", ".mw") {
        format!("{rail} power (mW)")
    } else {
        column.to_string()
    }
}

/// A whole number as an integer (`64`), anything else as [`num`] does (`-` when not finite).
pub fn int_text(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 9.0e15 {
        format!("{x:.0}")
    } else {
        num(x)
    }
}

/// A flag stored as `0.0` / `1.0`: `false` / `true` (`-` when not finite).
pub fn bool_text(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x != 0.0 {
        "true".into()
    } else {
        "false".into()
    }
}

/// Formats a number for tables: three decimals, `-` for non-finite.
pub fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "-".into()
    }
}

/// A table value as its unit asks: `bool` as `true`/`false`, `count` as an integer, the rest
/// with three decimals ([`num`]).
pub fn value_text(unit: &str, value: f64) -> String {
    match unit {
        "bool" => bool_text(value),
        "count" => int_text(value),
        _ => num(value),
    }
}
