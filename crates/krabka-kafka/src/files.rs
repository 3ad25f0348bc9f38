//! Files the service reads while it runs (the API tokens, the TLS material
//! of broker connections), and how a change to one is noticed.
//!
//! A mounted Kubernetes Secret is updated by the kubelet swapping its
//! `..data` symlink to a new folder: the path stays, the file behind it is
//! another one, with the same size and maybe the same modification time.
//! An operator may instead rewrite a file in place. So a file is known by
//! its stamp, taken through symlinks: which file it is (device and inode),
//! its size and its modification time; any of them changing is a change.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How often a watched file is looked at, at most: a rotation is taken in
/// within about this long.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// What a file is now, as far as noticing a change goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    /// The stamp of the file at `path` (symlinks followed); `None` when it
    /// cannot be read (missing, or a dangling link mid-swap).
    pub fn of(path: &Path) -> Option<FileStamp> {
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        })
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
}
