//! The observers, simulated hosts of their own: one asks the service over
//! HTTP (checks of tokens current, deposed, not yet minted, of other
//! producer ids and of replaced clusters, alone and in batches of roles in
//! no sorted order; roster views; an event stream per role, reopened from
//! its last id when it ends), one runs the `check`
//! subcommand's path (a fresh Kafka client per check, bootstrapped from
//! one broker or all). Everything seen goes to the history, stamped with
//! simulated time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::clock::{SimClock, Steps};
use super::history::{Answer, Asker, Check, History, StreamEvent, Verdict, View};
use super::schedule::ROLES;
use crate::coordination::FencingToken;
use crate::kafka::fake::model::{Behind, Model};
use crate::kafka::{KafkaClient, host};
use crate::service::ServiceConfig;
use crate::service::check::Checker;

/// The service's address on the simulated network.
pub(super) const SERVICE: &str = "service:8080";

/// Simulated time since the run began.
fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// A token to check of `role`: its current pair, the one a process behind
/// the controller names (else the one that pair deposed), one it held
/// before, the next epoch (not minted), one of another cluster, a low pair
/// a rebuilt cluster mints again, or a producer id it never held.
fn choose(rng: &mut StdRng, model: &Model, role: &str) -> (i64, i16) {
    let truth = model.truth();
    let cluster = model.cluster_id();
    let held: Vec<(i64, i16)> = truth
        .held
        .iter()
        .filter(|h| h.role == role && h.cluster == cluster)
        .filter_map(|h| h.pair)
        .collect();
    let elsewhere: Vec<(i64, i16)> = truth
        .held
        .iter()
        .filter(|h| h.role == role && h.cluster != cluster)
        .filter_map(|h| h.pair)
        .collect();
    let current = model
        .current(role)
        .or(held.last().copied())
        .unwrap_or((0, 0));
    let pick = |rng: &mut StdRng, from: &[(i64, i16)]| {
        from.get(rng.random_range(0..from.len().max(1))).copied()
    };
    // The pair the current one deposed: what a stale coordinator still
    // names, the one a wrong 200 would be for.
    let deposed = held.iter().rev().find(|p| **p != current).copied();
    // Better still: a pair a process behind the controller names now.
    let stale = model
        .behind()
        .into_iter()
        .flat_map(|b| b.named)
        .filter(|(r, p)| r == role && *p != current)
        .map(|(_, p)| p)
        .next();
    match rng.random_range(0..100) {
        0..35 => current,
        35..55 => stale.or(deposed).unwrap_or(current),
        55..65 => pick(rng, &held).unwrap_or(current),
        65..75 => (current.0, current.1.saturating_add(1)),
        75..83 => pick(rng, &elsewhere).unwrap_or((0, 1)),
        83..92 => (0, rng.random_range(0..3)),
        _ => (current.0 + 777, 0),
    }
}

fn pair(text: Option<&serde_json::Value>) -> Option<(i64, i16)> {
    let token: FencingToken = text?.as_str()?.parse().ok()?;
    Some((token.producer_id(), token.producer_epoch()))
}

/// One request on a new connection to the service: status and body, or
/// why none came (within 15 s).
async fn exchange<B>(request: hyper::Request<B>) -> Result<(u16, Bytes), String>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let asked = async {
        let stream = host::connect(SERVICE).await.map_err(|e| e.to_string())?;
        let (mut send, connection) =
            hyper::client::conn::http1::handshake::<_, B>(TokioIo::new(stream))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let response = send
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok((status, body.to_bytes()))
    };
    tokio::time::timeout(Duration::from_secs(15), asked)
        .await
        .unwrap_or_else(|_| Err("no answer within 15 s".into()))
}

/// One GET of `path`.
async fn get(path: &str) -> Result<(u16, Bytes), String> {
    let request = hyper::Request::get(path)
        .header("host", "service")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    exchange(request).await
}

