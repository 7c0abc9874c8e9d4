//! The tables of the configuration file beside the top level ([`super::Settings`]): `[limits]`,
//! `[pack_cache]` and `[lfs]`, each a clap argument group and a serde table, declared once.

use std::path::PathBuf;

use clap::Args;

/// `[limits]`: sizes, counts and times.
#[derive(Debug, Default, Clone, PartialEq, Args, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
#[command(next_help_heading = "Limits ([limits] in the configuration file)")]
pub struct Limits {
    /// Largest request body as sent (gzip or not): a negotiation is wants and haves.
    #[arg(
        id = "limits.max_request_body",
        long = "max-request-body",
        env = "GIXD_MAX_REQUEST_BODY",
        value_name = "BYTES",
        default_value = "16777216"
    )]
    pub max_request_body: Option<usize>,
    /// Largest request body after gzip inflation: caps a gzip bomb.
    #[arg(
        id = "limits.max_inflated_body",
        long = "max-inflated-body",
        env = "GIXD_MAX_INFLATED_BODY",
        value_name = "BYTES",
        default_value = "67108864"
    )]
    pub max_inflated_body: Option<usize>,
    /// Largest pack one push may send: beyond it the push is refused and nothing is kept.
    #[arg(
        id = "limits.max_push_bytes",
        long = "max-push-bytes",
        env = "GIXD_MAX_PUSH_BYTES",
        value_name = "BYTES",
        default_value = "4294967296"
    )]
    pub max_push_bytes: Option<u64>,
    /// Largest object a push may carry, by its declared (inflated) size.
    #[arg(
        id = "limits.max_object_bytes",
        long = "max-object-bytes",
        env = "GIXD_MAX_OBJECT_BYTES",
        value_name = "BYTES",
        default_value = "268435456"
    )]
    pub max_object_bytes: Option<usize>,
    /// Most want lines per request (at least 1).
    #[arg(
        id = "limits.max_wants",
        long = "max-wants",
        env = "GIXD_MAX_WANTS",
        value_name = "N",
        default_value = "100000"
    )]
    pub max_wants: Option<usize>,
    /// Most have lines per request (at least 1).
    #[arg(
        id = "limits.max_haves",
        long = "max-haves",
        env = "GIXD_MAX_HAVES",
        value_name = "N",
        default_value = "100000"
    )]
    pub max_haves: Option<usize>,
    /// Slowest a client may send while gixd waits for it, in bytes per second of waiting.
    #[arg(
        id = "limits.min_receive_rate",
        long = "min-receive-rate",
        env = "GIXD_MIN_RECEIVE_RATE",
        value_name = "BYTES",
        default_value = "1024"
    )]
    pub min_receive_rate: Option<u64>,
    /// Transfer slots: transfers negotiating, selecting and writing a pack at once (a slot is CPU
    /// work; sending what was written needs none). More wait in the queue. Without it: one per
    /// effective CPU.
    #[arg(id = "limits.max_transfers", long = "max-transfers", env = "GIXD_MAX_TRANSFERS", value_name = "N")]
    pub max_transfers: Option<usize>,
    /// Transfers waiting for a slot before "busy, retry" (0: none wait). Without it: 64 per
    /// effective CPU.
    #[arg(id = "limits.queue_length", long = "queue-length", env = "GIXD_QUEUE_LENGTH", value_name = "N")]
    pub queue_length: Option<usize>,
    /// Bytes of responses written and not yet read by their clients, held in memory by all
    /// transfers together; past it they go to the spill directory. Without it: 64 MiB per
    /// effective CPU.
    #[arg(id = "limits.buffer_memory_bytes", long = "buffer-memory", env = "GIXD_BUFFER_MEMORY", value_name = "BYTES")]
    pub buffer_memory_bytes: Option<u64>,
    /// Where responses past the memory budget wait for their readers (unlinked files). Without
    /// it: /var/tmp (the temporary directory where there is none).
    #[arg(id = "limits.spill_dir", long = "spill-dir", env = "GIXD_SPILL_DIR", value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Bytes of responses in the spill directory, all transfers together; past both budgets a
    /// transfer's writer waits for its client (and new transfers wait in the queue).
    #[arg(
        id = "limits.spill_bytes",
        long = "spill-disk",
        env = "GIXD_SPILL_DISK",
        value_name = "BYTES",
        default_value = "4294967296"
    )]
    pub spill_bytes: Option<u64>,
    /// Transfers of one repository in flight before "busy, retry" (0: no limit of its own).
    #[arg(
        id = "limits.max_transfers_per_repository",
        long = "max-transfers-per-repository",
        env = "GIXD_MAX_TRANSFERS_PER_REPOSITORY",
        value_name = "N",
        default_value = "0"
    )]
    pub max_transfers_per_repository: Option<usize>,
    /// Transfers from one client address in flight before "busy, retry" (0: no limit of its own).
    #[arg(
        id = "limits.max_transfers_per_client",
        long = "max-transfers-per-client",
        env = "GIXD_MAX_TRANSFERS_PER_CLIENT",
        value_name = "N",
        default_value = "0"
    )]
    pub max_transfers_per_client: Option<usize>,
    /// Runtime worker threads. Without it: one per effective CPU.
    #[arg(id = "limits.worker_threads", long = "worker-threads", env = "GIXD_WORKER_THREADS", value_name = "N")]
    pub worker_threads: Option<usize>,
    /// Blocking threads, all started up front (at least transfers + 1). Without it: transfers + 2.
    #[arg(id = "limits.blocking_threads", long = "blocking-threads", env = "GIXD_BLOCKING_THREADS", value_name = "N")]
    pub blocking_threads: Option<usize>,
    /// Seconds a client may stay silent (or not read) during a request (at least 1).
    #[arg(
        id = "limits.io_timeout_secs",
        long = "timeout",
        env = "GIXD_TIMEOUT",
        value_name = "SECONDS",
        default_value = "120"
    )]
    pub io_timeout_secs: Option<u64>,
    /// Seconds a client has to send its request (a git:// request line, an HTTP request head; at
    /// least 1); also the window the minimum receive rate is judged over.
    #[arg(
        id = "limits.init_timeout_secs",
        long = "init-timeout",
        env = "GIXD_INIT_TIMEOUT",
        value_name = "SECONDS",
        default_value = "30"
    )]
    pub init_timeout_secs: Option<u64>,
    /// Seconds a repository's cached state (its refs as served, bitmap, pack list, commit-graph,
    /// decoded commits) is kept after the last request that used it (0: for the process's life).
    /// Bursts and the rounds of one negotiation find it warm; an idle server gives it back.
    #[arg(
        id = "limits.cache_idle_secs",
        long = "cache-idle",
        env = "GIXD_CACHE_IDLE",
        value_name = "SECONDS",
        default_value = "10"
    )]
    pub cache_idle_secs: Option<u64>,
    /// Seconds a queued request waits for a transfer slot before "busy, retry" (0: as long as
    /// its client keeps the connection, as git daemon's clients wait).
    #[arg(
        id = "limits.queue_wait_secs",
        long = "queue-wait",
        env = "GIXD_QUEUE_WAIT",
        value_name = "SECONDS",
        default_value = "0"
    )]
    pub queue_wait_secs: Option<u64>,
}

