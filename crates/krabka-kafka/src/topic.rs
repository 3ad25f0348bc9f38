//! The coordination topic: create it compacted when missing, read its
//! partition count, refuse one that is not compacted, and read the
//! largest batch it takes (`max.message.bytes`), which bounds what a batch
//! of it may decompress to (`fetch`).

use std::time::Duration;
use tokio::time::Instant;

use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    TopicName,
    create_topics_request::{CreatableTopic, CreatableTopicConfig},
    describe_configs_request::DescribeConfigsResource,
};
use kafka_protocol::protocol::StrBytes;

use super::client::KafkaClient;
use super::error::{KafkaError, ResponseError};
use super::retry::retrying;
use super::state::Lesson;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// How to create the coordination topic when it is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicSpec {
    /// The partition count.
    pub partitions: i32,
    /// The replication factor; -1 takes the broker default.
    pub replication_factor: i16,
    /// Extra topic configs (`cleanup.policy=compact` is always set).
    pub configs: Vec<(String, String)>,
}

impl Default for TopicSpec {
    fn default() -> Self {
        TopicSpec {
            partitions: 16,
            replication_factor: -1,
            configs: Vec::new(),
        }
    }
}

fn topic_err(topic: &str, reason: impl Into<String>) -> KafkaError {
    KafkaError::Topic {
        topic: topic.to_owned(),
        reason: reason.into(),
    }
}

/// The topic config that bounds a batch's size as written.
const MAX_MESSAGE_BYTES: &str = "max.message.bytes";

/// The configs a topic created here gets unless its spec says otherwise.
/// - `min.compaction.lag.ms`, one hour: past the active segment, only this
///   lag keeps the cleaner from removing a superseded record (Kafka's
///   `LogCleanerManager`; the broker's default is 0), and a record
///   compacted before a lagging reader reached it is a change that reader
///   never sees: an event stream's "every change, or a `reset`" holds
///   while readers lag less than this (a schedule of the simulation tier,
///   in development, showed it).
/// - `message.timestamp.type=LogAppendTime`: the lag is counted from a
///   segment's largest record timestamp (`LogCleanerManager.cleanableOffsets`),
///   which under the default `CreateTime` each producer sets from its own
///   clock, and Kafka accepts any timestamp in the past
///   (`message.timestamp.before.max.ms`): a member whose clock runs an
///   hour behind would write records compactable at once. The broker's
///   own clock stamps them instead.
const CREATED_DEFAULTS: [(&str, &str); 2] = [
    ("min.compaction.lag.ms", "3600000"),
    ("message.timestamp.type", "LogAppendTime"),
];

/// Below this `min.compaction.lag.ms` a topic is warned of: an outage of
/// the service's reads longer than the lag may lose a change to the
/// cleaner (an event stream then skips it without a `reset`).
const LAG_WARNED_BELOW_MS: i64 = 10 * 60 * 1000;

/// What is unsafe in a topic's compaction configs ([`CREATED_DEFAULTS`]
/// says why each matters), as warnings; `None` values were not given (no
/// warning: the answer may omit them).
fn compaction_warnings(lag_ms: Option<&str>, timestamp_type: Option<&str>) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(lag) = lag_ms
        && lag
            .trim()
            .parse::<i64>()
            .is_ok_and(|ms| ms < LAG_WARNED_BELOW_MS)
    {
        warnings.push(format!(
            "min.compaction.lag.ms={lag}: a superseded record may be compacted before a reader lagging longer than that reads it, and its event streams miss the change (set 3600000; docs/operations.md)"
        ));
    }
    if timestamp_type.is_some_and(|t| t.trim() == "CreateTime") {
        warnings.push(
            "message.timestamp.type=CreateTime: each producer's clock stamps its records and so decides when compaction may remove them (set LogAppendTime; docs/operations.md)"
                .to_owned(),
        );
    }
    warnings
}

/// The topic config that says how many replicas acknowledge a write.
const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";

/// A DescribeConfigs of `keys` of one resource.
fn build_describe_config(kind: i8, name: &str, keys: &[&str]) -> DescribeConfigsRequest {
    let keys = keys.iter().map(|k| StrBytes::from_string((*k).to_owned()));
    DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(StrBytes::from_string(name.to_owned()))
            .with_configuration_keys(Some(keys.collect())),
    ])
}