/// One POST of a JSON `body` to `path`.
async fn post(path: &str, body: Vec<u8>) -> Result<(u16, Bytes), String> {
    let request = hyper::Request::post(path)
        .header("host", "service")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    exchange(request).await
}

/// The answers of a batch of `asked` (role, token) items, in the order
/// asked, from the service's `status` and `body`. An item that names
/// another role or token than the one asked in its place is answered with
/// a verdict no truth allows, which the checker reports.
fn batch_answers(asked: &[(&'static str, (i64, i16))], status: u16, body: &[u8]) -> Vec<Answer> {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let Some(results) = json["results"].as_array().filter(|_| status == 200) else {
        let whole = answered(status, body);
        return asked.iter().map(|_| whole.clone()).collect();
    };
    asked
        .iter()
        .enumerate()
        .map(|(i, (role, token))| {
            let Some(item) = results.get(i) else {
                return Answer::Other(format!("no answer for item {i}"));
            };
            let named = (item["role"].as_str(), pair(item.get("token")));
            if named != (Some(*role), Some(*token)) {
                return Answer::Verdict {
                    status: 200,
                    verdict: Verdict {
                        verdict: format!("item {i} answered for {named:?}"),
                        current: None,
                        superseded_by: None,
                        cached: false,
                        cluster: item["cluster"].as_str().unwrap_or("?").to_owned(),
                    },
                };
            }
            let status = item["status"].as_u64().unwrap_or(0) as u16;
            let item = if status == 503 {
                // A problem's detail sits in its `problem`.
                item.get("problem").cloned().unwrap_or_default()
            } else {
                item.clone()
            };
            answered(status, item.to_string().as_bytes())
        })
        .collect()
}

/// The answer of a check of the service, as the history has it.
fn answered(status: u16, body: &[u8]) -> Answer {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    match status {
        200 | 409 => Answer::Verdict {
            status,
            verdict: Verdict {
                verdict: json["verdict"].as_str().unwrap_or("?").to_owned(),
                current: pair(json.get("current")),
                superseded_by: pair(json.get("supersededBy").and_then(|s| s.get("pair"))),
                cached: json["cached"].as_bool().unwrap_or(false),
                cluster: json["cluster"].as_str().unwrap_or("?").to_owned(),
            },
        },
        503 => Answer::Unavailable(json["detail"].as_str().unwrap_or("").to_owned()),
        _ => Answer::Other(format!("{status} {}", String::from_utf8_lossy(body))),
    }
}

/// Asks the service until `until`: a check every 20 to 50 ms (each on its
/// own connection, many in flight), a view every 200 to 600 ms, and an
/// event stream per role.
pub(super) async fn service_observer(
    seed: u64,
    model: Arc<Model>,
    history: Arc<Mutex<History>>,
    until: Duration,
) -> turmoil::Result {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5e41_71ce);
    let streams: Vec<_> = ROLES
        .iter()
        .map(|&role| tokio::spawn(stream(role, history.clone(), until)))
        .collect();
    let mut next_view = Duration::ZERO;
    let mut next_batch = Duration::ZERO;
    let mut asked = tokio::task::JoinSet::new();
    while now() < until {
        if now() >= next_batch {
            // Two to five items, roles drawn in any order (a role may come
            // twice): answered item by item, in the order asked.
            let items: Vec<(&'static str, (i64, i16))> = (0..rng.random_range(2..=5))
                .map(|_| {
                    let role = ROLES[rng.random_range(0..ROLES.len())];
                    (role, choose(&mut rng, &model, role))
                })
                .collect();
            let history = history.clone();
            asked.spawn(async move {
                let sent = now();
                let body = serde_json::Value::Array(
                    items
                        .iter()
                        .map(|(role, (id, epoch))| {
                            serde_json::json!({"role": role, "token": format!("{id}:{epoch}")})
                        })
                        .collect(),
                );
                let answers = match post("/authority/check", body.to_string().into_bytes()).await {
                    Ok((status, body)) => batch_answers(&items, status, &body),
                    Err(why) => items.iter().map(|_| Answer::Other(why.clone())).collect(),
                };
                let received = now();
                let mut history = history.lock().unwrap();
                for ((role, token), answer) in items.into_iter().zip(answers) {
                    history.checks.push(Check {
                        asker: Asker::Batch,
                        role,
                        token,
                        sent,
                        received,
                        answer,
                    });
                }
            });
            next_batch = now() + Duration::from_millis(rng.random_range(100..300));
        }
        let role = ROLES[rng.random_range(0..ROLES.len())];
        let token = choose(&mut rng, &model, role);
        let checks = history.clone();
        asked.spawn(async move {
            let sent = now();
            let path = format!("/roles/{role}/authority?token={}:{}", token.0, token.1);
            let answer = match get(&path).await {
                Ok((status, body)) => answered(status, &body),
                Err(why) => Answer::Other(why),
            };
            let check = Check {
                asker: Asker::Service,
                role,
                token,
                sent,
                received: now(),
                answer,
            };
            checks.lock().unwrap().checks.push(check);
        });
        if now() >= next_view {
            let role = ROLES[rng.random_range(0..ROLES.len())];
            let history = history.clone();
            asked.spawn(async move {
                let sent = now();
                let (status, body) = get(&format!("/roles/{role}"))
                    .await
                    .unwrap_or((0, Bytes::new()));
                let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let members = json["members"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| {
                        let name = m["member"].as_str().unwrap_or("?").to_owned();
                        (name, m["offset"].as_i64().unwrap_or(-1))
                    })
                    .collect();
                let lease = json["lease"]["member"].as_str().map(|m| {
                    (
                        m.to_owned(),
                        pair(json["lease"].get("token")).unwrap_or((-1, -1)),
                    )
                });
                let view = View {
                    role,
                    sent,
                    received: now(),
                    status,
                    offset: json["view"]["offset"].as_i64(),
                    age_ms: json["view"]["ageMs"].as_i64(),
                    members,
                    lease,
                };
                history.lock().unwrap().views.push(view);
            });
            next_view = now() + Duration::from_millis(rng.random_range(200..600));
        }
        while asked.try_join_next().is_some() {}
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..50))).await;
    }
    while asked.join_next().await.is_some() {}
    for stream in streams {
        stream.abort();
    }
    Ok(())
}