/// `[pack_cache]`: the single-flight pack cache. A `[pack_cache]` table in the file, `--pack-cache`,
/// or any of its sizes given turns it on.
#[derive(Debug, Default, Clone, PartialEq, Args, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
#[command(next_help_heading = "Pack cache ([pack_cache] in the configuration file)")]
pub struct PackCacheSettings {
    /// Share one generated pack among identical fetches. Without it: off unless a size or the
    /// directory below is given.
    #[arg(id = "pack_cache.enabled", long = "pack-cache", env = "GIXD_PACK_CACHE", value_name = "BOOL", value_parser = boolish(),
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub enabled: Option<bool>,
    /// Bytes of cached responses held in memory, all entries together.
    #[arg(
        id = "pack_cache.memory_bytes",
        long = "pack-cache-memory",
        env = "GIXD_PACK_CACHE_MEMORY",
        value_name = "BYTES",
        default_value = "67108864"
    )]
    pub memory_bytes: Option<u64>,
    /// Where responses that do not fit in memory go (unlinked files). Without it: they stay in
    /// memory while generated and are not kept.
    #[arg(id = "pack_cache.dir", long = "pack-cache-dir", env = "GIXD_PACK_CACHE_DIR", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Bytes of finished responses kept on disk.
    #[arg(
        id = "pack_cache.disk_bytes",
        long = "pack-cache-disk",
        env = "GIXD_PACK_CACHE_DISK",
        value_name = "BYTES",
        default_value = "1073741824"
    )]
    pub disk_bytes: Option<u64>,
    /// Seconds a finished response is kept.
    #[arg(
        id = "pack_cache.max_age_secs",
        long = "pack-cache-secs",
        env = "GIXD_PACK_CACHE_SECS",
        value_name = "SECONDS",
        default_value = "300"
    )]
    pub max_age_secs: Option<u64>,
}

