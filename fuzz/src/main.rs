//! `gixd-fuzz [--seconds N] [--cases N] [--seed S] [TARGET…]`: fuzz every target (or those
//! named) for a while; each failing input is written to `--out` and the exit status is 1.
//! `cargo xtask fuzz` runs it in a release build.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use gixd_fuzz::{Budget, pass, targets};

#[derive(Parser)]
struct Args {
    /// Seconds per target.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// At most this many cases per target.
    #[arg(long, default_value_t = usize::MAX)]
    cases: usize,
    /// The first case's seed (default: from the clock, printed so a run can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// Where failing inputs go.
    #[arg(long, default_value = "target/fuzz/failures")]
    out: PathBuf,
    /// Targets to run (default: all).
    targets: Vec<String>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(1)
    });
    let chosen: Vec<&gixd_fuzz::Target> = if args.targets.is_empty() {
        targets::ALL.iter().collect()
    } else {
        match args.targets.iter().map(|n| targets::by_name(n).ok_or(n)).collect::<Result<Vec<_>, _>>() {
            Ok(t) => t,
            Err(unknown) => {
                let names: Vec<&str> = targets::ALL.iter().map(|t| t.name).collect();
                eprintln!("no target {unknown}; the targets are {}", names.join(", "));
                return std::process::ExitCode::from(2);
            }
        }
    };
    println!("seed {seed}; {} s per target", args.seconds);
    let fixture = targets::Fixture::new();
    let budget = Budget { cases: args.cases, time: Duration::from_secs(args.seconds), slow: Duration::from_secs(10) };
    let mut failed = 0;
    for target in chosen {
        let packs_before = targets::PACKS_CHECKED.load(std::sync::atomic::Ordering::Relaxed);
        let report = pass(&fixture, target, seed, budget);
        let packs = targets::PACKS_CHECKED.load(std::sync::atomic::Ordering::Relaxed) - packs_before;
        println!(
            "{:<28} {:>8} cases, {packs:>6} packs checked, slowest {:>9.1?}, {} failing",
            report.target,
            report.cases,
            report.slowest,
            report.failures.len()
        );
        for failure in &report.failures {
            std::fs::create_dir_all(&args.out).expect("the failures directory");
            let path = args.out.join(format!("{}-{seed}-{}.bin", report.target, failure.case));
            std::fs::write(&path, &failure.input).expect("a failing input is kept");
            println!("  case {}: {} (input: {})", failure.case, failure.what, path.display());
        }
        failed += report.failures.len();
    }
    if failed == 0 { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}
