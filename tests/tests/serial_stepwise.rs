//! Guard of patches/gix-parallel/0001-serial-stepwise.patch: a `Stepwise` that may use one
//! thread uses the caller's, both when driven directly and as gix-pack's pack generation drives it.
//!
//! One test in this binary on purpose: it counts the threads of the whole process, and another
//! test running beside it would be counted too.

use std::thread::{self, ThreadId};

use gix_pack::data::output;
use gix_parallel::{Reduce, Stepwise};
use gixd_tests::{commit_files, git_out, temp_repo, threads_now};

/// Sums the items, remembering which thread ran `consume` and how many threads the process had then.
#[derive(Default)]
struct Observe {
    sum: u64,
}

type Seen = (u64, usize, ThreadId);

impl Reduce for Observe {
    type Input = Seen;
    type FeedProduce = Seen;
    type Output = u64;
    type Error = std::convert::Infallible;

    fn feed(&mut self, item: Seen) -> Result<Seen, Self::Error> {
        self.sum += item.0;
        Ok(item)
    }

    fn finalize(self) -> Result<u64, Self::Error> {
        Ok(self.sum)
    }
}

#[test]
fn stepwise_with_thread_limit_one_spawns_no_thread() {
    let input: Vec<u64> = (0..100).map(|i| i * 7 % 13).collect();
    let caller = thread::current().id();

    let before = threads_now();
    let mut steps = Stepwise::new(
        input.clone().into_iter(),
        Some(1),
        |_thread_id| (),
        |item, _state: &mut ()| (item, threads_now(), thread::current().id()),
        Observe::default(),
    );
    let mut seen = Vec::new();
    let mut most_threads_while_iterating = threads_now();
    for _ in 0..50 {
        let (item, threads_in_consume, consumer) = steps.next().expect("item").expect("no error");
        most_threads_while_iterating = most_threads_while_iterating.max(threads_in_consume).max(threads_now());
        seen.push((item, consumer));
    }
    let rest_sum: u64 = steps.finalize().expect("no error");

    assert_eq!(
        most_threads_while_iterating - before,
        0,
        "Stepwise with thread_limit Some(1) started threads (stock gix-parallel starts 2: one consumer, one input feeder)"
    );
    assert!(seen.iter().all(|(_, t)| *t == caller), "consume ran on another thread than the caller's");
    let order: Vec<u64> = seen.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, input[..50], "items come out in input order");
    assert_eq!(rest_sum, input.iter().sum::<u64>(), "finalize saw every item, including those not iterated");

    // The same through gix-pack: generating a pack with thread_limit Some(1).
    let (_tmp, repo) = temp_repo(false);
    for n in 0..5 {
        let body = format!("line {n}\n").repeat(50 + n);
        commit_files(&repo, &[(&format!("f{n}.txt"), body.as_bytes())], &format!("c{n}"));
    }
    gixd_tests::git(&repo, &["repack", "-adq"]);
    let ids = git_out(&repo, &["rev-list", "--objects", "--all"]);
    let counts: Vec<output::Count> = ids
        .lines()
        .map(|l| output::Count {
            id: gix_hash::ObjectId::from_hex(l.split(' ').next().unwrap().as_bytes()).unwrap(),
            entry_pack_location: output::count::PackLocation::NotLookedUp,
        })
        .collect();
    let expected_objects = counts.len();
    let mut odb = gix_odb::at(repo.join(".git/objects"), gix_hash::Kind::Sha1).unwrap();
    odb.prevent_pack_unload();

    let before = threads_now();
    let mut entries = output::entry::iter_from_counts(
        counts,
        odb,
        Box::new(gix_utils::progress::Discard),
        output::entry::iter_from_counts::Options { thread_limit: Some(1), ..Default::default() },
    )
    .expect("counts resolve");
    let mut most_threads_while_iterating = threads_now();
    let mut written = 0;
    for chunk in entries.by_ref() {
        let (_seq, chunk) = chunk.expect("entries");
        written += chunk.len();
        most_threads_while_iterating = most_threads_while_iterating.max(threads_now());
    }
    let outcome = gix_parallel::Finalize::finalize(entries).expect("statistics");
    assert_eq!(written, expected_objects);
    assert_eq!(outcome.objects_copied_from_pack, expected_objects);
    assert_eq!(most_threads_while_iterating - before, 0, "pack generation with thread_limit Some(1) started threads");
}
