//! The documentation and the scripts as a newcomer meets them (fast tier):
//! every script's `--help` prints its usage and starts, builds and leaves
//! nothing; every shell command of README.md and docs/ is run somewhere
//! (`scripts/doc-commands check`: the curl commands by `scripts/run
//! --smoke` against the demo, the others by the test or CI step it names).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.push(path);
        }
    }
    found
}

const SCRIPTS: &[&str] = &[
    "scripts/test",
    "scripts/run",
    "scripts/kafka",
    "scripts/fuzz",
    "scripts/audit",
    "scripts/check-deploy",
    "scripts/schemathesis",
    "scripts/doc-commands",
    "scripts/image",
    "scripts/kube",
    "scripts/chart-test",
    "bench/run",
];

#[test]
fn every_script_answers_help_with_its_usage_and_does_nothing_else() {
    // Every executable of scripts/ is listed (a new one gets --help too).
    for entry in std::fs::read_dir(repo().join("scripts")).unwrap() {
        let path = entry.unwrap().path();
        let executable = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        ) & 0o111
            != 0;
        if path.is_file() && executable {
            let name = format!("scripts/{}", path.file_name().unwrap().to_string_lossy());
            assert!(
                SCRIPTS.contains(&name.as_str()),
                "{name} is not checked here"
            );
        }
    }
    for script in SCRIPTS {
        for flag in ["--help", "-h"] {
            // Every place a script could start, build or cache something
            // points into one empty folder: it must stay empty. A script
            // that ran cargo (no toolchain under this HOME) would fail.
            let sandbox = std::env::temp_dir().join(format!(
                "krabka-docs-{}-{}{flag}",
                std::process::id(),
                script.replace('/', "-")
            ));
            let _ = std::fs::remove_dir_all(&sandbox);
            let dirs = [
                "home",
                "cache",
                "tmp",
                "runtime",
                "kafka-state",
                "cargo-target",
            ];
            for dir in dirs {
                std::fs::create_dir_all(sandbox.join(dir)).unwrap();
            }
            let out = Command::new(repo().join(script))
                .arg(flag)
                .current_dir(sandbox.join("tmp"))
                .env("HOME", sandbox.join("home"))
                .env("XDG_CACHE_HOME", sandbox.join("cache"))
                .env("TMPDIR", sandbox.join("tmp"))
                .env("XDG_RUNTIME_DIR", sandbox.join("runtime"))
                .env("KRABKA_KAFKA_STATE", sandbox.join("kafka-state"))
                .env("CARGO_TARGET_DIR", sandbox.join("cargo-target"))
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "{script} {flag}: {}\n{stdout}{stderr}",
                out.status
            );
            assert!(
                stdout.lines().count() >= 3 && stdout.contains(script),
                "{script} {flag}: no usage naming it on stdout:\n{stdout}"
            );
            assert!(
                stderr.is_empty(),
                "{script} {flag} said on stderr:\n{stderr}"
            );
            // It names only what a clone has, and no sentence is cut off.
            assert!(
                !stdout.contains("../shared") && !stdout.contains("workplace"),
                "{script} {flag} points outside the repository:\n{stdout}"
            );
            for word in stdout.split_whitespace() {
                let word = word.trim_matches(|c: char| "()`,.;:'\"".contains(c));
                let named = [
                    "docs/",
                    "scripts/",
                    "tests/",
                    "helm/",
                    "monitoring/",
                    "bench/",
                ]
                .iter()
                .any(|dir| word.starts_with(dir))
                    && word.rsplit('/').next().is_some_and(|f| f.contains('.'))
                    && !word.contains(['*', '<', '$', '{']);
                if named {
                    assert!(
                        repo().join(word).exists(),
                        "{script} {flag} names {word}, which a clone does not have"
                    );
                }
            }
            for paragraph in stdout.split("\n\n") {
                let last = paragraph.trim_end();
                assert!(
                    !last.ends_with(" adds") && !last.ends_with(" the") && !last.ends_with(" a"),
                    "{script} {flag}: a sentence is cut off: {last:?}"
                );
            }
            let left = files(&sandbox);
            assert!(left.is_empty(), "{script} {flag} left {left:?}");
            std::fs::remove_dir_all(&sandbox).unwrap();
        }
    }
}

#[test]
fn every_command_of_the_readme_and_docs_is_run_by_a_test() {
    let out = Command::new(repo().join("scripts/doc-commands"))
        .arg("check")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_smoke_run_finds_the_readmes_first_verdict() {
    // scripts/run --smoke runs what `doc-commands curl` lists: the README's
    // first verdict, with the token scripts/run prints, is among them.
    let out = Command::new(repo().join("scripts/doc-commands"))
        .arg("curl")
        .output()
        .unwrap();
    assert!(out.status.success());
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("200") && l.contains("authority?token=$TOKEN")),
        "{listed}"
    );
}
