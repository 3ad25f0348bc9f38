//! The service's Prometheus metrics, in one registry it owns. Names follow
//! Prometheus conventions: base units, `_total` counters, `_seconds`.

use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::coordination::Verdict;
use crate::kafka::{Outcome, RequestObserver, StaleReason};

/// Every metric of the service.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// Authority checks by verdict (plus `invalid` for 400, `unavailable` for 503).
    pub checks: IntCounterVec,
    /// Time to answer one check, by verdict.
    pub check_duration: HistogramVec,
    /// Transactional ids per DescribeTransactions request.
    pub describe_batch_size: Histogram,
    /// Kafka requests by API and outcome.
    pub kafka_requests: IntCounterVec,
    /// Kafka request round trips by API.
    pub kafka_request_duration: HistogramVec,
    /// Checks answered from the superseded cache.
    pub superseded_cache_hits: IntCounter,
    /// Entries in the superseded cache.
    pub superseded_cache_entries: IntGauge,
    /// High-water marks of roles held.
    pub high_water_entries: IntGauge,
    /// Bytes of role names whose coordinator the client remembers.
    pub coordinator_cache_bytes: IntGauge,
    /// Bytes the superseded cache is accounted at (bounded by
    /// --superseded-cache-bytes).
    pub superseded_cache_bytes: IntGauge,
    /// Bytes the high-water marks are accounted at (bounded by
    /// --high-water-bytes).
    pub high_water_bytes: IntGauge,
    /// 1 while the coordination topic exists (or is not looked for yet), 0
    /// while Kafka says it does not.
    pub topic_exists: IntGauge,
    /// Coordinator answers not used, by reason.
    pub stale_answers: IntCounterVec,
    /// Changes of the cluster id behind the bootstrap servers.
    pub cluster_changes: IntCounter,
    /// Coordinator lookups (FindCoordinator, not confirmations).
    pub coordinator_lookups: IntCounter,
    /// Kafka requests sent, by broker and API.
    pub broker_requests: IntCounterVec,
    /// 1 while a broker's metadata is behind another broker's.
    pub broker_stale: IntGaugeVec,
    /// Confirmations of describes sent.
    pub confirmations: IntCounter,
    /// Records of the topic that did not decode, by part.
    pub malformed_records: IntCounterVec,
    /// Record batches of the topic skipped unread: they decompress past
    /// the bound.
    pub skipped_batches: IntCounter,
    /// Seconds until the client certificate of broker connections ends,
    /// by file (absent without one; negative once it ended).
    pub tls_client_certificate_expiry: IntGaugeVec,
    /// Changes of the TLS files, taken in or refused.
    pub tls_reloads: IntCounterVec,
    /// Tokens the API tokens file holds now (0 when emptied or unusable).
    pub api_tokens_accepted: IntGauge,
    /// 1 while the API tokens file cannot be read or is malformed: no
    /// token is accepted.
    pub api_tokens_file_unusable: IntGauge,
    /// Constant 1, labelled with the version.
    pub build_info: IntGaugeVec,
}

