//! Operations endpoints: liveness, readiness, metrics and the API contract.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::json;
use crate::service::state::{AppState, Unready};
use crate::service::watch::TopicSearch;

/// The OpenAPI document, served as written.
pub(crate) const OPENAPI_YAML: &str = include_str!("../../../openapi/openapi.yaml");

/// `GET /healthz`: the process is up.
pub(crate) async fn healthz() -> Response {
    json(StatusCode::OK, &json!({ "status": "ok" }))
}

/// `GET /readyz`: Kafka reachable, views caught up. A topic that does not
/// exist yet is ready, with a note (a fresh cluster: no role is registered;
/// checks work). Not ready, the reason is told in full only to a caller
/// with an accepted API token; anyone else reads it without broker
/// addresses, file paths or libraries' errors ([`Unready::said`]) and gets
/// the request id of the log line that holds the whole of it.
pub(crate) async fn readyz(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
) -> Response {
    let trusted = state.api_tokens.is_some() && !super::auth::refused(&state, &request);
    let tell = !super::auth::refused(&state, &request);
    let shutting_down = state
        .shutting_down
        .load(std::sync::atomic::Ordering::Relaxed)
        .then(|| Unready::plain("shutting down"));
    match shutting_down
        .or_else(|| state.readiness.reason())
        .or_else(|| state.watcher.not_ready())
    {
        None => match state.watcher.topic_search() {
            TopicSearch::Absent if tell => json(
                StatusCode::OK,
                &json!({
                    "status": "ready",
                    "note": format!(
                        "the topic {} does not exist yet: no role is registered; the first candidate creates it",
                        state.config.kafka.topic
                    ),
                }),
            ),
            _ => json(StatusCode::OK, &json!({ "status": "ready" })),
        },
        Some(reason) => {
            tracing::info!(reason = %reason.why, "answered /readyz: not ready");
            let id = super::request_id::answering().and_then(|a| a.id);
            let said = if trusted {
                reason.why
            } else if !tell {
                "see the service's logs or ask with a token".to_owned()
            } else {
                reason.said
            };
            json(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({ "status": "not ready", "reason": said, "requestId": id }),
            )
        }
    }
}

