//! Fuzzing gixd on stable Rust. cargo-fuzz and AFL need a nightly compiler for their coverage
//! instrumentation, and this project has one toolchain, stable; so this is a mutation fuzzer
//! without coverage guidance: each target starts from seeds that are real requests (built with
//! gixd's own pkt-line writer against a small repository), and every case is a seed mutated a
//! few times over — bits flipped, pkt-line lengths rewritten to hostile values, protocol tokens
//! inserted, ranges cut, repeated or spliced from another seed.
//!
//! A case fails when the target panics, breaks an invariant it checks (an answer that is not
//! pkt-line framed, a path outside the base directory, an object sent that no visible ref
//! reaches, a ref left at a missing object) or takes longer than [`Budget::slow`]. The same seed
//! gives the same cases: a failure found once is found again, and its input is kept.
//!
//! `cargo xtask fuzz` runs every target for a while; the test suite runs a short deterministic
//! pass of each (`fuzz/tests/short_pass.rs`).

pub mod targets;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

/// A small deterministic generator (xorshift64*): the cases are a function of the seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    #[allow(
        clippy::should_implement_trait,
        reason = "an endless generator: Iterator's Option would be noise at every call"
    )]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// pkt-line lengths a parser must survive: flush, delim, response-end, the reserved 0003, a
/// header-only line, the largest, one past it, and text that is not hex.
const HOSTILE_LENGTHS: &[&[u8]] =
    &[b"0000", b"0001", b"0002", b"0003", b"0004", b"fff0", b"fff1", b"ffff", b"zzzz", b"-001", b"000"];

/// Tokens of the protocols, inserted anywhere.
const TOKENS: &[&[u8]] = &[
    b"want ",
    b"have ",
    b"done\n",
    b"shallow ",
    b"deepen 0\n",
    b"deepen 2147483648\n",
    b"deepen-since -9223372036854775808\n",
    b"deepen-not refs/heads/main\n",
    b"filter blob:limit=99999999999999999999999\n",
    b"filter tree:0\n",
    b"filter combine:blob:none+tree:1\n",
    b"command=fetch\n",
    b"command=ls-refs\n",
    b"command=object-info\n",
    b"ref-prefix refs/\n",
    b"want-ref refs/heads/main\n",
    b"thin-pack\n",
    b"ofs-delta\n",
    b"report-status",
    b"side-band-64k",
    b"\0",
    b" ",
    b"\n",
    b"..",
    b"/../",
    b"%2e%2e/",
    b"refs/heads/../x",
    b"0000000000000000000000000000000000000000",
    b"PACK\0\0\0\x02\0\0\0\x01",
    b"argument --prefix=../\n",
];

/// `input` changed one to four times (see the crate's header); never longer than `max_len`.
pub fn mutate(rng: &mut Rng, input: &[u8], others: &[Vec<u8>], max_len: usize) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(10) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = [0u8, 0xff, b'0', b'f', b'\n', b' ', 0x7f, b'=', b'/', 0x80][rng.below(10)];
            }
            2 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                out.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(64));
                out.drain(at..at + n);
            }
            4 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(256));
                let copy = out[at..at + n].to_vec();
                let to = rng.below(len + 1);
                out.splice(to..to, copy);
            }
            5 => {
                // A pkt-line length: where the input has four hex digits, or anywhere.
                let candidates: Vec<usize> =
                    (0..len.saturating_sub(3)).filter(|&i| out[i..i + 4].iter().all(u8::is_ascii_hexdigit)).collect();
                let at =
                    if candidates.is_empty() { rng.below(len + 1) } else { candidates[rng.below(candidates.len())] };
                let new: Vec<u8> = if rng.below(2) == 0 {
                    HOSTILE_LENGTHS[rng.below(HOSTILE_LENGTHS.len())].to_vec()
                } else {
                    format!("{:04x}", rng.below(0x10000)).into_bytes()
                };
                let end = (at + 4).min(out.len());
                out.splice(at..end, new);
            }
            6 if !others.is_empty() => {
                let other = &others[rng.below(others.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            7 if len > 0 => out.truncate(rng.below(len)),
            _ => {
                let at = rng.below(len + 1);
                out.splice(at..at, TOKENS[rng.below(TOKENS.len())].iter().copied());
            }
        }
    }
    out.truncate(max_len);
    out
}

/// One input a client controls, with what must hold for every value of it.
pub struct Target {
    pub name: &'static str,
    /// Real inputs to start from.
    pub seeds: fn(&targets::Fixture) -> Vec<Vec<u8>>,
    /// Run one case: `Err` names the invariant it broke.
    pub run: fn(&targets::Fixture, &[u8]) -> Result<(), String>,
    /// Longest input to try.
    pub max_len: usize,
}

/// How long a pass runs: `cases` cases or `time`, whichever ends first.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub cases: usize,
    pub time: Duration,
    /// A case slower than this fails: an input that costs the server this much is a denial of service.
    pub slow: Duration,
}

/// A case that failed.
#[derive(Debug)]
pub struct Failure {
    pub case: usize,
    pub input: Vec<u8>,
    pub what: String,
}

/// What a pass did.
#[derive(Debug)]
pub struct Report {
    pub target: &'static str,
    pub cases: usize,
    pub failures: Vec<Failure>,
    pub slowest: Duration,
}

std::thread_local! {
    /// Where the last panic on this thread happened and what it said (see [`quiet_panics`]).
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Panics of fuzzed code are failures to report, not crashes: the hook keeps the message and
/// location for [`pass`] instead of printing (with `RUST_BACKTRACE` set, a backtrace per case
/// would cost more than the case).
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{message} (at {at})")));
        }));
    });
}

/// Run `target` within `budget` from `seed`: the seeds themselves first, then mutations of them.
pub fn pass(fixture: &targets::Fixture, target: &Target, seed: u64, budget: Budget) -> Report {
    quiet_panics();
    let seeds = (target.seeds)(fixture);
    assert!(!seeds.is_empty(), "{} has seeds", target.name);
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let mut report = Report { target: target.name, cases: 0, failures: Vec::new(), slowest: Duration::ZERO };
    while report.cases < budget.cases && started.elapsed() < budget.time {
        let input = match seeds.get(report.cases) {
            Some(seed) => seed.clone(),
            None => {
                let from = rng.below(seeds.len());
                mutate(&mut rng, &seeds[from], &seeds, target.max_len)
            }
        };
        let case = report.cases;
        report.cases += 1;
        let began = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| (target.run)(fixture, &input)));
        let took = began.elapsed();
        report.slowest = report.slowest.max(took);
        let what = match outcome {
            Ok(Ok(())) if took > budget.slow => Some(format!("took {took:?}")),
            Ok(Ok(())) => None,
            Ok(Err(what)) => Some(what),
            Err(_) => Some(format!(
                "panicked: {}",
                LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| "(no message)".into())
            )),
        };
        if let Some(what) = what {
            report.failures.push(Failure { case, input, what });
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_mutations() {
        let seed = b"0011want 1234\n0000".to_vec();
        let run = |s| {
            let mut rng = Rng::new(s);
            (0..50).map(|_| mutate(&mut rng, &seed, std::slice::from_ref(&seed), 1024)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        assert!(run(7).iter().all(|m| m.len() <= 1024));
    }
}
