//! The API's bearer tokens, beside the settings that name their file.
//!
//! Tokens are read from a file (one per line; blank lines and `#` comments
//! ignored), typically a mounted Secret, and read again when the file
//! changes (a rewrite, or the kubelet's symlink swap: [`crate::files`]), so
//! a rotation needs no restart. Only SHA-256 digests are kept and
//! compared in constant time. Who needs one is [`crate::service::http::auth`]'s
//! business.
//!
//! The file's content is the truth, also when it revokes: an emptied file
//! accepts no token, and a file that cannot be read or holds a line no
//! `Authorization` header can carry accepts none either (said at error,
//! [`TokensFile::Unusable`]); nothing loaded before outlives the file. A
//! kubelet update of a mounted Secret writes the new files into a folder
//! of their own and then renames the `..data` link onto it, so a read
//! sees the old file or the new one, never half of one.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::files::{FileStamp, LOOK_EVERY};
use crate::sync;

/// What the tokens file holds now, as far as accepting goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokensFile {
    /// These tokens (as digests); none when the file was emptied.
    Tokens(Vec<[u8; 32]>),
    /// The file cannot be read or is malformed: no token is accepted.
    Unusable(String),
}

impl TokensFile {
    /// How many tokens are accepted (0 when emptied or unusable).
    pub fn accepted(&self) -> usize {
        match self {
            TokensFile::Tokens(digests) => digests.len(),
            TokensFile::Unusable(_) => 0,
        }
    }
}

/// The accepted tokens and where they come from.
#[derive(Debug)]
pub struct ApiTokens {
    path: PathBuf,
    file: RwLock<TokensFile>,
    /// When the file was last looked at, its stamp then, and whether that
    /// stamp was settled (`FileStamp::settled`): one that was not is read
    /// again even when it looks the same.
    seen: Mutex<(tokio::time::Instant, Option<FileStamp>, bool)>,
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// True for what `Authorization: Bearer <token>` can carry as one token:
/// visible ASCII, no space. A line with anything else could never match.
fn presentable(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())
}

/// The file at `path` as accepting goes; never echoes a token (a
/// malformed line is named by its number).
fn read(path: &Path) -> TokensFile {
    let text = match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => {
                return TokensFile::Unusable(format!(
                    "the API tokens file {} is not UTF-8 text",
                    path.display()
                ));
            }
        },
        Err(e) => {
            return TokensFile::Unusable(format!(
                "cannot read the API tokens file {}: {e}",
                path.display()
            ));
        }
    };
    let mut digests = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !presentable(line) {
            return TokensFile::Unusable(format!(
                "line {} of the API tokens file {} holds a character no Authorization header can carry (a token is visible ASCII without spaces)",
                n + 1,
                path.display()
            ));
        }
        digests.push(digest(line.as_bytes()));
    }
    TokensFile::Tokens(digests)
}

/// Whether `stamp` is settled now: a stamp of a file changed within the
/// last moments may be unchanged by a rewrite (`FileStamp::settled`).
fn settled(stamp: Option<FileStamp>) -> bool {
    stamp.is_some_and(|s| s.settled(std::time::SystemTime::now()))
}

impl ApiTokens {
    /// Reads the tokens. A file that cannot be read or is malformed is an
    /// error (a wrong setting, said before serving); an empty one accepts
    /// no token, said at warn.
    pub fn load(path: &Path) -> Result<ApiTokens, String> {
        let stamp = FileStamp::of(path);
        let file = read(path);
        match &file {
            TokensFile::Unusable(why) => return Err(why.clone()),
            TokensFile::Tokens(d) if d.is_empty() => tracing::warn!(
                file = %path.display(),
                "the API tokens file holds no token: every protected request is refused (401)"
            ),
            TokensFile::Tokens(d) => {
                tracing::info!(file = %path.display(), tokens = d.len(), "API tokens loaded")
            }
        }
        Ok(ApiTokens {
            path: path.to_owned(),
            file: RwLock::new(file),
            seen: Mutex::new((tokio::time::Instant::now(), stamp, settled(stamp))),
        })
    }