/// `[lfs]`: Git LFS over the HTTP(S) listeners (the batch API, its object endpoints, locks).
#[derive(Debug, Default, Clone, PartialEq, Args, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
#[command(next_help_heading = "Git LFS ([lfs] in the configuration file)")]
pub struct LfsSettings {
    /// Serve Git LFS: `<repository>/info/lfs` (objects stored in the repository's `lfs/`).
    #[arg(id = "lfs.enabled", long = "lfs", env = "GIXD_LFS", value_name = "BOOL", value_parser = boolish(),
          num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "true")]
    pub enabled: Option<bool>,
    /// Largest LFS object an upload may store (its own limit: not the request-body limit).
    #[arg(
        id = "lfs.max_object_bytes",
        long = "lfs-max-object-bytes",
        env = "GIXD_LFS_MAX_OBJECT_BYTES",
        value_name = "BYTES",
        default_value = "5368709120"
    )]
    pub max_object_bytes: Option<u64>,
    /// Most LFS bytes one repository may hold (0: no limit); an upload past it is refused.
    #[arg(
        id = "lfs.max_repository_bytes",
        long = "lfs-max-repository-bytes",
        env = "GIXD_LFS_MAX_REPOSITORY_BYTES",
        value_name = "BYTES",
        default_value = "0"
    )]
    pub max_repository_bytes: Option<u64>,
    /// LFS uploads at once, server-wide (each holds a blocking thread while it hashes and
    /// writes); more wait, then are told to retry. Downloads take no slot of any kind.
    #[arg(
        id = "lfs.max_uploads",
        long = "lfs-max-uploads",
        env = "GIXD_LFS_MAX_UPLOADS",
        value_name = "N",
        default_value = "4"
    )]
    pub max_uploads: Option<usize>,
    /// The URL clients reach this server at (`https://git.example.org`), for the object links
    /// the batch API hands out; without it, the scheme and `Host` of each request.
    #[arg(id = "lfs.url", long = "lfs-url", env = "GIXD_LFS_URL", value_name = "URL")]
    pub url: Option<String>,
    /// Keep LFS objects in this bucket of an S3-compatible server (below `<prefix><repository>/`)
    /// instead of each repository's `lfs/`: uploads go up in parts, visible only once checked.
    #[arg(id = "lfs.s3_bucket", long = "lfs-s3-bucket", env = "GIXD_LFS_S3_BUCKET", value_name = "NAME")]
    pub s3_bucket: Option<String>,
    /// The S3-compatible server's URL (`https://s3.eu-west-1.amazonaws.com`, `http://127.0.0.1:8333`).
    #[arg(id = "lfs.s3_endpoint", long = "lfs-s3-endpoint", env = "GIXD_LFS_S3_ENDPOINT", value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// The bucket's region, as requests are signed for it.
    #[arg(
        id = "lfs.s3_region",
        long = "lfs-s3-region",
        env = "GIXD_LFS_S3_REGION",
        value_name = "REGION",
        default_value = "us-east-1"
    )]
    pub s3_region: Option<String>,
    /// A folder of the bucket the objects go below (`gixd/`); none: its top.
    #[arg(id = "lfs.s3_prefix", long = "lfs-s3-prefix", env = "GIXD_LFS_S3_PREFIX", value_name = "PREFIX")]
    pub s3_prefix: Option<String>,
    /// Name the bucket in the URL's path (most S3-compatible servers), not in its host name.
    #[arg(id = "lfs.s3_path_style", long = "lfs-s3-path-style", env = "GIXD_LFS_S3_PATH_STYLE", value_name = "BOOL",
          value_parser = boolish(), num_args = 0..=1, require_equals = true, default_missing_value = "true",
          default_value = "true")]
    pub s3_path_style: Option<bool>,
    /// The access key id; without it, `AWS_ACCESS_KEY_ID`.
    #[arg(
        id = "lfs.s3_access_key_id",
        long = "lfs-s3-access-key-id",
        env = "GIXD_LFS_S3_ACCESS_KEY_ID",
        value_name = "ID"
    )]
    pub s3_access_key_id: Option<String>,
    /// A file holding the secret access key (in the file: relative to the file); without it,
    /// `AWS_SECRET_ACCESS_KEY`. Never given on the command line itself.
    #[arg(
        id = "lfs.s3_secret_access_key_file",
        long = "lfs-s3-secret-access-key-file",
        env = "GIXD_LFS_S3_SECRET_ACCESS_KEY_FILE",
        value_name = "FILE"
    )]
    pub s3_secret_access_key_file: Option<std::path::PathBuf>,
}

impl LfsSettings {
    pub(super) fn is_empty(&self) -> bool {
        *self == LfsSettings::default()
    }
}

impl Limits {
    pub(super) fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

impl PackCacheSettings {
    pub(super) fn is_empty(&self) -> bool {
        *self == PackCacheSettings::default()
    }

    /// A layer that gives any of the cache's sizes (or, in the file, its table) turns it on,
    /// unless it also says `enabled = false`.
    pub(super) fn implied_by(&mut self, given: bool) {
        let sized = self.memory_bytes.is_some()
            || self.dir.is_some()
            || self.disk_bytes.is_some()
            || self.max_age_secs.is_some();
        if self.enabled.is_none() && (given || sized) {
            self.enabled = Some(true);
        }
    }
}

/// A switch's value: `true`/`false`, also `yes`/`no`, `on`/`off`, `1`/`0` (from a variable).
pub(super) fn boolish() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}