/// The value of `key` in a DescribeConfigs answer of one resource, or its
/// error; `None` when the resource has no such key.
fn parse_describe_config(
    response: &DescribeConfigsResponse,
    key: &str,
) -> Result<Option<String>, KafkaError> {
    let Some(result) = response.results.first() else {
        return Ok(None);
    };
    if result.error_code != 0 {
        return Err(KafkaError::broker(
            "DescribeConfigs",
            result.error_code,
            result.error_message.as_ref().map(|m| m.to_string()),
        ));
    }
    Ok(result
        .configs
        .iter()
        .find(|c| c.name.as_str() == key)
        .and_then(|c| c.value.as_ref())
        .map(|v| v.to_string()))
}

/// The `max.message.bytes` a DescribeConfigs answer gives, when it gives
/// a positive number.
fn parse_max_message_bytes(response: &DescribeConfigsResponse) -> Option<usize> {
    parse_describe_config(response, MAX_MESSAGE_BYTES)
        .ok()
        .flatten()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&bytes| bytes > 0)
}

/// A CreateTopics of `topic` as `spec` says, compacted whatever it says,
/// with [`CREATED_DEFAULTS`] where it says nothing of them.
fn build_create_topic(topic: &str, spec: &TopicSpec, timeout: Duration) -> CreateTopicsRequest {
    let mut configs = vec![("cleanup.policy".to_owned(), "compact".to_owned())];
    configs.extend(
        spec.configs
            .iter()
            .filter(|(k, _)| k != "cleanup.policy")
            .cloned(),
    );
    for (key, value) in CREATED_DEFAULTS {
        if !configs.iter().any(|(k, _)| k == key) {
            configs.push((key.to_owned(), value.to_owned()));
        }
    }
    CreateTopicsRequest::default()
        .with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX))
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_num_partitions(spec.partitions)
                .with_replication_factor(spec.replication_factor)
                .with_configs(
                    configs
                        .into_iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k))
                                .with_value(Some(StrBytes::from_string(v)))
                        })
                        .collect(),
                ),
        ])
}

/// Whether a CreateTopics answer leaves `topic` existing.
fn parse_create_topic(response: CreateTopicsResponse, topic: &str) -> Result<(), KafkaError> {
    let result = response
        .topics
        .into_iter()
        .next()
        .ok_or_else(|| topic_err(topic, "CreateTopics answered nothing"))?;
    match result.error_code {
        code if code == 0 || code == ResponseError::TopicAlreadyExists.code() => Ok(()),
        code => Err(KafkaError::broker(
            "CreateTopics",
            code,
            result.error_message.map(|m| m.to_string()),
        )),
    }
}

/// Topic administration (`KafkaClient::topics`): partitions, configs,
/// creation.
#[derive(Clone, Copy, Debug)]
pub struct Topics<'a> {
    pub(crate) client: &'a KafkaClient,
}

impl KafkaClient {
    /// Topic administration.
    pub fn topics(&self) -> Topics<'_> {
        Topics { client: self }
    }
}

