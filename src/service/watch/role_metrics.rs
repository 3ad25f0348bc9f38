//! Per-role metric series: who holds each role, its coordinator pair, epoch
//! changes, failovers, lease deadline, candidates and status. The number of
//! roles with series is capped (the rest are counted as omitted), and a
//! role's series are removed when the role disappears from the topic.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use prometheus::{
    GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

use super::status::RoleStatus;
use crate::coordination::FencingToken;
use crate::sync::lock;

/// Most omitted role names remembered (to count each once).
const MAX_OMITTED_KEPT: usize = 100_000;

/// The per-role series and the watcher's own gauges.
#[derive(Debug)]
pub struct RoleMetrics {
    holder: IntGaugeVec,
    producer_id: IntGaugeVec,
    producer_epoch: IntGaugeVec,
    epoch_changes: IntCounterVec,
    failovers: IntCounterVec,
    deadline: IntGaugeVec,
    expired: IntGaugeVec,
    candidates: IntGaugeVec,
    status: IntGaugeVec,
    /// Seconds a role went without a holder, from the lapse (deadline or
    /// clear) to the next lease; all roles together.
    pub leaderless_seconds: Histogram,
    /// Records behind the last stable offset, per partition.
    pub lag: IntGaugeVec,
    /// The age of each partition's views, set when scraped.
    pub view_age: GaugeVec,
    /// Roles known to the watcher.
    pub roles: IntGauge,
    omitted: IntCounter,
    max_roles: usize,
    exported: Mutex<Exported>,
}

#[derive(Debug, Default)]
struct Exported {
    /// Roles with series, and the holder label each carries.
    roles: HashMap<String, Option<String>>,
    omitted: HashSet<String>,
}

