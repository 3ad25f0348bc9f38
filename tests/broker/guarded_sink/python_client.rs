//! Other languages by contract: a Python client generated from
//! `openapi/openapi.yaml` by openapi-python-client checks a live `serve`
//! process (single and batch: authoritative, superseded, 400).
//!
//! The generator (pinned) is installed once into a virtualenv under
//! `target/tmp/python/`; each run generates the client afresh from the
//! document, and fails if the generator skips any part of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use krabka_authority::transport::Coordinator;

use super::Served;
use crate::common::{topic, transport, unique};

const GENERATOR: &str = "openapi-python-client";
const GENERATOR_VERSION: &str = "0.29.1";

fn python_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("python")
}

fn run(command: &mut Command, what: &str) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The interpreter: `KRABKA_PYTHON`, else `python3`; panics with what to
/// install when it or its venv module is missing.
fn python() -> String {
    let python = std::env::var("KRABKA_PYTHON").unwrap_or_else(|_| "python3".into());
    let missing = |why: String| -> ! {
        panic!(
            "the Python contract test needs Python 3.10+ with venv and pip ({why}); \
             install them (Debian: apt-get install python3 python3-venv python3-pip) \
             or point KRABKA_PYTHON at an interpreter"
        )
    };
    match Command::new(&python)
        .args([
            "-c",
            "import sys, venv, ensurepip; assert sys.version_info >= (3, 10), sys.version",
        ])
        .output()
    {
        Ok(out) if out.status.success() => python,
        Ok(out) => missing(format!(
            "{python}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => missing(format!("{python}: {e}")),
    }
}

/// A virtualenv with the generator, made once: built beside its final
/// place and renamed into it, so a concurrent run never sees half of one.
fn venv() -> PathBuf {
    let venv = python_dir().join(format!("{GENERATOR}-{GENERATOR_VERSION}"));
    if venv.join("bin").join(GENERATOR).exists() {
        return venv;
    }
    let python = python();
    std::fs::create_dir_all(python_dir()).unwrap();
    let building = python_dir().join(unique("venv-building"));
    run(
        Command::new(&python).arg("-m").arg("venv").arg(&building),
        "creating a virtualenv",
    );
    run(
        Command::new(building.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(format!("{GENERATOR}=={GENERATOR_VERSION}")),
        &format!("pip install {GENERATOR}=={GENERATOR_VERSION} (needs PyPI)"),
    );
    // The scripts in bin/ name the build path; the generator always runs
    // as `python -m`, which does not mind the move.
    if std::fs::rename(&building, &venv).is_err() {
        // Another run got there first.
        let _ = std::fs::remove_dir_all(&building);
    }
    venv
}

/// Generates the client from the document into a fresh directory under
/// target/; returns the interpreter of the venv and the directory.
fn generate() -> (PathBuf, PathBuf) {
    let venv = venv();
    let python = venv.join("bin/python");
    let out = python_dir().join(unique("client"));
    let config = python_dir().join(unique("generator-config") + ".yaml");
    // No formatter hooks; /openapi.yaml serves YAML, which the generator
    // takes as text.
    std::fs::write(
        &config,
        "post_hooks: []\ncontent_type_overrides:\n  application/yaml: text/plain\n",
    )
    .unwrap();
    let document = crate::common::repo().join("openapi/openapi.yaml");
    let generated = run(
        Command::new(&python)
            .args(["-m", "openapi_python_client", "generate"])
            .arg("--path")
            .arg(&document)
            .arg("--config")
            .arg(&config)
            .arg("--output-path")
            .arg(&out),
        "openapi-python-client generate",
    );
    let _ = std::fs::remove_file(&config);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&generated.stdout),
        String::from_utf8_lossy(&generated.stderr)
    );
    // A warning means a part of the contract was dropped from the client.
    assert!(
        !said.to_lowercase().contains("warning"),
        "the generator skipped parts of openapi/openapi.yaml:\n{said}"
    );
    (python, out)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_generated_python_client_checks_single_and_batch() {
    let (python, package) = tokio::task::block_in_place(generate);
    let topic = topic(3).await;
    let served = Served::start(&topic).await;
    let role = unique("python");
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

    let script = Path::new(file!())
        .parent()
        .map(|dir| crate::common::repo().join(dir).join("contract_check.py"))
        .unwrap();
    let out = tokio::task::block_in_place(|| {
        Command::new(&python)
            .arg(&script)
            .args([&served.url, &role, &current.to_string(), &old.to_string()])
            .env("PYTHONPATH", &package)
            .output()
            .unwrap()
    });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{said}");
    assert!(out.status.success(), "the Python client failed:\n{said}");
    assert_eq!(
        said.lines().filter(|l| l.starts_with("ok ")).count(),
        10,
        "every check of contract_check.py ran"
    );
    let _ = std::fs::remove_dir_all(&package);
}
