//! The operator subcommands, run as the built binary.

use std::sync::Arc;
use std::time::Duration;

use krabka_authority::leadership::acquire;
use krabka_authority::transport::Coordinator;
use serde_json::Value;

use crate::support::broker::{bootstrap, topic, transport};
use crate::support::leadership::fast_options;
use crate::support::process::binary;
use crate::support::{eventually, unique};

fn run(args: &[&str]) -> (i32, String, String) {
    let out = binary().args(args).output().expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn partition_prints_the_number_alone() {
    assert_eq!(
        run(&["partition", "orders", "--partitions", "16"]),
        (0, "12\n".into(), String::new())
    );
    assert_eq!(run(&["partition", "orders", "--partitions", "3"]).1, "0\n");
    let (code, _, err) = run(&["partition", "orders", "--partitions", "0"]);
    assert_ne!(code, 0);
    assert!(err.contains("must be positive"), "{err}");
}

#[test]
fn decode_prints_json_or_the_failing_part() {
    let (code, out, _) = run(&[
        "decode",
        "--key",
        "0000000100066f72646572730000",
        "--value",
        "000000066e6f64652d310000000000000fa000070000018bcfe568000000018bcfe5dd30",
    ]);
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["key"]["role"], "orders");
    assert_eq!(json["value"]["token"], "4000:7");
    let (code, _, err) = run(&[
        "decode",
        "--key",
        "0000000100066f72646572730000",
        "--value",
        "0000",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("lease value") && err.contains("part: lease_value"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn check_exits_by_verdict_and_roster_prints_the_role() {
    let topic = topic(3).await;
    let role = unique("cli");
    let held = acquire(
        Arc::new(transport(&topic).await),
        &role,
        "a",
        fast_options(),
    )
    .await
    .unwrap();
    let token = held.token().to_string();
    let addr = bootstrap();
    let kafka = [
        "--bootstrap-servers",
        addr.as_str(),
        "--topic",
        topic.as_str(),
    ];
    let check = |token: &str| {
        let mut args = vec!["check"];
        args.extend_from_slice(&kafka);
        args.extend_from_slice(&[role.as_str(), token]);
        run(&args)
    };
    let (code, out, err) = tokio::task::block_in_place(|| check(&token));
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["verdict"],
        "authoritative"
    );

    let newer = transport(&topic)
        .await
        .acquire_epoch(&role, Duration::from_secs(2))
        .await
        .unwrap();
    let (code, out, _) = tokio::task::block_in_place(|| check(&token));
    assert_eq!(code, 1);
    let json: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["verdict"], "superseded");
    assert_eq!(json["current"], newer.to_string());

    let (code, _, err) = tokio::task::block_in_place(|| check("1:-1"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("producer epoch"), "{err}");
    let (code, _, err) = tokio::task::block_in_place(|| {
        run(&[
            "check",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--kafka-operation-timeout",
            "1s",
            &role,
            "1:1",
        ])
    });
    assert_eq!(code, 2, "could not decide: {err}");
    assert!(err.contains("could not ask the coordinator"), "{err}");

    let mut args = vec!["roster"];
    args.extend_from_slice(&kafka);
    args.push(role.as_str());
    let roster = eventually(|| async {
        let (code, out, _) = tokio::task::block_in_place(|| run(&args));
        let json: Value = serde_json::from_str(&out).ok()?;
        (code == 0 && json["lease"]["member"] == "a").then_some(json)
    })
    .await;
    assert_eq!(roster["members"][0]["member"], "a");
    assert_eq!(roster["role"], role);
    // As GET /roles/{role} has it: the status, and the coordinator's pair
    // asked now (the newer epoch minted above, not the lease's).
    assert!(roster["status"].is_string(), "{roster}");
    assert_eq!(
        roster["coordinator"]["current"],
        newer.to_string(),
        "{roster}"
    );
}
