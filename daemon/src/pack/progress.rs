//! git's progress lines while a pack is written: a running line at most once an interval, and a
//! final one per phase.

use super::PackError;
use super::*;

/// git's pace for a running progress line: at most one per interval (a second, as git:
/// [`crate::config::Config::progress_interval`]).
pub(crate) struct Throttle {
    pub(super) last: std::time::Instant,
    pub(super) every: std::time::Duration,
}

impl Throttle {
    pub(crate) fn new(every: std::time::Duration) -> Self {
        Throttle { last: std::time::Instant::now(), every }
    }

    /// Whether a line is due now (and, if so, the next one an interval from now).
    pub(crate) fn due(&mut self) -> bool {
        let due = self.last.elapsed() >= self.every;
        if due {
            self.last = std::time::Instant::now();
        }
        due
    }
}

/// One phase of pack writing as git reports it: a line at most every interval ([`Throttle`])
/// while it runs, and one saying it is done.
pub(super) struct Phase {
    pub(super) title: &'static str,
    pub(super) total: usize,
    pub(super) done: usize,
    pub(super) pace: Throttle,
}

impl Phase {
    pub(super) fn new(title: &'static str, total: usize, every: std::time::Duration) -> Self {
        Phase { title, total, done: 0, pace: Throttle::new(every) }
    }

    pub(super) fn line(&self, end: &str) -> String {
        let percent = (self.done * 100).checked_div(self.total).unwrap_or(100);
        format!("{}: {percent:3}% ({}/{}){end}", self.title, self.done, self.total)
    }

    pub(super) fn advance<W: Sink>(&mut self, by: usize, out: &mut Hashed<'_, W>) -> Result<(), PackError> {
        self.done += by;
        if self.pace.due() {
            out.progress(&self.line("\r"))?;
        }
        Ok(())
    }

    /// Where a phase whose total is learnt as it goes stands (the search's "Compressing").
    pub(super) fn at<W: Sink>(&mut self, done: usize, total: usize, out: &mut Hashed<'_, W>) -> Result<(), PackError> {
        self.total = total;
        self.advance(done.saturating_sub(self.done), out)
    }

    pub(super) fn finish<W: Sink>(mut self, out: &mut Hashed<'_, W>) -> Result<(), PackError> {
        self.done = self.total;
        out.progress(&self.line(", done.\n"))
    }
}

/// git's "Compressing objects: P% (n/N)" while `search` runs (it hears how many objects have been
/// looked at, of how many), then the final line with the count `search` returns beside its
/// result. A line that cannot be sent (the client went away) ends the pack once the search is
/// done.
pub(super) fn compressing<W: Sink, R>(
    answer: &mut Hashed<'_, W>,
    every: std::time::Duration,
    search: impl FnOnce(&mut dyn FnMut(usize, usize)) -> Result<(R, usize), PackError>,
) -> Result<R, PackError> {
    let mut phase = Phase::new("Compressing objects", 0, every);
    let mut told = Ok(());
    let (result, searched) = search(&mut |done, total| {
        if told.is_ok() {
            told = phase.at(done, total, answer);
        }
    })?;
    told?;
    phase.total = searched;
    phase.finish(answer)?;
    Ok(result)
}