/// `role`'s event stream until `until`, opened again from its last id when
/// it ends.
async fn stream(role: &'static str, history: Arc<Mutex<History>>, until: Duration) {
    let mut last_id: Option<String> = None;
    let mut opened = 0;
    while now() < until {
        opened += 1;
        let _ = follow(role, opened, &mut last_id, &history).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn follow(
    role: &'static str,
    stream: u32,
    last_id: &mut Option<String>,
    history: &Mutex<History>,
) -> Result<(), String> {
    let connection = host::connect(SERVICE).await.map_err(|e| e.to_string())?;
    let (mut send, connection) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(connection))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let mut request =
        hyper::Request::get(format!("/roles/{role}/events")).header("host", "service");
    if let Some(id) = last_id.as_deref() {
        request = request.header("last-event-id", id);
    }
    let request = request.body(Empty::new()).map_err(|e| e.to_string())?;
    let response = send
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    if response.status() != 200 {
        return Err(format!("status {}", response.status()));
    }
    let mut body = response.into_body();
    let mut pending = String::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        pending.push_str(&String::from_utf8_lossy(data));
        while let Some(end) = pending.find("\n\n") {
            let block: String = pending.drain(..end + 2).collect();
            let (mut kind, mut id, mut data) = (None, None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    kind = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                }
            }
            let data: serde_json::Value = serde_json::from_str(&data).unwrap_or_default();
            let text = |field: &str| data[field].as_str().map(str::to_owned);
            let Some(kind) = kind else { continue };
            let (offset, cluster) = match id.as_deref().and_then(|i| i.split_once('@')) {
                Some((o, c)) => (o.parse().ok(), Some(c.to_owned())),
                None => (id.as_deref().and_then(|i| i.parse().ok()), None),
            };
            if id.is_some() {
                *last_id = id;
            }
            history.lock().unwrap().events.push(StreamEvent {
                role,
                stream,
                received: now(),
                kind,
                offset,
                cluster,
                member: text("member"),
                holder: text("holder"),
                token: pair(data.get("token")),
            });
        }
    }
    Ok(())
}

