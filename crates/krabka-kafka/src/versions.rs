//! The API versions this client speaks, and negotiation with a broker's
//! ApiVersions answer.
//!
//! The maximums are pinned on purpose: Produce ≤ 11, AddPartitionsToTxn ≤ 3
//! and EndTxn ≤ 4 keep transaction version 1 behaviour on a 4.x cluster
//! (no epoch bump per commit), so a holder's token stays put while it renews.

use std::collections::HashMap;

use kafka_protocol::messages::ApiKey;

use super::error::KafkaError;

/// `(api, our min, our max)` for every API the client sends.
pub(crate) const PINNED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 2, 8),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::FindCoordinator, 4, 6),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// The name Kafka uses for an API key, for errors, logs and metrics.
pub fn api_name(key: i16) -> &'static str {
    match ApiKey::try_from(key) {
        Ok(ApiKey::Produce) => "Produce",
        Ok(ApiKey::Fetch) => "Fetch",
        Ok(ApiKey::ListOffsets) => "ListOffsets",
        Ok(ApiKey::Metadata) => "Metadata",
        Ok(ApiKey::FindCoordinator) => "FindCoordinator",
        Ok(ApiKey::InitProducerId) => "InitProducerId",
        Ok(ApiKey::AddPartitionsToTxn) => "AddPartitionsToTxn",
        Ok(ApiKey::EndTxn) => "EndTxn",
        Ok(ApiKey::CreateTopics) => "CreateTopics",
        Ok(ApiKey::DescribeConfigs) => "DescribeConfigs",
        Ok(ApiKey::DescribeTransactions) => "DescribeTransactions",
        Ok(ApiKey::ApiVersions) => "ApiVersions",
        Ok(ApiKey::SaslHandshake) => "SaslHandshake",
        Ok(ApiKey::SaslAuthenticate) => "SaslAuthenticate",
        _ => "Other",
    }
}

/// The version of each API to use with one broker.
#[derive(Clone, Debug, Default)]
pub(crate) struct Versions {
    chosen: HashMap<i16, Result<i16, String>>,
}

impl Versions {
    /// Intersects our pinned ranges with the broker's `(key, min, max)` list.
    pub(crate) fn negotiate(broker: impl IntoIterator<Item = (i16, i16, i16)>) -> Versions {
        let theirs: HashMap<i16, (i16, i16)> = broker
            .into_iter()
            .map(|(k, min, max)| (k, (min, max)))
            .collect();
        let chosen = PINNED
            .iter()
            .map(|&(api, min, max)| {
                let key = api as i16;
                let pick = match theirs.get(&key) {
                    Some(&(bmin, bmax)) if bmin <= max && min <= bmax => Ok(max.min(bmax)),
                    Some(&(bmin, bmax)) => Err(format!("{bmin}..={bmax}")),
                    None => Err("none".to_owned()),
                };
                (key, pick)
            })
            .collect();
        Versions { chosen }
    }

    /// Every pinned API at its highest pinned version, for a broker that
    /// was not asked (tests against a scripted broker).
    #[cfg(test)]
    pub(crate) fn pinned_max() -> Versions {
        Versions::negotiate(PINNED.iter().map(|&(a, min, max)| (a as i16, min, max)))
    }

    /// The version to send `api` with, or why there is none.
    pub(crate) fn get(&self, api: ApiKey, addr: &str) -> Result<i16, KafkaError> {
        let key = api as i16;
        let unsupported = |theirs: String| {
            let ours = PINNED.iter().find(|(a, _, _)| *a == api).map_or_else(
                || "none".to_owned(),
                |(_, min, max)| format!("{min}..={max}"),
            );
            KafkaError::UnsupportedVersion {
                addr: addr.to_owned(),
                api: api_name(key),
                ours,
                theirs,
            }
        };
        match self.chosen.get(&key) {
            Some(Ok(v)) => Ok(*v),
            Some(Err(theirs)) => Err(unsupported(theirs.clone())),
            None => Err(unsupported("not negotiated".to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_highest_common_version_and_keeps_the_tv1_caps() {
        let v = Versions::negotiate([
            (ApiKey::Produce as i16, 3, 13),
            (ApiKey::EndTxn as i16, 0, 5),
            (ApiKey::AddPartitionsToTxn as i16, 0, 5),
            (ApiKey::Fetch as i16, 4, 17),
            (ApiKey::DescribeTransactions as i16, 0, 0),
        ]);
        assert_eq!(v.get(ApiKey::Produce, "b"), Ok(11));
        assert_eq!(v.get(ApiKey::EndTxn, "b"), Ok(4));
        assert_eq!(v.get(ApiKey::AddPartitionsToTxn, "b"), Ok(3));
        assert_eq!(v.get(ApiKey::Fetch, "b"), Ok(12));
        assert_eq!(v.get(ApiKey::DescribeTransactions, "b"), Ok(0));
    }

    #[test]
    fn disjoint_or_missing_ranges_are_errors_naming_both_sides() {
        let v = Versions::negotiate([(ApiKey::Produce as i16, 12, 13)]);
        let err = v.get(ApiKey::Produce, "b:1").unwrap_err();
        assert_eq!(
            err.to_string(),
            "b:1 does not support Produce versions 3..=11; it supports 12..=13"
        );
        let err = v.get(ApiKey::DescribeTransactions, "b:1").unwrap_err();
        assert!(err.to_string().ends_with("it supports none"), "{err}");
    }
}