    /// Reads the file again if it changed (looked at once per
    /// [`LOOK_EVERY`] at most). Whatever it holds now replaces what it held:
    /// emptied, no token; unreadable or malformed, no token, said at error.
    pub fn refresh(&self) {
        let stamp = {
            let mut seen = sync::lock(&self.seen);
            if seen.0.elapsed() < LOOK_EVERY {
                return;
            }
            seen.0 = tokio::time::Instant::now();
            let stamp = FileStamp::of(&self.path);
            if stamp == seen.1 && seen.2 {
                return;
            }
            seen.1 = stamp;
            seen.2 = settled(stamp);
            stamp
        };
        let file = read(&self.path);
        if file == *sync::read(&self.file) {
            // Read again while its stamp was not settled: the same tokens.
            return;
        }
        match &file {
            TokensFile::Unusable(why) => tracing::error!(
                error = %why,
                "API tokens file unusable: no token is accepted until it is fixed"
            ),
            TokensFile::Tokens(d) if d.is_empty() => tracing::warn!(
                file = %self.path.display(),
                "the API tokens file holds no token now: every protected request is refused (401)"
            ),
            TokensFile::Tokens(d) => {
                tracing::info!(file = %self.path.display(), tokens = d.len(), ?stamp, "API tokens reloaded")
            }
        }
        *sync::write(&self.file) = file;
    }

    /// What the file holds now (after a look at it).
    pub fn file(&self) -> TokensFile {
        self.refresh();
        sync::read(&self.file).clone()
    }

    /// True when `token` is one of the accepted tokens.
    pub fn accepts(&self, token: &str) -> bool {
        self.refresh();
        let presented = digest(token.as_bytes());
        let file = sync::read(&self.file);
        let TokensFile::Tokens(digests) = &*file else {
            return false;
        };
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

    /// The next call looks at the file again.
    fn look_again(tokens: &ApiTokens) {
        tokens.seen.lock().unwrap().0 -= LOOK_EVERY;
    }

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
        look_again(&tokens);
        tokens.seen.lock().unwrap().1 = None;
        assert!(tokens.accepts("gamma"));
        assert!(!tokens.accepts("alpha"));
    }

    #[test]
    fn an_emptied_or_removed_secret_revokes_every_token() {
        let mut mount = SecretMount::new(&[("tokens", b"alpha\nbeta\n")]);
        let tokens = ApiTokens::load(&mount.path("tokens")).unwrap();
        assert!(tokens.accepts("alpha"));
        // Emptied (comments left): no token is accepted, none of before.
        mount.update(&[("tokens", b"# every token revoked\n")]);
        look_again(&tokens);
        assert!(!tokens.accepts("alpha"), "an emptied file keeps no token");
        assert!(!tokens.accepts("beta"));
        assert_eq!(tokens.file(), TokensFile::Tokens(vec![]));
        // Back, then the key removed from the Secret: the link dangles.
        mount.update(&[("tokens", b"omega\n")]);
        look_again(&tokens);
        assert!(tokens.accepts("omega"));
        mount.update(&[("other", b"x")]);
        look_again(&tokens);
        assert!(!tokens.accepts("omega"), "a removed file keeps no token");
        assert!(matches!(tokens.file(), TokensFile::Unusable(_)));
        // An empty file at start-up is a service that accepts nothing.
        let empty = SecretMount::new(&[("tokens", b"")]);
        let tokens = ApiTokens::load(&empty.path("tokens")).unwrap();
        assert!(!tokens.accepts(""));
        assert_eq!(tokens.file().accepted(), 0);
    }

    #[test]
    fn an_unreadable_or_malformed_file_accepts_nothing() {
        let mut mount = SecretMount::new(&[("tokens", b"alpha\n")]);
        let tokens = ApiTokens::load(&mount.path("tokens")).unwrap();
        for (bytes, says) in [
            (&b"alpha\n\xff\xfe\n"[..], "not UTF-8"),
            (&b"alpha\nbeta gamma\n"[..], "line 2"),
            ("alpha\nbéta\n".as_bytes(), "line 2"),
            (&b"alpha\nbeta\x07\n"[..], "line 2"),
        ] {
            mount.update(&[("tokens", b"alpha\n")]);
            look_again(&tokens);
            assert!(tokens.accepts("alpha"));
            mount.update(&[("tokens", bytes)]);
            look_again(&tokens);
            assert!(!tokens.accepts("alpha"), "{says}: the good line too");
            let TokensFile::Unusable(why) = tokens.file() else {
                panic!("{says}: usable");
            };
            assert!(why.contains(says), "{why}");
            assert!(!why.contains("beta"), "a token is never echoed: {why}");
            assert!(ApiTokens::load(&mount.path("tokens")).is_err());
        }
    }

    #[test]
    fn a_secret_swapped_by_the_kubelet_is_read_again() {
        let mut mount = SecretMount::new(&[("tokens", b"alpha\n")]);
        let tokens = ApiTokens::load(&mount.path("tokens")).unwrap();
        assert!(tokens.accepts("alpha"));
        // The same size: only the file behind the link is another.
        mount.update(&[("tokens", b"omega\n")]);
        look_again(&tokens);
        assert!(tokens.accepts("omega"));
        assert!(!tokens.accepts("alpha"));
    }
}
