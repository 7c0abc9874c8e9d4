//! Puts the gitoxide version and the patch queue's names into `gixd --version`, read from the
//! workspace's Cargo.lock and patches/series at build time.

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap_or_default();
    let gix = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"gix\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"').to_owned())
        .unwrap_or_else(|| "unknown".into());
    let series = std::fs::read_to_string(root.join("patches/series")).unwrap_or_default();
    let patches: Vec<&str> = series
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches(".patch"))
        .collect();
    println!("cargo:rustc-env=GIXD_GIX_VERSION={gix}");
    println!(
        "cargo:rustc-env=GIXD_PATCHES={}",
        if patches.is_empty() { "none".to_owned() } else { patches.join(", ") }
    );
    println!("cargo:rerun-if-changed=../Cargo.lock");
    println!("cargo:rerun-if-changed=../patches/series");
}
