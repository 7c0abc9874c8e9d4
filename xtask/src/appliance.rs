//! `cargo xtask appliance`: the same gixd binary, byte for byte, from every clean build.
//!
//! The committed tree (`git archive HEAD`) is unpacked into two directories of different names;
//! third-party sources pinned by Cargo.lock are fetched once through `cargo vendor` and both
//! builds use them `--locked --offline`. Paths are remapped (source tree, third-party sources,
//! cargo home, toolchain), `SOURCE_DATE_EPOCH` is the last commit's time, codegen is one unit
//! without debug info, the binary is stripped. The two binaries must hash the same; if not, the
//! sections that differ are listed. Then a tarball with sorted entries, fixed owners and mtimes.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Files of the tarball: (name in the tarball, source in the repository or "" for the binary, mode).
pub const MANIFEST: &[(&str, &str, u32)] = &[
    ("gixd-appliance/bin/gixd", "", 0o755),
    ("gixd-appliance/etc/gixd/gixd.env", "appliance/gixd.env", 0o644),
    ("gixd-appliance/lib/systemd/system/gixd.service", "appliance/gixd.service", 0o644),
    ("gixd-appliance/lib/systemd/system/gixd.socket", "appliance/gixd.socket", 0o644),
    ("gixd-appliance/share/doc/gixd/OPERATING.md", "README.md#Operating gixd", 0o644),
];

/// The environment and flags that make a build reproducible, for the build rooted at `src`.
pub fn build_env(
    src: &Path,
    third_party: &Path,
    cargo_home: &Path,
    toolchain: &Path,
    epoch: &str,
) -> Vec<(String, String)> {
    let remaps = [(src, "/gixd"), (third_party, "/third-party"), (cargo_home, "/cargo"), (toolchain, "/rust")];
    let mut rustflags: Vec<String> =
        remaps.iter().map(|(from, to)| format!("--remap-path-prefix={}={to}", from.display())).collect();
    rustflags.push("-Cstrip=symbols".into());
    vec![
        ("RUSTFLAGS".into(), rustflags.join(" ")),
        ("SOURCE_DATE_EPOCH".into(), epoch.into()),
        ("CARGO_PROFILE_RELEASE_CODEGEN_UNITS".into(), "1".into()),
        ("CARGO_PROFILE_RELEASE_DEBUG".into(), "0".into()),
        ("CARGO_PROFILE_RELEASE_STRIP".into(), "symbols".into()),
        ("CARGO_PROFILE_RELEASE_INCREMENTAL".into(), "false".into()),
        ("CARGO_INCREMENTAL".into(), "0".into()),
    ]
}

/// The `cargo build` arguments of an appliance build.
pub const BUILD_ARGS: &[&str] = &["build", "--release", "--locked", "--offline", "-p", "gixd"];

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn sha256(path: &Path) -> Result<String> {
    let out = run(Command::new("sha256sum").arg(path))?;
    Ok(out.split_whitespace().next().context("sha256sum output")?.to_owned())
}

/// The README section `## <title>` up to the next `## ` heading.
pub fn readme_section(readme: &str, title: &str) -> Option<String> {
    let start = readme.find(&format!("\n## {title}\n"))? + 1;
    let rest = &readme[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 4);
    Some(rest[..end].to_owned())
}

/// Pack `files` (name in tarball, content, mode) into a gzip tarball that depends only on them:
/// sorted names, owner and group 0, mtime `epoch`, no gzip timestamp.
pub fn pack(files: &[(String, Vec<u8>, u32)], epoch: &str, out: &Path, scratch: &Path) -> Result<()> {
    let stage = scratch.join("stage");
    if stage.exists() {
        std::fs::remove_dir_all(&stage)?;
    }
    let mut names = Vec::new();
    for (name, content, mode) in files {
        let path = stage.join(name);
        std::fs::create_dir_all(path.parent().context("a file in a directory")?)?;
        std::fs::write(&path, content)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))?;
        // Directories too, whatever the umask.
        for dir in path.ancestors().skip(1).take_while(|d| d.starts_with(&stage) && *d != stage) {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
        names.push(name.clone());
    }
    let tar = scratch.join("out.tar");
    run(Command::new("tar")
        .args(["--sort=name", "--format=gnu", "--owner=0", "--group=0", "--numeric-owner", "--mode=go-w"])
        .arg(format!("--mtime=@{epoch}"))
        .arg("-C")
        .arg(&stage)
        .arg("-cf")
        .arg(&tar)
        .arg(names.first().context("files")?.split('/').next().context("top directory")?))?;
    let gz = run(Command::new("sh").arg("-c").arg(format!("gzip -n -9 -c '{}' > '{}'", tar.display(), out.display())));
    gz.map(drop)
}

