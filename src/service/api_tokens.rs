//! The API's bearer tokens, beside the settings that name their file.
//!
//! Tokens are read from a file (one per line; blank lines and `#` comments
//! ignored), typically a mounted Secret, and read again when the file
//! changes (a rewrite, or the kubelet's symlink swap: [`crate::files`]), so
//! a rotation needs no restart. Only SHA-256 digests are kept and
//! compared in constant time. Who needs one is [`crate::service::http::auth`]'s
//! business.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::files::{FileStamp, LOOK_EVERY};
use crate::sync;

type Digests = Arc<Vec<[u8; 32]>>;

/// The accepted tokens and where they come from.
#[derive(Debug)]
pub struct ApiTokens {
    path: PathBuf,
    digests: RwLock<Digests>,
    seen: Mutex<(tokio::time::Instant, Option<FileStamp>)>,
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

fn read(path: &Path) -> Result<(Digests, Option<FileStamp>), String> {
    let stamp = FileStamp::of(path);
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the API tokens file {}: {e}", path.display()))?;
    let digests: Vec<[u8; 32]> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| digest(l.as_bytes()))
        .collect();
    if digests.is_empty() {
        return Err(format!(
            "the API tokens file {} holds no token",
            path.display()
        ));
    }
    Ok((Arc::new(digests), stamp))
}

impl ApiTokens {
    /// Reads the tokens; an unreadable or empty file is an error.
    pub fn load(path: &Path) -> Result<ApiTokens, String> {
        let (digests, stamp) = read(path)?;
        tracing::info!(file = %path.display(), tokens = digests.len(), "API tokens loaded");
        Ok(ApiTokens {
            path: path.to_owned(),
            digests: RwLock::new(digests),
            seen: Mutex::new((tokio::time::Instant::now(), stamp)),
        })
    }

    /// Reads the file again if it changed; a file that became unreadable or
    /// empty keeps the tokens loaded before.
    fn refresh(&self) {
        let stamp = {
            let mut seen = sync::lock(&self.seen);
            if seen.0.elapsed() < LOOK_EVERY {
                return;
            }
            seen.0 = tokio::time::Instant::now();
            let stamp = FileStamp::of(&self.path);
            if stamp == seen.1 {
                return;
            }
            stamp
        };
        match read(&self.path) {
            Ok((digests, _)) => {
                tracing::info!(file = %self.path.display(), tokens = digests.len(), "API tokens reloaded");
                *sync::write(&self.digests) = digests;
                sync::lock(&self.seen).1 = stamp;
            }
            Err(e) => {
                tracing::warn!(error = %e, "API tokens not reloaded; keeping the previous ones")
            }
        }
    }

    /// True when `token` is one of the accepted tokens.
    pub fn accepts(&self, token: &str) -> bool {
        self.refresh();
        let presented = digest(token.as_bytes());
        let digests = sync::read(&self.digests).clone();
        // Every digest is compared, so the time does not say which matched.
        digests
            .iter()
            .fold(subtle::Choice::from(0), |found, d| {
                found | d.ct_eq(&presented)
            })
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::SecretMount;

    #[test]
    fn tokens_come_from_the_file_and_follow_its_changes() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let file = dir.join("tokens");
        std::fs::write(&file, "# comment\n\nalpha\n  beta  \n").unwrap();
        let tokens = ApiTokens::load(&file).unwrap();
        assert!(tokens.accepts("alpha"));
        assert!(tokens.accepts("beta"));
        assert!(!tokens.accepts("gamma"));
        assert!(!tokens.accepts(""));
        assert!(!tokens.accepts("# comment"));

        std::fs::write(&file, "gamma\n").unwrap();
        // Force the next look and a different modification time.
        tokens.seen.lock().unwrap().0 -= LOOK_EVERY;
        tokens.seen.lock().unwrap().1 = None;
        assert!(tokens.accepts("gamma"));
        assert!(!tokens.accepts("alpha"));

        std::fs::write(&file, "\n# nothing\n").unwrap();
        tokens.seen.lock().unwrap().0 -= LOOK_EVERY;
        tokens.seen.lock().unwrap().1 = None;
        assert!(
            tokens.accepts("gamma"),
            "an emptied file keeps the old tokens"
        );
        assert!(ApiTokens::load(&file).is_err());
    }

    #[test]
    fn a_secret_swapped_by_the_kubelet_is_read_again() {
        let mut mount = SecretMount::new(&[("tokens", b"alpha\n")]);
        let tokens = ApiTokens::load(&mount.path("tokens")).unwrap();
        assert!(tokens.accepts("alpha"));
        // The same size: only the file behind the link is another.
        mount.update(&[("tokens", b"omega\n")]);
        tokens.seen.lock().unwrap().0 -= LOOK_EVERY;
        assert!(tokens.accepts("omega"));
        assert!(!tokens.accepts("alpha"));
    }
}