fn gauge(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, prometheus::Error> {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

impl RoleMetrics {
    /// Registers the series in `registry`; at most `max_roles` roles get series.
    pub fn new(registry: &Registry, max_roles: usize) -> Result<RoleMetrics, prometheus::Error> {
        let leaderless_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "krabka_role_leaderless_seconds",
                "Time a role went without a holder: from the lapse of its lease (deadline passed or cleared) to the next lease.",
            )
            .buckets(vec![0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0]),
        )?;
        registry.register(Box::new(leaderless_seconds.clone()))?;
        let roles = IntGauge::new(
            "krabka_roles",
            "Roles with records in the coordination topic.",
        )?;
        registry.register(Box::new(roles.clone()))?;
        let omitted = IntCounter::new(
            "krabka_role_series_omitted_total",
            "Roles left without per-role series because of the series limit.",
        )?;
        registry.register(Box::new(omitted.clone()))?;
        Ok(RoleMetrics {
            holder: gauge(
                registry,
                "krabka_role_holder_info",
                "1 for the member holding the role's lease.",
                &["role", "member"],
            )?,
            producer_id: gauge(
                registry,
                "krabka_role_producer_id",
                "The coordinator's current producer id of the role.",
                &["role"],
            )?,
            producer_epoch: gauge(
                registry,
                "krabka_role_producer_epoch",
                "The coordinator's current producer epoch of the role.",
                &["role"],
            )?,
            epoch_changes: counter(
                registry,
                "krabka_role_epoch_changes_total",
                "Changes of the role's (producer id, epoch): between coordinator polls or by a lease under a new token.",
                &["role"],
            )?,
            failovers: counter(
                registry,
                "krabka_role_failovers_total",
                "Changes of the lease holder's member between consecutive lease records.",
                &["role"],
            )?,
            deadline: gauge(
                registry,
                "krabka_role_lease_deadline_timestamp_seconds",
                "The lease deadline of the role, Unix seconds.",
                &["role"],
            )?,
            expired: gauge(
                registry,
                "krabka_role_lease_expired",
                "1 when the role's lease deadline has passed by the service clock.",
                &["role"],
            )?,
            candidates: gauge(
                registry,
                "krabka_role_candidates",
                "Registered members of the role.",
                &["role"],
            )?,
            status: gauge(
                registry,
                "krabka_role_status",
                "1 for the role's current status (stable, flapping, leaderless, stuck, vacant).",
                &["role", "status"],
            )?,
            leaderless_seconds,
            lag: gauge(
                registry,
                "krabka_state_lag_records",
                "Committed records of the partition not yet applied by the watcher.",
                &["partition"],
            )?,
            view_age: {
                let g = GaugeVec::new(
                    Opts::new(
                        "krabka_state_view_age_seconds",
                        "How old the partition's roster views are: since the instant its log is known to have held nothing more (its last read, as far as another broker confirmed its leader and no open transaction held the last stable offset back). The x-krabka-view-age-ms of its views.",
                    ),
                    &["partition"],
                )?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            roles,
            omitted,
            max_roles,
            exported: Mutex::default(),
        })
    }

    fn exported(&self) -> std::sync::MutexGuard<'_, Exported> {
        lock(&self.exported)
    }

    /// True when `role` has (or now gets) series; false past the limit.
    fn admit(&self, role: &str) -> bool {
        let mut exported = self.exported();
        if exported.roles.contains_key(role) {
            return true;
        }
        if exported.roles.len() < self.max_roles {
            exported.roles.insert(role.to_owned(), None);
            return true;
        }
        // The set only tells whether a role was counted already; past its
        // own bound a role may be counted twice, never kept unboundedly.
        if exported.omitted.len() < MAX_OMITTED_KEPT && exported.omitted.insert(role.to_owned()) {
            self.omitted.inc();
        }
        false
    }

    /// Sets the holder label of `role` (`None`: no lease).
    pub fn holder(&self, role: &str, member: Option<&str>) {
        if !self.admit(role) {
            return;
        }
        let mut exported = self.exported();
        let slot = exported.roles.entry(role.to_owned()).or_default();
        if slot.as_deref() == member {
            return;
        }
        if let Some(old) = slot.take() {
            let _ = self.holder.remove_label_values(&[role, &old]);
        }
        if let Some(member) = member {
            self.holder.with_label_values(&[role, member]).set(1);
            *slot = Some(member.to_owned());
        }
    }

    /// Records the coordinator's current pair.
    pub fn pair(&self, role: &str, token: Option<FencingToken>) {
        if !self.admit(role) {
            return;
        }
        let (id, epoch) = token.map_or((-1, -1), |t| {
            (t.producer_id(), i64::from(t.producer_epoch()))
        });
        self.producer_id.with_label_values(&[role]).set(id);
        self.producer_epoch.with_label_values(&[role]).set(epoch);
    }

    /// Counts one epoch change.
    pub fn epoch_change(&self, role: &str) {
        if self.admit(role) {
            self.epoch_changes.with_label_values(&[role]).inc();
        }
    }

    /// Counts one failover.
    pub fn failover(&self, role: &str) {
        if self.admit(role) {
            self.failovers.with_label_values(&[role]).inc();
        }
    }

    /// The lease deadline (`None`: no lease) and whether it has passed.
    pub fn lease(&self, role: &str, deadline_ms: Option<i64>, now_ms: i64) {
        if !self.admit(role) {
            return;
        }
        match deadline_ms {
            Some(deadline) => {
                self.deadline
                    .with_label_values(&[role])
                    .set(deadline.div_euclid(1000));
                self.expired
                    .with_label_values(&[role])
                    .set(i64::from(now_ms >= deadline));
            }
            None => {
                let _ = self.deadline.remove_label_values(&[role]);
                let _ = self.expired.remove_label_values(&[role]);
            }
        }
    }

    /// Registered members of `role`.
    pub fn candidates(&self, role: &str, n: usize) {
        if self.admit(role) {
            self.candidates.with_label_values(&[role]).set(n as i64);
        }
    }

    /// The role's status: 1 on its label, the others removed.
    pub fn status(&self, role: &str, status: RoleStatus) {
        if !self.admit(role) {
            return;
        }
        for s in RoleStatus::ALL {
            if s == status {
                self.status.with_label_values(&[role, s.as_str()]).set(1);
            } else {
                let _ = self.status.remove_label_values(&[role, s.as_str()]);
            }
        }
    }

    /// Creates the counters of a new role at 0, so that `increase()` sees
    /// its first epoch change or failover (a series born at 1 looks like no
    /// increase).
    pub fn added(&self, role: &str) {
        if self.admit(role) {
            self.epoch_changes.with_label_values(&[role]);
            self.failovers.with_label_values(&[role]);
        }
    }

    /// Drops every series of a role that left the topic.
    pub fn remove(&self, role: &str) {
        let holder = {
            let mut exported = self.exported();
            exported.omitted.remove(role);
            match exported.roles.remove(role) {
                Some(holder) => holder,
                None => return,
            }
        };
        if let Some(member) = holder {
            let _ = self.holder.remove_label_values(&[role, &member]);
        }
        for vec in [
            &self.producer_id,
            &self.producer_epoch,
            &self.deadline,
            &self.expired,
            &self.candidates,
        ] {
            let _ = vec.remove_label_values(&[role]);
        }
        for vec in [&self.epoch_changes, &self.failovers] {
            let _ = vec.remove_label_values(&[role]);
        }
        for s in RoleStatus::ALL {
            let _ = self.status.remove_label_values(&[role, s.as_str()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, TextEncoder};

    fn text(registry: &Registry) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn series_are_capped_counted_and_removed() {
        let registry = Registry::new();
        let m = RoleMetrics::new(&registry, 2).unwrap();
        m.holder("a", Some("m1"));
        m.holder("b", Some("m2"));
        m.holder("c", Some("m3"));
        m.failover("c");
        let out = text(&registry);
        assert!(
            out.contains("krabka_role_holder_info{member=\"m1\",role=\"a\"} 1"),
            "{out}"
        );
        assert!(!out.contains("role=\"c\""), "{out}");
        assert!(out.contains("krabka_role_series_omitted_total 1"), "{out}");

        m.holder("a", Some("m9"));
        let out = text(&registry);
        assert!(
            !out.contains("member=\"m1\""),
            "the old holder's series is gone: {out}"
        );
        assert!(out.contains("krabka_role_holder_info{member=\"m9\",role=\"a\"} 1"));

        m.status("a", RoleStatus::Stuck);
        m.status("a", RoleStatus::Stable);
        let out = text(&registry);
        assert!(out.contains("krabka_role_status{role=\"a\",status=\"stable\"} 1"));
        assert!(!out.contains("status=\"stuck\""));

        m.remove("a");
        m.holder("c", Some("m3"));
        let out = text(&registry);
        assert!(!out.contains("role=\"a\""), "{out}");
        assert!(
            out.contains("role=\"c\""),
            "a freed slot goes to the next role: {out}"
        );
    }
}