fn count_crates(root: &Path) -> Result<(usize, usize, usize)> {
    let lock: toml_edit::DocumentMut = std::fs::read_to_string(root.join("Cargo.lock"))?.parse()?;
    let packages = lock["package"].as_array_of_tables().context("lock packages")?;
    let all = packages.len();
    let third_party = packages.iter().filter(|p| p.get("source").is_some()).count();
    let vendored = std::fs::read_dir(root.join("vendor"))?.count();
    Ok((all, third_party, vendored))
}

/// Per-section hashes of an ELF file (for telling which parts of two builds differ).
fn section_hashes(binary: &Path) -> Result<Vec<(String, String)>> {
    let listing = run(Command::new("readelf").args(["-S", "-W"]).arg(binary))?;
    let bytes = std::fs::read(binary)?;
    let mut out = Vec::new();
    for line in listing.lines() {
        let Some(rest) = line.trim_start().strip_prefix('[') else { continue };
        let Some((_, rest)) = rest.split_once(']') else { continue };
        let words: Vec<&str> = rest.split_whitespace().collect();
        if words.len() < 5 || words[1] == "NOBITS" {
            continue;
        }
        let (Ok(offset), Ok(size)) = (usize::from_str_radix(words[3], 16), usize::from_str_radix(words[4], 16)) else {
            continue;
        };
        let data = bytes.get(offset..offset + size).unwrap_or_default();
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut h);
        out.push((words[0].to_owned(), format!("{:016x}", h.finish())));
    }
    Ok(out)
}

