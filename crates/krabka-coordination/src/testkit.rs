//! What the fast tier's tests build again and again, in one place: tokens,
//! leases and the records of the compacted topic, waiting for a condition
//! with a deadline (a regression fails the test instead of hanging it),
//! and the log lines a test wrote. For the tests of every crate of the
//! workspace (feature `testkit`); the service's own builders are in its
//! crate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::{
    FencingToken, Key, Lease, LogRecord, Registration, encode_key, encode_lease,
    encode_registration,
};

/// The instant the tests' clocks start at (ms since the epoch, in 2023).
pub const T0: i64 = 1_700_000_000_000;

/// A token; panics on a negative part.
pub fn t(id: i64, epoch: i16) -> FencingToken {
    FencingToken::new(id, epoch).expect("a valid token")
}

/// `member`'s lease under `token`, granted at [`T0`] for 30 s.
pub fn lease(member: &str, token: FencingToken) -> Lease {
    lease_at(member, token, T0, T0 + 30_000)
}

/// `member`'s lease under `token` from `granted_at` to `deadline`.
pub fn lease_at(member: &str, token: FencingToken, granted_at: i64, deadline: i64) -> Lease {
    Lease {
        member: member.into(),
        token,
        granted_at,
        deadline,
    }
}

/// The record at `offset` of `member` registering for `role`.
pub fn registration_record(offset: i64, role: &str, member: &str, registered_at: i64) -> LogRecord {
    let value = encode_registration(&Registration {
        member: member.into(),
        registered_at,
    })
    .expect("a registration encodes");
    record(offset, &Key::registration(role, member), Some(value))
}

/// The record at `offset` of `role`'s lease.
pub fn lease_record(offset: i64, role: &str, lease: &Lease) -> LogRecord {
    let value = encode_lease(lease).expect("a lease encodes");
    record(offset, &Key::lease(role), Some(value))
}

/// A tombstone of `key` at `offset` (a deregistration, or a cleared lease).
pub fn tombstone(offset: i64, key: &Key) -> LogRecord {
    record(offset, key, None)
}

fn record(offset: i64, key: &Key, value: Option<Vec<u8>>) -> LogRecord {
    LogRecord {
        offset,
        key: encode_key(key).expect("a key encodes").into(),
        value: value.map(Into::into),
    }
}

/// Polls `probe` every 10 ms until it gives `Some`; panics after `within`,
/// saying `what` was awaited.
pub async fn eventually<T>(
    within: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The log lines written while it lives, on this thread.
#[derive(Debug)]
pub struct Logs {
    buffer: Arc<std::sync::Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    pub fn capture() -> Logs {
        let buffer: Arc<std::sync::Mutex<Vec<u8>>> = Arc::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        Logs {
            buffer,
            _guard: tracing::subscriber::set_default(subscriber),
        }
    }

    /// The lines at `level` that mention `needle`.
    pub fn lines(&self, level: &str, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.buffer.lock().unwrap())
            .lines()
            .filter(|l| l.contains(level) && l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

/// Rewrites `path` in place with `contents` and puts its modification time
/// back, as `cp -p`, `touch -r` and `rsync -t` leave a file: only its ctime
/// says it changed.
pub fn rewrite_keeping_mtime(path: &Path, contents: &[u8]) {
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    std::fs::write(path, contents).unwrap();
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

/// A folder laid out as the kubelet mounts a Secret: each file a
/// symlink through `..data` to a timestamped folder, updated by
/// writing a new folder and swapping `..data` (a rename, atomic).
#[derive(Debug)]
pub struct SecretMount {
    pub dir: tempfile::TempDir,
    version: u32,
}

impl SecretMount {
    /// A mount holding `files` (name, contents).
    pub fn new(files: &[(&str, &[u8])]) -> SecretMount {
        let mut mount = SecretMount {
            dir: tempfile::tempdir().unwrap(),
            version: 0,
        };
        mount.update(files);
        for (name, _) in files {
            std::os::unix::fs::symlink(Path::new("..data").join(name), mount.dir.path().join(name))
                .unwrap();
        }
        mount
    }

    /// The path a consumer reads.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A new version of every file, swapped in at once.
    pub fn update(&mut self, files: &[(&str, &[u8])]) {
        self.version += 1;
        let folder = format!("..2026_12_02_{:04}", self.version);
        let dir = self.dir.path().join(&folder);
        std::fs::create_dir(&dir).unwrap();
        for (name, contents) in files {
            std::fs::write(dir.join(name), contents).unwrap();
        }
        let link = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&folder, &link).unwrap();
        std::fs::rename(&link, self.dir.path().join("..data")).unwrap();
    }
}