/// The `check` subcommand's path until `until`, every 0.3 to 0.9 s: a fresh
/// client bootstrapped from one broker (or all), one check through a
/// checker of its own, as `krabka-authority check` does.
pub(super) async fn cli_observer(
    seed: u64,
    nodes: Vec<i32>,
    model: Arc<Model>,
    history: Arc<Mutex<History>>,
    steps: Steps,
    until: Duration,
) -> turmoil::Result {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc1_1c1);
    loop {
        // Checks come thicker while a broker answers from a stale view.
        let pause = match model.behind().iter().any(|b| b.reached) {
            true => rng.random_range(100..300),
            false => rng.random_range(300..900),
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if now() >= until {
            return Ok(());
        }
        // Half the time a broker answers from a view behind the
        // controller's, the check starts there, on a host cut off with it
        // (a client of that broker alone, as a deposed holder beside it
        // would be), of a pair it names: the deposed holder asking whether
        // it still holds.
        let behind: Vec<Behind> = model.behind().into_iter().filter(|b| b.reached).collect();
        let aimed = match behind.is_empty() {
            true => None,
            false => rng
                .random_bool(0.5)
                .then(|| &behind[rng.random_range(0..behind.len())]),
        };
        let (bootstrap, role, token) = match aimed {
            Some(Behind { node, named, .. }) if !named.is_empty() => {
                let (role, pair) = &named[rng.random_range(0..named.len())];
                let role = ROLES.into_iter().find(|r| r == role).unwrap_or(ROLES[0]);
                (format!("b{node}:9092"), role, *pair)
            }
            _ => {
                let bootstrap = match aimed {
                    Some(Behind { node, .. }) => format!("b{node}:9092"),
                    None if rng.random_bool(0.7) => {
                        format!("b{}:9092", nodes[rng.random_range(0..nodes.len())])
                    }
                    None => nodes
                        .iter()
                        .map(|n| format!("b{n}:9092"))
                        .collect::<Vec<_>>()
                        .join(","),
                };
                let role = ROLES[rng.random_range(0..ROLES.len())];
                (bootstrap, role, choose(&mut rng, &model, role))
            }
        };
        let config = ServiceConfig::new(&bootstrap).kafka.client_config()?;
        let client = KafkaClient::new(config)?;
        let deadline = Instant::now() + client.config().operation_timeout;
        let checker = Checker::new(
            Arc::new(client),
            Arc::new(SimClock::new(steps.clone())),
            1,
            1024,
        );
        let sent = now();
        let checked = checker
            .check(role, FencingToken::new(token.0, token.1)?, deadline)
            .await;
        let answer = match checked {
            Ok(a) => Answer::Verdict {
                status: a.verdict.status(),
                verdict: Verdict {
                    verdict: a.verdict.as_str().to_owned(),
                    current: a.current.map(|t| (t.producer_id(), t.producer_epoch())),
                    superseded_by: a
                        .superseded_by
                        .map(|s| (s.pair.producer_id(), s.pair.producer_epoch())),
                    cached: a.cached,
                    cluster: a.cluster,
                },
            },
            Err(e) => Answer::Unavailable(e.to_string()),
        };
        history.lock().unwrap().checks.push(Check {
            asker: Asker::Cli,
            role,
            token,
            sent,
            received: now(),
            answer,
        });
    }
}
