//! The access log: one JSON line per request, beside the tracing log (`--access-log FILE|-`):
//! who asked what of which repository, how much it cost and how it ended. A line is written
//! when the request is over — for a fetch, when its last byte has gone.

use std::io::Write;
use std::sync::Mutex;

/// One request, as the access log writes it. Every field is always present (`null` where it
/// does not apply: a push has no `cache` outcome).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Record {
    /// Milliseconds since the Unix epoch, when the request ended.
    pub time_ms: u64,
    pub peer: String,
    pub transport: &'static str,
    pub repository: Option<String>,
    /// `git-upload-pack`, `git-receive-pack`, `git-upload-archive`, `info/refs`, or the path.
    pub service: String,
    /// `0`, `1` or `2`.
    pub version: Option<u8>,
    /// The token's user; `None`: anonymous.
    pub user: Option<String>,
    pub wants: usize,
    pub haves: usize,
    /// Objects in the pack sent (or received, for a push: `null`).
    pub objects: Option<usize>,
    /// Response bytes sent.
    pub bytes: u64,
    /// CPU of the work done for this request on its blocking thread, milliseconds (a cache
    /// hit or join does none).
    pub cpu_ms: f64,
    pub duration_ms: f64,
    /// `hit`, `join`, `miss` (this request generated the pack others may join), or `null`
    /// (not a cacheable request, or no cache).
    pub cache: Option<&'static str>,
    /// Milliseconds it waited in the queue for a transfer slot (`null`: it took none).
    pub wait_ms: Option<f64>,
    /// Where its response waited for the client: `memory` or `disk` (the spill directory), or
    /// `null` (not sent from the transfer buffers).
    pub buffer: Option<&'static str>,
    /// Bytes of the response written to the spill directory (`null`: not sent from the transfer
    /// buffers).
    pub spill_bytes: Option<u64>,
    /// Bytes of the response sent as ranges of pack files, never copied (`null` likewise).
    pub ranged_bytes: Option<u64>,
    /// How it ended, in the same words on every transport: `ok`, `disconnected`, `failed`,
    /// `refused` (before it was served; a push: some ref refused), `busy`.
    pub status: String,
    /// The HTTP status sent (`null` on other transports).
    pub http_status: Option<u16>,
}

pub struct AccessLog {
    out: Mutex<Box<dyn Write + Send>>,
}

impl AccessLog {
    /// `-` is standard output; anything else a file appended to.
    pub fn open(target: &std::path::Path) -> std::io::Result<AccessLog> {
        let out: Box<dyn Write + Send> = if target.as_os_str() == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(std::fs::OpenOptions::new().create(true).append(true).open(target)?)
        };
        Ok(AccessLog { out: Mutex::new(out) })
    }

    /// A log writing to `out` (tests, embedding).
    pub fn to_writer(out: Box<dyn Write + Send>) -> AccessLog {
        AccessLog { out: Mutex::new(out) }
    }

    /// Write one line; a failed write is reported to the tracing log, never to the client.
    pub fn write(&self, mut record: Record) {
        record.time_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let mut line = serde_json::to_vec(&record).expect("a record serializes");
        line.push(b'\n');
        let mut out = self.out.lock().expect("not poisoned");
        if let Err(err) = out.write_all(&line).and_then(|()| out.flush()) {
            tracing::warn!(%err, "access log write failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_record_is_one_json_line_with_every_field() {
        let shared = Shared::default();
        let log = AccessLog::to_writer(Box::new(shared.clone()));
        log.write(Record { service: "git-upload-pack".into(), status: "200".into(), wants: 3, ..Record::default() });
        let text = String::from_utf8(shared.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1);
        let value: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        let fields: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        for field in [
            "time_ms",
            "peer",
            "transport",
            "repository",
            "service",
            "version",
            "user",
            "wants",
            "haves",
            "objects",
            "bytes",
            "cpu_ms",
            "duration_ms",
            "cache",
            "wait_ms",
            "buffer",
            "status",
            "http_status",
        ] {
            assert!(fields.contains(&field), "{field} missing from {text}");
        }
        assert_eq!(value["wants"], 3);
        assert!(value["time_ms"].as_u64().unwrap() > 0);
    }
}
