//! What the benchmarks' reports share: reading a results file, the median and spread of runs,
//! the conditions line every generated block opens with.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// The results file `file`, parsed; `Err` holds the block to render when it is not there yet,
/// saying to run `how`.
pub(crate) fn load(root: &Path, file: &str, how: &str) -> Result<Result<Value, String>> {
    match std::fs::read_to_string(root.join(file)) {
        Ok(text) => Ok(Ok(serde_json::from_str(&text)?)),
        Err(_) => Ok(Err(format!("NOT MEASURED: no {file}. Run {how}.\n"))),
    }
}

/// A results document as its report starts: the runs, the conditions, and the line saying how
/// and where they were measured (`command`).
pub(crate) fn measured<'d>(doc: &'d Value, command: &str) -> Result<(&'d Vec<Value>, &'d Value, String)> {
    let c = &doc["conditions"];
    Ok((doc["runs"].as_array().context("runs")?, c, conditions_line(c, command)))
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A count that must be the same in every run of an arm: shown once, or as `min–max` if not.
pub(crate) fn count(runs: &[&Value], key: &str) -> String {
    let vals: Vec<u64> = runs.iter().filter_map(|r| r[key].as_u64()).collect();
    match (vals.iter().min(), vals.iter().max()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a}–{b}"),
        _ => "NOT MEASURED".into(),
    }
}

pub(crate) fn ratio(stock: f64, patched: f64) -> String {
    if stock > 0.0 && patched.is_finite() { format!("{:.3}", patched / stock) } else { "—".into() }
}

pub(crate) fn conditions_line(c: &Value, command: &str) -> String {
    format!(
        "Measured by `{command}` ({} rounds, arms alternated, order swapped each round), commit {}, {}, {} CPUs, load {} → {}, {}.",
        c["rounds"],
        c["commit"].as_str().unwrap_or("?").get(..10).unwrap_or("?"),
        c["date"].as_str().unwrap_or("?"),
        c["nproc"],
        c["loadavg_start"].as_str().unwrap_or("?"),
        c["loadavg_end"].as_str().unwrap_or("?"),
        c["git"].as_str().unwrap_or("?"),
    )
}

/// Per arm of a maintenance run on `repo`: its pack bytes (the same every round), and its CPU
/// (ms) and peak memory (MB), medians.
pub(crate) fn arm_medians<const N: usize>(
    runs: &[Value],
    repo: &str,
    arms: [&str; N],
) -> ([f64; N], [f64; N], [f64; N]) {
    let of = |arm: &str| -> Vec<&Value> { runs.iter().filter(|r| r["repo"] == repo && r["arm"] == arm).collect() };
    let bytes = |arm: &str| of(arm).first().and_then(|r| r["pack_bytes"].as_f64()).unwrap_or(f64::NAN);
    let cpu = |arm: &str| median(of(arm).iter().filter_map(|r| r["cpu_us"].as_f64()).collect()) / 1000.0;
    let peak = |arm: &str| median(of(arm).iter().filter_map(|r| r["peak_rss_kb"].as_f64()).collect()) / 1024.0;
    (arms.map(bytes), arms.map(cpu), arms.map(peak))
}

/// `(crate, version)` pairs of a results file's conditions: the arm's own record (`arms.stock`,
/// "gix-pack 0.78.0"), else the queue it was run with ("file (gix-pack 0.77.0)").
pub(crate) fn measured_versions(c: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let items: Vec<Vec<String>> = match c["arms"]["stock"].as_array() {
        Some(stock) => stock.iter().filter_map(|v| v.as_str()).map(words).collect(),
        None => c["queue"]
            .as_array()
            .map(|q| q.iter().filter_map(|v| v.as_str()?.rsplit_once('(')?.1.strip_suffix(')').map(words)).collect())
            .unwrap_or_default(),
    };
    for w in items {
        if let [k, v, ..] = w.as_slice()
            && !out.iter().any(|(ok, _)| ok == k)
        {
            out.push((k.clone(), v.clone()));
        }
    }
    out
}

pub(crate) fn versions_line(c: &Value) -> String {
    let v = measured_versions(c);
    if v.is_empty() {
        return String::new();
    }
    let list = v.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
    format!(" Checked against {list}: as published (stock arm) and with patches/ (patched arm).")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_that_vary_between_runs_show_their_range() {
        let a = serde_json::json!({"k": 3});
        let b = serde_json::json!({"k": 5});
        assert_eq!(count(&[&a, &a], "k"), "3");
        assert_eq!(count(&[&a, &b], "k"), "3–5");
        assert_eq!(count(&[], "k"), "NOT MEASURED");
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn measured_versions_come_from_the_arm_record_or_the_queue() {
        let new = serde_json::json!({"arms": {"stock": ["gix-parallel 0.50.2", "gix-pack 0.78.0"]}, "queue": ["a (gix-pack 0.77.0)"]});
        assert_eq!(
            measured_versions(&new),
            vec![("gix-parallel".into(), "0.50.2".into()), ("gix-pack".into(), "0.78.0".into())]
        );
        let old = serde_json::json!({"queue": ["gix-parallel/0001-x.patch (gix-parallel 0.50.1)", "gix-pack/0001-y.patch (gix-pack 0.77.0)", "gix-pack/0002-z.patch (gix-pack 0.77.0)"]});
        assert_eq!(
            measured_versions(&old),
            vec![("gix-parallel".into(), "0.50.1".into()), ("gix-pack".into(), "0.77.0".into())]
        );
    }
}
