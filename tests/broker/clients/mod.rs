//! Other languages by contract: clients generated from
//! `openapi/openapi.yaml` in Python (openapi-python-client), Go
//! (oapi-codegen) and Java (openapi-generator's `java`/`native`), each
//! checking a live `serve` process: an authoritative token (200), a
//! superseded one (409, the verdict typed) and a malformed one (400, the
//! problem's `field` typed), singly and in a batch.
//!
//! Each test generates its client afresh into the cargo target's tmp dir and
//! fails on any warning of the generator (a warning means a part of the
//! contract was dropped). The generators are pinned; what they fetch is kept
//! outside the work tree (a virtualenv under ~/.cache/krabka-authority, the
//! Go module and build caches, ~/.m2), so only a first run downloads.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use krabka_authority::coordination::FencingToken;
use krabka_authority::transport::Coordinator;

use crate::support::broker::{topic, transport};
use crate::support::process::Served;
use crate::support::{repo, unique};

mod go;
mod java;
mod python;

/// A live service and a role with two tokens minted in turn: `current`
/// holds it, `old` is superseded.
pub struct Live {
    pub served: Served,
    pub role: String,
    pub current: FencingToken,
    pub old: FencingToken,
}

impl Live {
    pub async fn start(prefix: &str) -> Live {
        let topic = topic(3).await;
        let served = Served::start(&topic).await;
        let role = unique(prefix);
        let old = transport(&topic)
            .await
            .acquire_epoch(&role, Duration::from_secs(30))
            .await
            .unwrap();
        let current = transport(&topic)
            .await
            .acquire_epoch(&role, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(current.supersedes(&old));
        Live {
            served,
            role,
            current,
            old,
        }
    }

    /// The arguments of every contract check: URL ROLE AUTHORITATIVE SUPERSEDED.
    pub fn args(&self) -> [String; 4] {
        [
            self.served.url.clone(),
            self.role.clone(),
            self.current.to_string(),
            self.old.to_string(),
        ]
    }
}

/// Where a test builds its client: a fresh folder under the cargo target's
/// tmp dir.
pub fn work_dir(language: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("clients")
        .join(unique(language));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Generators' caches that outlive the target dir:
/// `${XDG_CACHE_HOME:-~/.cache}/krabka-authority/<name>`.
pub fn cache_dir(name: &str) -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME is set");
    cache.join("krabka-authority").join(name)
}

/// This module's folder in the repository (the programs and configs).
pub fn here() -> PathBuf {
    repo().join("tests/broker/clients")
}

/// The contract itself.
pub fn document() -> PathBuf {
    repo().join("openapi/openapi.yaml")
}

/// stdout and stderr together.
pub fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `command`; panics with its output unless it succeeds.
pub fn run(command: &mut Command, what: &str) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        said(&out)
    );
    out
}

/// Panics with what to install when `tool --version`-like `probe` fails.
pub fn require(tool: &str, probe: &[&str], install: &str) {
    let ok = Command::new(tool)
        .args(probe)
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(ok, "this test needs {tool}: {install}");
}

/// Runs a contract check program (its command, the live service's
/// arguments appended) and asserts that every one of its checks passed.
pub fn check(mut command: Command, live: &Live, language: &str) {
    let out = command.args(live.args()).output().unwrap_or_else(|e| {
        panic!("the {language} contract check cannot run: {e}");
    });
    let said = said(&out);
    eprintln!("{said}");
    assert!(
        out.status.success(),
        "the {language} client failed:\n{said}"
    );
    assert_eq!(
        said.lines().filter(|l| l.starts_with("ok ")).count(),
        10,
        "every check of the {language} contract check ran"
    );
}

/// A path as a string argument.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}
