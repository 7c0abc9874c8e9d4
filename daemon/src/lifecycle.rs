//! The server's life once it serves: the phases it goes through when told to stop (serving →
//! draining → cancelled), the work in flight each phase waits for, and what systemd is told
//! (`sd_notify`: ready, reloading, stopping). A stop (SIGTERM, SIGINT) drains: the listeners
//! stop accepting, connections finish what they are doing (an idle keep-alive connection closes
//! at once), and the server waits up to the shutdown grace for the work in flight to end; what
//! is left is then cancelled — connections dropped, a pack writer stops at its next write, a push
//! fails before its refs move and its quarantine goes — and the server exits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Where the server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Serving,
    /// Accepting no more; what is in flight finishes.
    Draining,
    /// The grace is over: what is left stops at its next step.
    Cancelled,
}

/// The phase, and the work in flight counted by [`Busy`] guards.
pub struct Life {
    phase: tokio::sync::watch::Sender<Phase>,
    active: AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Default for Life {
    fn default() -> Self {
        Life {
            phase: tokio::sync::watch::Sender::new(Phase::Serving),
            active: AtomicUsize::new(0),
            idle: Default::default(),
        }
    }
}

/// One piece of work in flight (a connection, a response being sent); the server's drain waits
/// until none is left.
pub struct Busy(Arc<Life>);

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Life {
    pub fn new() -> Arc<Life> {
        Arc::new(Life::default())
    }

    /// Count a piece of work in flight until the guard drops.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.active.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// Work in flight now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    pub fn is_cancelled(&self) -> bool {
        self.phase() >= Phase::Cancelled
    }

    /// Move on to `phase` (never back).
    fn advance(&self, phase: Phase) {
        self.phase.send_if_modified(|now| {
            let later = phase > *now;
            if later {
                *now = phase;
            }
            later
        });
    }

    /// Resolves once the server is at `phase` or past it.
    pub async fn reached(&self, phase: Phase) {
        let mut watch = self.phase.subscribe();
        let _ = watch.wait_for(|now| *now >= phase).await;
    }

    /// Run `work` unless the server is cancelled first (`None` then: `work` was dropped).
    pub async fn unless_cancelled<T>(&self, work: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            out = work => Some(out),
            () = self.reached(Phase::Cancelled) => None,
        }
    }

    /// Resolves when no work is in flight.
    pub async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.active() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Stop: drain for up to `grace`, then cancel what is left and give it `settle` to go.
    /// Returns the work that was still in flight when the grace ended (0: drained).
    pub async fn stop(&self, grace: Duration, settle: Duration) -> usize {
        self.advance(Phase::Draining);
        notify(&[sd_notify::NotifyState::Stopping]);
        tracing::info!(in_flight = self.active(), grace_secs = grace.as_secs_f64(), "draining");
        if tokio::time::timeout(grace, self.idle()).await.is_ok() {
            tracing::info!("drained");
            return 0;
        }
        let left = self.active();
        tracing::warn!(left, "the shutdown grace is over: cancelling what is left");
        self.advance(Phase::Cancelled);
        if tokio::time::timeout(settle, self.idle()).await.is_err() {
            tracing::warn!(left = self.active(), "work still in flight after cancelling; exiting anyway");
        }
        left
    }
}

/// Tell systemd (when it started us with `NOTIFY_SOCKET`) where the server is; nothing otherwise.
pub fn notify(states: &[sd_notify::NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_some()
        && let Err(err) = sd_notify::notify(states)
    {
        tracing::warn!(%err, "sd_notify failed");
    }
}

/// A stop or a reload asked for by a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM or SIGINT.
    Stop,
    /// SIGHUP.
    Reload,
}

/// The process's stop and reload signals, as they arrive.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Take over SIGTERM, SIGINT and SIGHUP (within a runtime).
    pub fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    pub async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::Stop,
            _ = self.int.recv() => Signal::Stop,
            _ = self.hup.recv() => Signal::Reload,
        }
    }
}
