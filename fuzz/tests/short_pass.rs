//! A short, deterministic fuzzing pass over every target, in the test suite (CI): the same
//! seed each run, so a failure here is the same failure on every machine. Longer runs with
//! fresh seeds: `cargo xtask fuzz`.

use std::time::Duration;

use gixd_fuzz::{Budget, pass, targets};

#[test]
fn every_input_a_client_controls_survives_a_short_fuzzing_pass() {
    let fixture = targets::Fixture::new();
    let budget = Budget { cases: 2000, time: Duration::from_secs(20), slow: Duration::from_secs(10) };
    let mut failures = Vec::new();
    for target in targets::ALL {
        let packs_before = targets::PACKS_CHECKED.load(std::sync::atomic::Ordering::Relaxed);
        let report = pass(&fixture, target, 20261201, budget);
        let packs = targets::PACKS_CHECKED.load(std::sync::atomic::Ordering::Relaxed) - packs_before;
        eprintln!(
            "{:<28} {:>5} cases, {packs:>4} packs checked, slowest {:?}",
            report.target, report.cases, report.slowest
        );
        assert!(report.cases >= 50.min(budget.cases), "{}: only {} cases ran", report.target, report.cases);
        if target.name.starts_with("upload-pack") {
            assert!(
                packs > 0,
                "{}: no case produced a pack, so the confidentiality rule was checked on nothing",
                target.name
            );
        }
        for f in report.failures {
            failures.push(format!(
                "{} case {}: {} — input {:?}",
                report.target,
                f.case,
                f.what,
                String::from_utf8_lossy(&f.input)
            ));
        }
    }
    assert!(failures.is_empty(), "{} failing cases:\n{}", failures.len(), failures.join("\n"));
}

/// The harness itself: a target that breaks on some inputs is reported, with the input.
#[test]
fn a_panicking_or_failing_target_is_reported_with_its_input() {
    fn seeds(_: &targets::Fixture) -> Vec<Vec<u8>> {
        vec![b"0009want\n0000".to_vec()]
    }
    fn fragile(_: &targets::Fixture, input: &[u8]) -> Result<(), String> {
        if input.contains(&0xff) {
            panic!("a byte 0xff");
        }
        if input.len() > 20 { Err("too long".into()) } else { Ok(()) }
    }
    let target = gixd_fuzz::Target { name: "fragile", seeds, run: fragile, max_len: 64 };
    let fixture = targets::Fixture::new();
    let report = pass(
        &fixture,
        &target,
        1,
        Budget { cases: 2000, time: Duration::from_secs(30), slow: Duration::from_secs(10) },
    );
    assert!(
        report.failures.iter().any(|f| f.what.starts_with("panicked: a byte 0xff (at ") && f.input.contains(&0xff)),
        "{:?}",
        report.failures.first()
    );
    assert!(report.failures.iter().any(|f| f.what == "too long" && f.input.len() > 20));
    assert!(
        report.failures.iter().all(|f| f.input.contains(&0xff) || f.input.len() > 20),
        "only breaking inputs are reported"
    );
}
