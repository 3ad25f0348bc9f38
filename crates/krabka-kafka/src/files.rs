//! Files the service reads while it runs (the API tokens, the TLS material
//! of broker connections), and how a change to one is noticed.
//!
//! A mounted Kubernetes Secret is updated by the kubelet swapping its
//! `..data` symlink to a new folder: the path stays, the file behind it is
//! another one, with the same size and maybe the same modification time.
//! An operator may instead rewrite a file in place. So a file is known by
//! its stamp, taken through symlinks: which file it is (device and inode),
//! its size, its modification time and its status change time (ctime,
//! which a writer cannot set back: `touch -r`, `cp -p` and `rsync -t`
//! restore the modification time, never the ctime); any of them changing
//! is a change. Both times tick in the file system's granularity (a
//! scheduler tick, some milliseconds): a same-length rewrite within one
//! tick of the last look keeps every part of the stamp, so a stamp taken
//! within [`RACY`] of its file's last change is not trusted (`settled`),
//! as git treats an index entry as racily clean: the file is read again.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How often a watched file is looked at, at most: a rotation is taken in
/// within about this long.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How long after a file's last change its stamp may still miss a
/// rewrite: far above any file system's timestamp granularity.
pub const RACY: Duration = Duration::from_secs(2);

/// What a file is now, as far as noticing a change goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
    /// The status change time (ctime).
    changed: Option<SystemTime>,
}

impl FileStamp {
    /// The stamp of the file at `path` (symlinks followed); `None` when it
    /// cannot be read (missing, or a dangling link mid-swap).
    pub fn of(path: &Path) -> Option<FileStamp> {
        let meta = std::fs::metadata(path).ok()?;
        let changed = u64::try_from(meta.ctime()).ok().and_then(|secs| {
            let nanos = u32::try_from(meta.ctime_nsec()).ok()?;
            SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
        });
        Some(FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
            changed,
        })
    }

    /// True when the file last changed (by either time) more than
    /// [`RACY`] before `now`: a stamp equal to this one later means the
    /// file is the same. A time in the future (a clock stepped back) or
    /// unknown is not settled.
    pub fn settled(&self, now: SystemTime) -> bool {
        let last = match (self.modified, self.changed) {
            (Some(m), Some(c)) => m.max(c),
            _ => return false,
        };
        now.duration_since(last).is_ok_and(|age| age > RACY)
    }
}

#[cfg(test)]
mod tests {
    use krabka_coordination::testkit::SecretMount;

    use super::*;

    #[test]
    fn a_symlink_swap_and_a_rewrite_are_changes_and_a_look_is_not() {
        let mut mount = SecretMount::new(&[("token", b"same")]);
        let path = mount.path("token");
        let first = FileStamp::of(&path).unwrap();
        assert_eq!(FileStamp::of(&path), Some(first), "nothing changed");
        // The same size, and a modification time that may be equal.
        mount.update(&[("token", b"same")]);
        let swapped = FileStamp::of(&path).unwrap();
        assert_ne!(swapped, first, "another file behind the link");
        let plain = mount.dir.path().join("plain");
        std::fs::write(&plain, "a").unwrap();
        let before = FileStamp::of(&plain).unwrap();
        std::fs::write(&plain, "ab").unwrap();
        assert_ne!(FileStamp::of(&plain).unwrap(), before, "rewritten");
        assert_eq!(FileStamp::of(&mount.dir.path().join("missing")), None);
    }

    /// Issue 52: a rewrite that restores the modification time (`touch -r`,
    /// `cp -p`) is a change; a stamp of a file changed just now is not
    /// settled, whatever its times say.
    #[test]
    fn a_rewrite_with_its_modification_time_restored_is_a_change_and_a_fresh_stamp_is_not_settled()
    {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "old-token").unwrap();
        let before = FileStamp::of(&path).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        krabka_coordination::testkit::rewrite_keeping_mtime(&path, b"new-token");
        let after = FileStamp::of(&path).unwrap();
        assert_eq!(after.modified, before.modified, "the mtime was restored");
        assert_ne!(after, before, "the ctime moved");
        let now = SystemTime::now();
        assert!(!after.settled(now), "changed just now");
        assert!(after.settled(now + RACY + Duration::from_millis(1)));
    }
}