fn buckets_seconds() -> Vec<f64> {
    vec![
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ]
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let checks = IntCounterVec::new(
            Opts::new(
                "krabka_authority_checks_total",
                "Authority checks answered, by verdict (invalid = 400, unavailable = 503).",
            ),
            &["verdict"],
        )?;
        let check_duration = HistogramVec::new(
            HistogramOpts::new(
                "krabka_authority_check_duration_seconds",
                "Time to answer one authority check, by verdict.",
            )
            .buckets(buckets_seconds()),
            &["verdict"],
        )?;
        let describe_batch_size = Histogram::with_opts(
            HistogramOpts::new(
                "krabka_describe_batch_size",
                "Transactional ids per DescribeTransactions request.",
            )
            .buckets(vec![
                1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
            ]),
        )?;
        let kafka_requests = IntCounterVec::new(
            Opts::new(
                "krabka_kafka_requests_total",
                "Kafka requests sent, by API and outcome (ok, timeout, disconnected, error).",
            ),
            &["api", "outcome"],
        )?;
        let kafka_request_duration = HistogramVec::new(
            HistogramOpts::new(
                "krabka_kafka_request_duration_seconds",
                "Kafka request round trips, by API.",
            )
            .buckets(buckets_seconds()),
            &["api"],
        )?;
        let superseded_cache_hits = IntCounter::new(
            "krabka_superseded_cache_hits_total",
            "Checks answered superseded from the cache, without a Kafka request.",
        )?;
        let superseded_cache_entries = IntGauge::new(
            "krabka_superseded_cache_entries",
            "Superseded (role, token) pairs in the cache.",
        )?;
        let high_water_entries = IntGauge::new(
            "krabka_high_water_entries",
            "Roles with a high-water mark (the highest pair seen), bounded by --high-water-bytes.",
        )?;
        let coordinator_cache_bytes = IntGauge::new(
            "krabka_coordinator_cache_bytes",
            "Bytes of role names whose transaction coordinator is remembered, bounded by --coordinator-cache-bytes.",
        )?;
        let superseded_cache_bytes = IntGauge::new(
            "krabka_superseded_cache_bytes",
            "Bytes the superseded cache holds, as accounted against --superseded-cache-bytes (names, values and per-entry overhead).",
        )?;
        let high_water_bytes = IntGauge::new(
            "krabka_high_water_bytes",
            "Bytes the high-water marks hold, as accounted against --high-water-bytes (names, values and per-entry overhead).",
        )?;
        let topic_exists = IntGauge::new(
            "krabka_state_topic_exists",
            "0 while Kafka says the coordination topic does not exist (a fresh cluster: no role registered yet), else 1.",
        )?;
        topic_exists.set(1);
        let stale_answers = IntCounterVec::new(
            Opts::new(
                "krabka_stale_answers_total",
                "Coordinator answers not used because they could not be trusted to be current: another broker named a different coordinator (unconfirmed), or the pair was below one already seen (below_high_water).",
            ),
            &["reason"],
        )?;
        let cluster_changes = IntCounter::new(
            "krabka_cluster_changes_total",
            "Times the cluster id behind the bootstrap servers changed; caches were cleared.",
        )?;
        let confirmations = IntCounter::new(
            "krabka_describe_confirmations_total",
            "Confirmations sent: requests asking a broker other than the coordinators which broker coordinates the ids of the describe batches waiting (FindCoordinator, or Metadata of __transaction_state).",
        )?;
        let coordinator_lookups = IntCounter::new(
            "krabka_coordinator_lookups_total",
            "Coordinator lookups sent (one batched FindCoordinator each; the confirmations of describes are not counted).",
        )?;
        let broker_requests = IntCounterVec::new(
            Opts::new(
                "krabka_kafka_broker_requests_total",
                "Kafka requests sent on open connections, by broker address and API.",
            ),
            &["broker", "api"],
        )?;
        let broker_stale = IntGaugeVec::new(
            Opts::new(
                "krabka_kafka_broker_stale",
                "1 while a broker's metadata is behind another broker's (a lower leader epoch: cut off from the controller, or a deposed leader not yet caught up); such a broker is asked for nothing but probes. 0 once it caught up.",
            ),
            &["broker"],
        )?;
        let malformed_records = IntCounterVec::new(
            Opts::new(
                "krabka_state_malformed_records_total",
                "Records of the coordination topic that did not decode, by part.",
            ),
            &["part"],
        )?;
        let skipped_batches = IntCounter::new(
            "krabka_state_skipped_batches_total",
            "Record batches of the coordination topic skipped unread because they decompress to more than the bound (--kafka-max-decompressed-batch-bytes): counted at every read, a start's included.",
        )?;
        let tls_client_certificate_expiry = IntGaugeVec::new(
            Opts::new(
                "krabka_kafka_tls_client_certificate_expiry_seconds",
                "Seconds until the client certificate of broker connections (--kafka-tls-cert-file) ends; negative once it ended. Absent without a client certificate.",
            ),
            &["file"],
        )?;
        let tls_reloads = IntCounterVec::new(
            Opts::new(
                "krabka_kafka_tls_reloads_total",
                "Changes of the TLS files seen: taken in for new connections (outcome=taken), or refused, the previous material kept (outcome=refused).",
            ),
            &["outcome"],
        )?;
        let api_tokens_accepted = IntGauge::new(
            "krabka_api_tokens_accepted",
            "Bearer tokens the API tokens file (--api-tokens-file) holds now; 0 when it was emptied or is unusable. Absent without the file.",
        )?;
        let api_tokens_file_unusable = IntGauge::new(
            "krabka_api_tokens_file_unusable",
            "1 while the API tokens file cannot be read or holds a line no Authorization header can carry: no token is accepted, every protected request answers 401. Absent without the file.",
        )?;
        let build_info = IntGaugeVec::new(
            Opts::new("krabka_build_info", "Always 1; the version is a label."),
            &["version"],
        )?;
        for c in [
            Box::new(checks.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(check_duration.clone()),
            Box::new(describe_batch_size.clone()),
            Box::new(kafka_requests.clone()),
            Box::new(kafka_request_duration.clone()),
            Box::new(superseded_cache_hits.clone()),
            Box::new(superseded_cache_entries.clone()),
            Box::new(high_water_entries.clone()),
            Box::new(coordinator_cache_bytes.clone()),
            Box::new(superseded_cache_bytes.clone()),
            Box::new(high_water_bytes.clone()),
            Box::new(topic_exists.clone()),
            Box::new(stale_answers.clone()),
            Box::new(cluster_changes.clone()),
            Box::new(coordinator_lookups.clone()),
            Box::new(broker_requests.clone()),
            Box::new(broker_stale.clone()),
            Box::new(confirmations.clone()),
            Box::new(malformed_records.clone()),
            Box::new(skipped_batches.clone()),
            Box::new(tls_client_certificate_expiry.clone()),
            Box::new(tls_reloads.clone()),
            Box::new(build_info.clone()),
        ] {
            registry.register(c)?;
        }
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        for v in Verdict::ALL
            .iter()
            .map(Verdict::as_str)
            .chain(["invalid", "unavailable"])
        {
            checks.with_label_values(&[v]);
        }
        for reason in [StaleReason::Unconfirmed, StaleReason::BelowHighWater] {
            stale_answers.with_label_values(&[reason.as_str()]);
        }
        for part in ["key", "registration_value", "lease_value"] {
            malformed_records.with_label_values(&[part]);
        }
        Ok(Metrics {
            registry,
            checks,
            check_duration,
            describe_batch_size,
            kafka_requests,
            kafka_request_duration,
            superseded_cache_hits,
            superseded_cache_entries,
            high_water_entries,
            coordinator_cache_bytes,
            superseded_cache_bytes,
            high_water_bytes,
            topic_exists,
            stale_answers,
            cluster_changes,
            coordinator_lookups,
            broker_requests,
            broker_stale,
            confirmations,
            malformed_records,
            skipped_batches,
            tls_client_certificate_expiry,
            tls_reloads,
            api_tokens_accepted,
            api_tokens_file_unusable,
            build_info,
        })
    }

    /// The registry, for collectors added by other parts of the service.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts one answered check.
    pub fn check(&self, verdict: &str, elapsed: Duration) {
        self.checks.with_label_values(&[verdict]).inc();
        self.check_duration
            .with_label_values(&[verdict])
            .observe(elapsed.as_secs_f64());
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl RequestObserver for Metrics {
    fn observe(&self, api: &'static str, outcome: Outcome, elapsed: Duration) {
        self.kafka_requests
            .with_label_values(&[api, outcome.as_str()])
            .inc();
        self.kafka_request_duration
            .with_label_values(&[api])
            .observe(elapsed.as_secs_f64());
    }

    fn sent(&self, addr: &str, api: &'static str) {
        self.broker_requests.with_label_values(&[addr, api]).inc();
    }

    fn broker_stale(&self, addr: &str, stale: bool) {
        self.broker_stale
            .with_label_values(&[addr])
            .set(i64::from(stale));
    }

    fn describe_batch(&self, ids: usize) {
        self.describe_batch_size.observe(ids as f64);
    }

    fn stale_answer(&self, reason: StaleReason) {
        self.stale_answers
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    fn coordinator_lookup(&self, _keys: usize) {
        self.coordinator_lookups.inc();
    }

    fn confirmation(&self, _addr: &str, _ids: usize) {
        self.confirmations.inc();
    }

    fn cluster_changed(&self) {
        self.cluster_changes.inc();
    }
}
