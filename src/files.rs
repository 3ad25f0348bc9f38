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
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(1);

/// What a file is now, as far as noticing a change goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    /// The stamp of the file at `path` (symlinks followed); `None` when it
    /// cannot be read (missing, or a dangling link mid-swap).
    pub(crate) fn of(path: &Path) -> Option<FileStamp> {
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
pub(crate) mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    /// A folder laid out as the kubelet mounts a Secret: each file a
    /// symlink through `..data` to a timestamped folder, updated by
    /// writing a new folder and swapping `..data` (a rename, atomic).
    pub(crate) struct SecretMount {
        pub(crate) dir: tempfile::TempDir,
        version: u32,
    }

    impl SecretMount {
        /// A mount holding `files` (name, contents).
        pub(crate) fn new(files: &[(&str, &[u8])]) -> SecretMount {
            let mut mount = SecretMount {
                dir: tempfile::tempdir().unwrap(),
                version: 0,
            };
            mount.update(files);
            for (name, _) in files {
                std::os::unix::fs::symlink(
                    Path::new("..data").join(name),
                    mount.dir.path().join(name),
                )
                .unwrap();
            }
            mount
        }

        /// The path a consumer reads.
        pub(crate) fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        /// A new version of every file, swapped in at once.
        pub(crate) fn update(&mut self, files: &[(&str, &[u8])]) {
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
