//! Which broker process answered a describe: the partitions of
//! `__transaction_state` the process on the describe's connection names
//! itself leader of, with their leader epochs, as it says in a Metadata
//! answer on that same connection (`Connection::leads`).
//!
//! A node id names a registration, not a process. A broker cut off from
//! the controller is fenced but goes on answering from memory, and a new
//! process may register with its node id meanwhile (a replaced host, a
//! force-deleted pod): the controller lets it once the old one's session
//! expired (`ClusterControlManager.registerBroker`), and it leads the old
//! one's partitions after an election. A client's connection made before
//! the move still leads to the old process (a TCP connection reaches one
//! process for as long as it lives), so another broker naming "node N"
//! the coordinator says nothing of which process answered. What the old
//! process cannot share with the new one is a leader epoch: every change
//! of a partition's leader bumps it (`PartitionChangeBuilder`), the old
//! incarnation is fenced (its leaderships taken, at a new epoch) before
//! the new one registers, and the new one leads only after an election
//! of its own, at a newer epoch still. So a process that names itself
//! leader of the id's partition at the epoch the confirming broker names
//! is the process the controller made leader at that epoch, whenever it
//! said so: its own image of the metadata only grows, and a broker serves
//! requests only once it has caught up with the metadata log at start-up.
//!
//! The first describe on a connection asks the process at once (in
//! parallel with the describe; concurrent describes wait for that one
//! answer). A confirmation naming an epoch the process has not named asks
//! it again on the same connection (a broker that took the partition after
//! it last said what it leads says so now) and is judged again; if the
//! process still does not name that epoch, the answer is not confirmed and
//! the connections to the broker's address are given up (`state::nodes`):
//! the next describe opens a new one, which a replacement behind the
//! address answers, and asks again.

use krabka_coordination::time::boot_now;

use super::Describer;
use super::wire::build_leaders_request;
use crate::connection::{Connection, Leads};
use crate::error::ResponseError;
use crate::metadata::{TRANSACTION_STATE, parse_metadata};
use crate::state::{Lesson, MetadataAnswer};

/// What `answer`, given on a connection to `addr`, says its broker leads:
/// the partitions of `__transaction_state` whose leader is the node the
/// answer lists at `addr`, with their epochs. Empty when it lists no node
/// there.
pub(super) fn leads_of(answer: &MetadataAnswer, addr: &str) -> Leads {
    let Some(node) = answer
        .brokers
        .iter()
        .find_map(|(id, a)| (a == addr).then_some(*id))
    else {
        return Leads::new();
    };
    answer
        .topics
        .iter()
        .filter(|(name, _)| name == TRANSACTION_STATE)
        .flat_map(|(_, topic)| &topic.partitions)
        .filter(|p| p.leader == node && p.error == 0 && p.leader_epoch >= 0)
        .map(|p| (p.index, p.leader_epoch))
        .collect()
}

impl Describer<'_> {
    /// Whether a describe on `conn` must ask what its process leads first:
    /// it never said, and the answers will need a confirmation that names
    /// an epoch.
    pub(super) fn needs_leads(&self, conn: &Connection) -> bool {
        conn.leads().1.is_none() && !self.client.state().confirms().by_find_coordinator()
    }

    /// Asks the process on `conn` what it leads, and keeps the answer on
    /// the connection, unless an answer later than the `seen`-th came
    /// meanwhile. The answer is a Metadata answer like any other: judged
    /// against the other brokers' (a replaced process is behind them), and
    /// taken in when current. One request per connection at a time: a
    /// caller that finds one in flight waits for its answer.
    pub(super) async fn ask_leads(&self, conn: &Connection, seen: u64) {
        let _turn = conn.asking_leads().await;
        if conn.leads().0 != seen {
            return;
        }
        let sent = boot_now();
        let response = self
            .client
            .call_on(
                conn,
                &build_leaders_request(),
                self.client.config().request_timeout,
            )
            .await;
        let response = match response {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(broker = conn.addr(), %error, "cannot ask a broker what it leads");
                return;
            }
        };
        let answer = parse_metadata(response);
        let refused = answer.topics.iter().any(|(name, topic)| {
            name == TRANSACTION_STATE
                && topic.error == ResponseError::TopicAuthorizationFailed.code()
        });
        if refused {
            tracing::warn!(
                "this client may not describe {TRANSACTION_STATE}: describes are confirmed with FindCoordinator, by node id alone, which cannot tell a broker from a replacement registered with its node id (grant DESCRIBE on {TRANSACTION_STATE})"
            );
            self.client.state().confirms().use_find_coordinator();
        }
        conn.set_leads(leads_of(&answer, conn.addr()));
        self.client.state().learn(Lesson::Metadata {
            answer,
            from: conn.addr(),
            sent,
            alone: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_leads_the_partitions_it_names_its_own_node_leader_of() {
        let mut answer = MetadataAnswer::of_t(
            "c",
            &[(1, "b:1"), (2, "b:2")],
            &[(0, 2, 7), (1, 1, 4), (2, 2, 9), (3, 2, -1)],
        );
        answer.topics[0].0 = TRANSACTION_STATE.to_owned();
        let leads = leads_of(&answer, "b:2");
        assert_eq!(leads, Leads::from([(0, 7), (2, 9)]));
        assert_eq!(leads_of(&answer, "b:1"), Leads::from([(1, 4)]));
        assert!(
            leads_of(&answer, "b:3").is_empty(),
            "no node at that address"
        );
        answer.topics[0].0 = "other".to_owned();
        assert!(leads_of(&answer, "b:2").is_empty(), "another topic");
    }
}