/// `GET /metrics`: Prometheus text exposition.
pub(crate) async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    state.update_gauges();
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// `GET /openapi.yaml`.
pub(crate) async fn openapi() -> Response {
    let mut response = OPENAPI_YAML.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use yaml_rust2::{Yaml, YamlLoader};

    use super::OPENAPI_YAML;
    use crate::service::http::ROUTES;
    use crate::service::http::problem::tests::every_cause;

    /// The HTTP methods a path item may hold (OpenAPI 3.1, "Path Item Object").
    const METHODS: [&str; 8] = [
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];

    fn document() -> Yaml {
        let mut docs =
            YamlLoader::load_from_str(OPENAPI_YAML).expect("openapi/openapi.yaml is YAML");
        assert_eq!(
            docs.len(),
            1,
            "openapi/openapi.yaml must hold exactly one YAML document"
        );
        docs.remove(0)
    }

    fn text(key: &Yaml) -> String {
        match key {
            Yaml::String(s) => s.clone(),
            Yaml::Integer(i) => i.to_string(),
            Yaml::Real(r) => r.clone(),
            other => panic!("unexpected key {other:?}"),
        }
    }

    /// Every (METHOD, path) of the document's `paths`.
    fn documented_operations(doc: &Yaml) -> BTreeSet<(String, String)> {
        let paths = doc["paths"]
            .as_hash()
            .expect("the document has a `paths` map");
        let mut operations = BTreeSet::new();
        for (path, item) in paths {
            let path = text(path);
            let item = item
                .as_hash()
                .unwrap_or_else(|| panic!("paths.{path} is not a path item map"));
            for (key, _) in item {
                let key = text(key);
                if METHODS.contains(&key.as_str()) {
                    operations.insert((key.to_uppercase(), path.clone()));
                }
            }
        }
        operations
    }

    #[test]
    fn the_document_is_openapi_3_1() {
        let doc = document();
        let version = match &doc["openapi"] {
            Yaml::String(s) => s.clone(),
            other => panic!("`openapi` must be a version string such as 3.1.0, not {other:?}"),
        };
        let parts: Vec<&str> = version.split('.').collect();
        assert!(
            parts.len() == 3
                && parts[0] == "3"
                && parts[1] == "1"
                && parts[2].parse::<u32>().is_ok(),
            "`openapi` is {version:?}; the document must be OpenAPI 3.1.x"
        );
    }

    #[test]
    fn documented_operations_are_exactly_the_routes() {
        let documented = documented_operations(&document());
        let routed: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|(method, path)| ((*method).to_owned(), (*path).to_owned()))
            .collect();
        assert_eq!(
            routed.len(),
            ROUTES.len(),
            "ROUTES lists an operation twice"
        );
        let undocumented: Vec<_> = routed.difference(&documented).collect();
        let unrouted: Vec<_> = documented.difference(&routed).collect();
        assert!(
            undocumented.is_empty() && unrouted.is_empty(),
            "openapi/openapi.yaml and router::ROUTES disagree:\n  routed but not documented: {undocumented:?}\n  documented but not routed: {unrouted:?}"
        );
    }

    /// Every problem value anywhere in the document (an object with a
    /// `type` under the problem prefix and a `title`).
    fn problems_in(node: &Yaml, out: &mut Vec<(String, String)>) {
        match node {
            Yaml::Hash(map) => {
                let field = |k: &str| match map.get(&Yaml::String(k.into())) {
                    Some(Yaml::String(s)) => Some(s.clone()),
                    _ => None,
                };
                if let (Some(kind), Some(title)) = (field("type"), field("title"))
                    && kind.starts_with(krabka_authority_types::PROBLEM_BASE)
                {
                    out.push((kind, title));
                }
                map.values().for_each(|v| problems_in(v, out));
            }
            Yaml::Array(items) => items.iter().for_each(|v| problems_in(v, out)),
            _ => {}
        }
    }

    /// The document names every cause of an error answer the service has,
    /// and each example problem carries the title the service gives it.
    #[test]
    fn the_documented_problems_are_the_services() {
        let doc = document();
        let causes: BTreeMap<String, String> = every_cause()
            .iter()
            .map(|e| (e.problem().kind, e.problem().title))
            .collect();
        let listed: BTreeSet<String> =
            doc["components"]["schemas"]["Problem"]["properties"]["type"]["examples"]
                .as_vec()
                .expect("Problem.type lists its examples")
                .iter()
                .filter_map(|y| y.as_str().map(str::to_owned))
                .collect();
        let missing: Vec<&String> = causes.keys().filter(|k| !listed.contains(*k)).collect();
        assert!(
            missing.is_empty(),
            "problem types the service answers but Problem.type does not list: {missing:?}"
        );
        let mut examples = Vec::new();
        problems_in(&doc, &mut examples);
        assert!(examples.len() >= 10, "{examples:?}");
        for (kind, title) in &examples {
            let expected = match kind.strip_prefix(krabka_authority_types::PROBLEM_BASE) {
                Some(field) if field.starts_with("invalid-") => {
                    format!("Invalid {}", &field["invalid-".len()..])
                }
                _ => causes
                    .get(kind)
                    .unwrap_or_else(|| {
                        panic!("the document shows {kind}, which the service never answers")
                    })
                    .clone(),
            };
            assert_eq!(title, &expected, "the title of {kind} in the document");
        }
    }

    #[test]
    fn every_operation_documents_a_response() {
        let doc = document();
        let paths = doc["paths"]
            .as_hash()
            .expect("the document has a `paths` map");
        let mut checked = 0;
        for (path, item) in paths {
            let path = text(path);
            let Some(item) = item.as_hash() else { continue };
            for (method, operation) in item {
                let method = text(method);
                if !METHODS.contains(&method.as_str()) {
                    continue;
                }
                let responses = operation["responses"].as_hash();
                assert!(
                    responses.is_some_and(|r| !r.is_empty()),
                    "{} {path} documents no response",
                    method.to_uppercase()
                );
                checked += 1;
            }
        }
        assert_eq!(
            checked,
            documented_operations(&doc).len(),
            "not every operation was checked"
        );
    }

    /// The names of a schema's properties and of its required ones.
    fn fields(doc: &Yaml, schema: &str) -> (BTreeSet<String>, BTreeSet<String>) {
        let schema = &doc["components"]["schemas"][schema];
        let properties = schema["properties"]
            .as_hash()
            .unwrap_or_else(|| panic!("{schema:?} has properties"))
            .keys()
            .map(text)
            .collect();
        let required = schema["required"]
            .as_vec()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        (properties, required)
    }

    /// The keys `value` serializes to.
    fn keys(value: &impl serde::Serialize) -> BTreeSet<String> {
        serde_json::to_value(value)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    /// The check's wire types (the types crate's, which the service writes
    /// and the client reads) and `openapi.yaml` name the same fields, the
    /// same required ones, the same verdicts and the same statuses.
    #[test]
    fn the_wire_types_are_what_the_contract_documents() {
        use krabka_authority_types::{
            BatchItem, BatchOutcome, CheckAnswer, FencingToken, Problem, Refusal, Sighting, Verdict,
        };
        let doc = document();
        let token: FencingToken = "4:2".parse().unwrap();
        let answer = CheckAnswer {
            role: "orders".into(),
            token,
            verdict: Verdict::Superseded,
            current: Some("4:3".parse().unwrap()),
            state: Some("Ongoing".into()),
            superseded_by: Some(Sighting {
                pair: "4:3".parse().unwrap(),
                seen_at: "2026-12-02T00:00:00.000Z".to_owned(),
            }),
            checked_at: "2026-12-02T00:00:00.000Z".to_owned(),
            cached: false,
            cluster: "c1".into(),
        };
        let (properties, required) = fields(&doc, "CheckAnswer");
        assert_eq!(keys(&answer), properties, "CheckAnswer's fields");
        assert_eq!(
            keys(&answer),
            required,
            "CheckAnswer: every field is always there"
        );

        let verdict = BatchItem {
            status: 409,
            outcome: BatchOutcome::Verdict(answer),
        };
        let (properties, required) = fields(&doc, "BatchVerdict");
        assert_eq!(keys(&verdict), properties, "BatchVerdict's fields");
        assert_eq!(keys(&verdict), required, "BatchVerdict's required fields");
        let refused = BatchItem::<String> {
            status: 400,
            outcome: BatchOutcome::Refused(Refusal {
                role: None,
                token: None,
                problem: Problem::invalid("role", "the item has no role"),
            }),
        };
        let (properties, required) = fields(&doc, "BatchProblem");
        assert_eq!(keys(&refused), properties, "BatchProblem's fields");
        assert_eq!(keys(&refused), required, "BatchProblem's required fields");

        let values = |schema: &str, field: Option<&str>| -> BTreeSet<String> {
            let schema = &doc["components"]["schemas"][schema];
            let schema = field.map_or(schema, |f| &schema["properties"][f]);
            schema["enum"]
                .as_vec()
                .unwrap_or_else(|| panic!("{schema:?} has an enum"))
                .iter()
                .map(|v| {
                    v.as_str()
                        .map_or_else(|| v.as_i64().unwrap().to_string(), str::to_owned)
                })
                .collect()
        };
        let verdicts: BTreeSet<String> =
            Verdict::ALL.iter().map(|v| v.as_str().to_owned()).collect();
        assert_eq!(values("Verdict", None), verdicts, "the verdicts");
        let statuses: BTreeSet<String> = Verdict::ALL
            .iter()
            .map(|v| v.status().to_string())
            .collect();
        assert_eq!(
            values("BatchVerdict", Some("status")),
            statuses,
            "a verdict's statuses"
        );
    }
}
