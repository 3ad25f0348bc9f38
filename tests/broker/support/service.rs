//! The service in this process, over real HTTP on a bound port, against a
//! real broker; the Kafka client's settings tunable beyond the flags.

use std::time::Duration;

use krabka_authority::coordination::FencingToken;
use krabka_authority::kafka::ClientConfig;
use krabka_authority::service::{self, AppState, ServeError, ServiceConfig};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::broker::{bootstrap, config_for};
use super::eventually;

/// A running service: its URL, the shutdown signal and its task.
pub struct Service {
    pub url: String,
    pub stop: watch::Sender<bool>,
    pub done: tokio::task::JoinHandle<Result<(), ServeError>>,
}

/// The service's settings and the Kafka client's (which tests tune beyond
/// the flags); derefs to the service's.
pub struct Config {
    pub service: ServiceConfig,
    pub client: ClientConfig,
}

impl std::ops::Deref for Config {
    type Target = ServiceConfig;
    fn deref(&self) -> &ServiceConfig {
        &self.service
    }
}

impl std::ops::DerefMut for Config {
    fn deref_mut(&mut self) -> &mut ServiceConfig {
        &mut self.service
    }
}

/// Short timeouts and view TTLs over the broker at `bootstrap`, on `topic`.
pub fn config(bootstrap: &str, topic: &str) -> Config {
    let mut config = Config {
        service: ServiceConfig::new(bootstrap),
        client: config_for(bootstrap),
    };
    config.kafka.topic = topic.to_owned();
    config.watch.roster_ttl = Duration::from_millis(500);
    config.http.request_timeout = Duration::from_secs(3);
    config.client.request_timeout = Duration::from_secs(1);
    config.client.operation_timeout = Duration::from_secs(2);
    config.watch.challenge_stagger = Duration::from_millis(500);
    config
}

/// [`config`] on the shared broker, with the watcher polling fast.
pub fn watcher_config(topic: &str) -> Config {
    let mut config = config(&bootstrap(), topic);
    config.watch.roster_ttl = Duration::from_millis(200);
    config.watch.poll_interval = Duration::from_millis(300);
    config
}

/// Starts the service on a free port of 127.0.0.1.
pub async fn start(config: Config) -> Service {
    let state = AppState::with_client_config(config.service, config.client).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = watch::channel(false);
    let done = tokio::spawn(service::run(listener, state, rx));
    Service { url, stop, done }
}

/// GET `url`: the status, the body as JSON (a string when it is not) and
/// the headers; panics when no answer arrives.
pub async fn get(url: &str) -> (u16, Value, reqwest::header::HeaderMap) {
    let response = reqwest::get(url).await.expect("the service answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.unwrap();
    let json = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (status, json, headers)
}

/// A check of `token` for `role` at the service at `url`: its status and
/// body (null when not JSON), none when no answer came.
pub async fn check(
    http: &reqwest::Client,
    url: &str,
    role: &str,
    token: FencingToken,
) -> Option<(u16, Value)> {
    let answer = http
        .get(format!("{url}/roles/{role}/authority?token={token}"))
        .send()
        .await
        .ok()?;
    let status = answer.status().as_u16();
    Some((status, answer.json().await.unwrap_or(Value::Null)))
}

/// The value of one series of `name` with `labels`, or 0 when absent.
pub async fn metric(service: &Service, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, body, _) = get(&format!("{}/metrics", service.url)).await;
    let text = body.as_str().unwrap().to_owned();
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The members of a roster view, in rank order.
pub fn members(view: &Value) -> Vec<String> {
    view["members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| m["member"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `/readyz` answers 200.
pub async fn ready(service: &Service) {
    eventually(|| async {
        let (status, _, _) = get(&format!("{}/readyz", service.url)).await;
        (status == 200).then_some(())
    })
    .await;
}