impl Topics<'_> {
    /// The partition count of `topic` from fresh metadata; an error when the
    /// topic does not exist.
    pub async fn partition_count(&self, topic: &str) -> Result<i32, KafkaError> {
        self.client.state().learn(Lesson::TopicStale { topic });
        let meta = self.client.metadata().topic_metadata(topic).await?;
        match meta.error {
            0 if !meta.partitions.is_empty() => Ok(meta.partitions.len() as i32),
            code if code == 0 || code == ResponseError::UnknownTopicOrPartition.code() => {
                Err(topic_err(topic, "does not exist"))
            }
            code => Err(KafkaError::broker("Metadata", code, Some(topic.to_owned()))),
        }
    }

    /// One config value of `topic` (e.g. `min.compaction.lag.ms`), asked
    /// of any broker; `None` when the answer has none.
    pub async fn topic_config(&self, topic: &str, key: &str) -> Result<Option<String>, KafkaError> {
        retrying(self.client.config(), "describe configs", || async move {
            let request = build_describe_config(RESOURCE_TOPIC, topic, &[key]);
            let (response, _) = self.client.send_any(&request, &[]).await?;
            parse_describe_config(&response, key)
        })
        .await
    }

    /// Reads `topic`'s `min.insync.replicas` in a task of its own when it
    /// is due (never read, or a minute ago; `state::min_isr`): how many of
    /// a leader's replicas must confirm it (`describe::quorum`,
    /// `state::epochs`). Nothing on a cluster known to be one broker,
    /// which confirms nothing. A value below 2 is warned of once: every
    /// replica must confirm then, and one replica's acks commit a write.
    pub(crate) fn read_min_isr(&self, topic: &str) {
        let state = self.client.state();
        if state.metadata().single_broker() || !state.min_isrs().due(topic, Instant::now()) {
            return;
        }
        let (client, topic) = (self.client.clone(), topic.to_owned());
        tokio::spawn(async move {
            let read = client
                .topics()
                .topic_config_once(&topic, MIN_INSYNC_REPLICAS)
                .await;
            let value = match read {
                Ok(value) => value.and_then(|v| v.trim().parse::<i32>().ok()),
                Err(error) => {
                    let first = client.state().min_isrs().failed(&topic, Instant::now());
                    if first && !error.is(ResponseError::UnknownTopicOrPartition) {
                        tracing::warn!(topic, %error, "cannot read the topic's {MIN_INSYNC_REPLICAS}: every replica of a leader must confirm it until it is read (grant DESCRIBE_CONFIGS on the topic); asking again every few seconds");
                    } else {
                        tracing::debug!(topic, %error, "cannot read the topic's {MIN_INSYNC_REPLICAS}");
                    }
                    return;
                }
            };
            match client.state().min_isrs().read(&topic, value) {
                Some((low, true)) => tracing::warn!(
                    topic,
                    min_isr = low,
                    "the topic has {MIN_INSYNC_REPLICAS}={low}: one replica's acks commit a write, so every replica must confirm its leader and a check or a view answers 503 while one is unreachable (set it to 2; for __transaction_state, transaction.state.log.min.isr; docs/operations.md)"
                ),
                Some((min_isr, false)) => tracing::info!(
                    topic,
                    min_isr,
                    "the topic's {MIN_INSYNC_REPLICAS}: its replication factor less this many replicas besides a leader confirm it"
                ),
                None => {}
            }
        });
    }

    /// One config value of `topic`, asked of any broker once, without a
    /// retry: for a reading that is taken again later anyway.
    pub(crate) async fn topic_config_once(
        &self,
        topic: &str,
        key: &str,
    ) -> Result<Option<String>, KafkaError> {
        let request = build_describe_config(RESOURCE_TOPIC, topic, &[key]);
        let (response, _) = self.client.send_any(&request, &[]).await?;
        parse_describe_config(&response, key)
    }

    /// The topic's `cleanup.policy`, asked of any broker; its
    /// `max.message.bytes` comes with it and is remembered, and its
    /// compaction configs are warned of when unsafe.
    pub async fn cleanup_policy(&self, topic: &str) -> Result<String, KafkaError> {
        retrying(self.client.config(), "describe configs", || async move {
            let [(lag, _), (timestamps, _)] = CREATED_DEFAULTS;
            let keys = ["cleanup.policy", MAX_MESSAGE_BYTES, lag, timestamps];
            let request = build_describe_config(RESOURCE_TOPIC, topic, &keys);
            let (response, _) = self.client.send_any(&request, &[]).await?;
            if response.results.is_empty() {
                return Err(topic_err(topic, "DescribeConfigs answered nothing"));
            }
            let policy = parse_describe_config(&response, "cleanup.policy")?;
            if let Some(bytes) = parse_max_message_bytes(&response) {
                self.remember_max_message_bytes(topic, bytes);
            }
            let lag = parse_describe_config(&response, lag)?;
            let timestamps = parse_describe_config(&response, timestamps)?;
            for warning in compaction_warnings(lag.as_deref(), timestamps.as_deref()) {
                tracing::warn!(topic, "the coordination topic has {warning}");
            }
            Ok(policy.unwrap_or_else(|| "delete".to_owned()))
        })
        .await
    }

    /// The topic's `max.message.bytes`, from one DescribeConfigs (no
    /// retry: a read waits for it), remembered; `None` when the answer
    /// has none.
    pub async fn max_message_bytes(&self, topic: &str) -> Result<Option<usize>, KafkaError> {
        let request = build_describe_config(RESOURCE_TOPIC, topic, &[MAX_MESSAGE_BYTES]);
        let (response, _) = self.client.send_any(&request, &[]).await?;
        parse_describe_config(&response, MAX_MESSAGE_BYTES)?;
        let bytes = parse_max_message_bytes(&response);
        if let Some(bytes) = bytes {
            self.remember_max_message_bytes(topic, bytes);
        }
        Ok(bytes)
    }

    fn remember_max_message_bytes(&self, topic: &str, bytes: usize) {
        if self.client.config().max_decompressed_batch_bytes.is_none()
            && self.client.remember_batch_limit(topic, bytes)
        {
            tracing::info!(
                topic,
                max_message_bytes = bytes,
                "the topic's batches are read decompressed up to its max.message.bytes; a compressed batch that decompresses to more is skipped"
            );
        }
    }

    /// One broker-level config value (e.g. `transaction.max.timeout.ms`).
    /// A broker's own config is asked of that broker: the least loaded one
    /// that is up, and another one when it fails.
    pub async fn broker_config(&self, key: &str) -> Result<Option<String>, KafkaError> {
        if self.client.metadata().brokers().is_empty() {
            self.client.metadata().refresh_metadata(&[]).await?;
        }
        retrying(
            self.client.config(),
            "describe broker config",
            || async move {
                let brokers = self.client.metadata().brokers();
                let (id, addr) = self
                    .client
                    .brokers_by_load(&[])
                    .into_iter()
                    .find_map(|addr| {
                        let id = brokers.iter().find(|(_, a)| **a == addr)?.0;
                        Some((*id, addr))
                    })
                    .ok_or_else(|| KafkaError::Connect {
                        addr: "the cluster".into(),
                        reason: "no broker known".into(),
                    })?;
                let request = build_describe_config(RESOURCE_BROKER, &id.to_string(), &[key]);
                let response = self.client.send_to(&addr, &request).await?;
                parse_describe_config(&response, key)
            },
        )
        .await
    }

    /// Refuses a topic whose cleanup policy would delete records: retention
    /// would forget registrations and leases, and with them the join order.
    pub async fn check_compacted(&self, topic: &str) -> Result<(), KafkaError> {
        let policy = match self.cleanup_policy(topic).await {
            Ok(policy) => policy,
            // A reader with least privilege (Read and Describe on the topic)
            // may not DescribeConfigs; it cannot check, and need not refuse.
            Err(e)
                if e.is(ResponseError::TopicAuthorizationFailed)
                    || e.is(ResponseError::ClusterAuthorizationFailed) =>
            {
                tracing::warn!(topic, error = %e, "cannot read the topic's cleanup.policy (no DescribeConfigs permission); assuming compact");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let parts: Vec<&str> = policy.split(',').map(str::trim).collect();
        if parts.contains(&"compact") && !parts.contains(&"delete") {
            Ok(())
        } else {
            Err(topic_err(
                topic,
                format!(
                    "has cleanup.policy={policy}; it must be compact (set cleanup.policy=compact)"
                ),
            ))
        }
    }

    /// Creates `topic` compacted when it is missing, then checks that it is
    /// compacted and returns its partition count.
    pub async fn ensure_topic(&self, topic: &str, spec: &TopicSpec) -> Result<i32, KafkaError> {
        match self.partition_count(topic).await {
            Ok(_) => {}
            Err(KafkaError::Topic { .. }) => self.create_topic(topic, spec).await?,
            Err(e) => return Err(e),
        }
        self.check_compacted(topic).await?;
        // A new topic's metadata shows up a moment after creation.
        retrying(self.client.config(), "topic metadata", || async move {
            match self.partition_count(topic).await {
                Err(KafkaError::Topic { .. }) => Err(KafkaError::Broker {
                    api: "Metadata",
                    error: ResponseError::UnknownTopicOrPartition,
                    message: None,
                }),
                other => other,
            }
        })
        .await
    }

    async fn create_topic(&self, topic: &str, spec: &TopicSpec) -> Result<(), KafkaError> {
        let request = build_create_topic(topic, spec, self.client.config().request_timeout);
        retrying(self.client.config(), "create topic", || async {
            let (response, _) = self.client.send_any(&request, &[]).await?;
            parse_create_topic(response, topic)
        })
        .await?;
        tracing::info!(
            topic,
            partitions = spec.partitions,
            "created the coordination topic"
        );
        self.client.state().learn(Lesson::TopicStale { topic });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_configs_response::{
        DescribeConfigsResourceResult, DescribeConfigsResult,
    };

    use super::*;

    #[test]
    fn a_created_topic_is_compacted_whatever_the_spec_says() {
        let spec = TopicSpec {
            partitions: 4,
            replication_factor: 3,
            configs: vec![
                ("cleanup.policy".into(), "delete".into()),
                ("min.insync.replicas".into(), "2".into()),
            ],
        };
        let request = build_create_topic("t", &spec, Duration::from_secs(5));
        let topic = &request.topics[0];
        assert_eq!((topic.num_partitions, topic.replication_factor), (4, 3));
        let configs: Vec<(&str, &str)> = topic
            .configs
            .iter()
            .map(|c| (c.name.as_str(), c.value.as_ref().unwrap().as_str()))
            .collect();
        assert_eq!(
            configs,
            [
                ("cleanup.policy", "compact"),
                ("min.insync.replicas", "2"),
                ("min.compaction.lag.ms", "3600000"),
                ("message.timestamp.type", "LogAppendTime")
            ]
        );
        // A lag the spec sets is kept.
        let spec = TopicSpec {
            configs: vec![("min.compaction.lag.ms".into(), "60000".into())],
            ..TopicSpec::default()
        };
        let request = build_create_topic("t", &spec, Duration::from_secs(5));
        let lags: Vec<&str> = request.topics[0]
            .configs
            .iter()
            .filter(|c| c.name.as_str() == "min.compaction.lag.ms")
            .map(|c| c.value.as_ref().unwrap().as_str())
            .collect();
        assert_eq!(lags, ["60000"]);
    }

    #[test]
    fn a_topic_is_warned_of_a_short_compaction_lag_and_producer_stamped_times() {
        assert!(compaction_warnings(Some("3600000"), Some("LogAppendTime")).is_empty());
        assert!(compaction_warnings(None, None).is_empty(), "not given");
        let [lag, stamps] = [
            compaction_warnings(Some("0"), Some("LogAppendTime")),
            compaction_warnings(Some("600000"), Some("CreateTime")),
        ];
        assert!(
            lag.len() == 1 && lag[0].starts_with("min.compaction.lag.ms=0"),
            "{lag:?}"
        );
        assert!(
            stamps.len() == 1 && stamps[0].starts_with("message.timestamp.type=CreateTime"),
            "{stamps:?}"
        );
        assert_eq!(
            compaction_warnings(Some("599999"), Some("CreateTime")).len(),
            2
        );
    }

    #[test]
    fn a_config_answer_gives_the_value_none_or_the_error() {
        let answer = |code: i16, value: Option<&'static str>| {
            DescribeConfigsResponse::default().with_results(vec![
                DescribeConfigsResult::default()
                    .with_error_code(code)
                    .with_configs(vec![
                        DescribeConfigsResourceResult::default()
                            .with_name(StrBytes::from_static_str("cleanup.policy"))
                            .with_value(value.map(StrBytes::from_static_str)),
                    ]),
            ])
        };
        let policy = parse_describe_config(&answer(0, Some("compact")), "cleanup.policy");
        assert_eq!(policy, Ok(Some("compact".to_owned())));
        assert_eq!(
            parse_describe_config(&answer(0, None), "cleanup.policy"),
            Ok(None)
        );
        assert_eq!(
            parse_describe_config(&answer(0, Some("x")), "other"),
            Ok(None)
        );
        let denied = parse_describe_config(&answer(29, None), "cleanup.policy");
        assert_eq!(denied.unwrap_err().code(), Some(29));
    }
}