pub fn build(root: &Path) -> Result<()> {
    let dir = root.join("target/appliance");
    std::fs::create_dir_all(&dir)?;
    let epoch = run(Command::new("git").args(["log", "-1", "--format=%ct"]).current_dir(root))?;
    let commit = run(Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root))?;
    let toolchain = PathBuf::from(run(Command::new("rustc").args(["--print", "sysroot"]))?);
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo"));

    // Third-party sources, fetched once through cargo, pinned by Cargo.lock.
    let third_party = dir.join("third-party");
    let vendor_config = run(Command::new("cargo")
        .args(["vendor", "--locked", "--versioned-dirs", "--quiet"])
        .arg(&third_party)
        .current_dir(root))?;
    let mut binaries = Vec::new();
    for name in ["build-a", "second-build-b"] {
        let src = dir.join(name).join("gixd");
        if src.exists() {
            std::fs::remove_dir_all(&src)?;
        }
        std::fs::create_dir_all(&src)?;
        run(Command::new("sh").arg("-c").arg(format!(
            "git -C '{}' archive HEAD | tar -x -C '{}'",
            root.display(),
            src.display()
        )))?;
        std::fs::create_dir_all(src.join(".cargo"))?;
        let mut config = std::fs::read_to_string(src.join(".cargo/config.toml")).unwrap_or_default();
        config.push('\n');
        config.push_str(&vendor_config);
        std::fs::write(src.join(".cargo/config.toml"), config)?;
        println!("building in {}", src.display());
        let mut cmd = Command::new("cargo");
        cmd.args(BUILD_ARGS).current_dir(&src).env("CARGO_TARGET_DIR", src.join("target"));
        for (k, v) in build_env(&src, &third_party, &cargo_home, &toolchain, &epoch) {
            cmd.env(k, v);
        }
        let status = cmd.status()?;
        if !status.success() {
            bail!("the build in {} failed", src.display());
        }
        binaries.push(src.join("target/release/gixd"));
    }
    let (a, b) = (sha256(&binaries[0])?, sha256(&binaries[1])?);
    if a != b {
        eprintln!("the two builds differ: {a} vs {b}");
        let (sa, sb) = (section_hashes(&binaries[0])?, section_hashes(&binaries[1])?);
        for ((name, ha), (_, hb)) in sa.iter().zip(&sb) {
            if ha != hb {
                eprintln!("  section {name}: {ha} vs {hb}");
            }
        }
        bail!("not reproducible");
    }
    let version = run(Command::new(&binaries[0]).arg("--version"))?;

    // Check the unit against the built binary (systemd-analyze works without a running systemd).
    let unit = std::fs::read_to_string(root.join("appliance/gixd.service"))?;
    if Command::new("systemd-analyze").arg("--version").output().is_ok_and(|o| o.status.success()) {
        let check = dir.join("gixd.service");
        std::fs::write(&check, unit.replace("/usr/local/bin/gixd", &binaries[0].display().to_string()))?;
        // The service requires its socket unit: both are verified together.
        let socket = dir.join("gixd.socket");
        std::fs::copy(root.join("appliance/gixd.socket"), &socket)?;
        run(Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(&check).arg(&socket))?;
        println!("systemd units: systemd-analyze verify passed");
    }

    let readme = std::fs::read_to_string(root.join("README.md"))?;
    let mut files = Vec::new();
    for (name, source, mode) in MANIFEST {
        let content = match *source {
            "" => std::fs::read(&binaries[0])?,
            s if s.starts_with("README.md#") => {
                readme_section(&readme, &s["README.md#".len()..]).context("the README's operator section")?.into_bytes()
            }
            s => std::fs::read(root.join(s))?,
        };
        files.push((name.to_string(), content, *mode));
    }
    let tarball = dir.join("gixd-appliance.tar.gz");
    pack(&files, &epoch, &tarball, &dir)?;
    let (all, third, vendored) = count_crates(root)?;
    println!("commit      {commit}");
    println!("version     {version}");
    println!("toolchain   {}", run(Command::new("rustc").arg("--version"))?);
    println!("crates      {all} in all, {third} third-party, {vendored} patched in vendor/");
    println!("binary      sha256 {a} (two builds, identical)");
    println!("tarball     sha256 {} {}", sha256(&tarball)?, tarball.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_remaps_every_path_and_pins_time_codegen_and_stripping() {
        let env = build_env(
            Path::new("/w/src"),
            Path::new("/w/tp"),
            Path::new("/h/.cargo"),
            Path::new("/r/tc"),
            "1700000000",
        );
        let get = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()).unwrap_or_default();
        let flags = get("RUSTFLAGS");
        for remap in ["/w/src=/gixd", "/w/tp=/third-party", "/h/.cargo=/cargo", "/r/tc=/rust"] {
            assert!(flags.contains(&format!("--remap-path-prefix={remap}")), "{remap} in {flags}");
        }
        assert!(flags.contains("-Cstrip=symbols"));
        assert_eq!(get("SOURCE_DATE_EPOCH"), "1700000000");
        assert_eq!(get("CARGO_PROFILE_RELEASE_CODEGEN_UNITS"), "1");
        assert_eq!(get("CARGO_PROFILE_RELEASE_DEBUG"), "0");
        assert_eq!(get("CARGO_INCREMENTAL"), "0");
        assert!(BUILD_ARGS.contains(&"--locked") && BUILD_ARGS.contains(&"--offline"));
    }

    #[test]
    fn the_manifest_carries_binary_settings_unit_and_operator_notes() {
        let names: Vec<&str> = MANIFEST.iter().map(|(n, _, _)| *n).collect();
        assert!(names.iter().any(|n| n.ends_with("bin/gixd")));
        assert!(names.iter().any(|n| n.ends_with("gixd.env")));
        assert!(names.iter().any(|n| n.ends_with("gixd.service")));
        assert!(names.iter().any(|n| n.ends_with("gixd.socket")));
        assert!(names.iter().any(|n| n.ends_with("OPERATING.md")));
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let unit = std::fs::read_to_string(root.join("appliance/gixd.service")).unwrap();
        // systemd is told when gixd is ready, reloads with SIGHUP, and holds its sockets.
        for line in ["Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "Requires=gixd.socket"] {
            assert!(unit.lines().any(|l| l == line), "{line}");
        }
        let socket = std::fs::read_to_string(root.join("appliance/gixd.socket")).unwrap();
        assert!(socket.lines().any(|l| l == "FileDescriptorName=http"), "the socket is named as gixd reads it");
        let quota = unit.lines().position(|l| l.starts_with("CPUQuota=")).expect("CPUQuota=");
        let cpus = unit.lines().position(|l| l.starts_with("AllowedCPUs=")).expect("AllowedCPUs=");
        assert_eq!(cpus, quota + 1, "side by side");
        assert!(
            unit.lines().take(quota).any(|l| l.starts_with('#') && l.contains("AllowedCPUs=")),
            "with a comment on why both"
        );
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let section = readme_section(&readme, "Operating gixd").expect("the operator section");
        assert!(section.starts_with("## Operating gixd\n") && !section[3..].contains("\n## "));
    }

    #[test]
    fn the_tarball_depends_only_on_its_contents() {
        let tmp = std::env::temp_dir().join(format!("gixd-appliance-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let files = |extra: &str| {
            vec![
                ("top/b.txt".to_owned(), format!("bee{extra}").into_bytes(), 0o644),
                ("top/a/bin".to_owned(), b"binary".to_vec(), 0o755),
            ]
        };
        let (one, two, other) = (tmp.join("1.tar.gz"), tmp.join("2.tar.gz"), tmp.join("3.tar.gz"));
        pack(&files(""), "1700000000", &one, &tmp.join("s1")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1100)); // other file times on disk
        pack(&files(""), "1700000000", &two, &tmp.join("s2")).unwrap();
        pack(&files("!"), "1700000000", &other, &tmp.join("s3")).unwrap();
        assert_eq!(std::fs::read(&one).unwrap(), std::fs::read(&two).unwrap(), "same contents, same bytes");
        assert_ne!(std::fs::read(&one).unwrap(), std::fs::read(&other).unwrap());
        let listing = run(Command::new("tar").args(["-tvzf"]).arg(&one)).unwrap();
        let names: Vec<&str> = listing.lines().map(|l| l.split_whitespace().last().unwrap()).collect();
        assert_eq!(names, vec!["top/", "top/a/", "top/a/bin", "top/b.txt"], "sorted");
        assert!(listing.lines().all(|l| l.contains(" 0/0 ") && l.contains("2023-11-14")), "{listing}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
