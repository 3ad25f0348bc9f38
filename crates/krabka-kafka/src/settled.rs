//! As of which instant a tailed partition's read holds every write: what an
//! open transaction that holds the last stable offset back withholds.
//!
//! A read_committed read stops at the last stable offset (LSO): the first
//! offset of the oldest open transaction. Everything committed after that
//! offset stays unread until the transaction ends, even the transactions of
//! other producers that committed long ago. A transaction that hangs (its
//! producer died mid-way and its coordinator has not aborted it yet; one
//! whose coordinator was cut off from the controller) so freezes the view of
//! every role of the partition while the reader keeps reaching "the end":
//! a read that stops at the LSO is not complete as of its send instant.
//!
//! The high watermark tells how far the log reached: every write
//! acknowledged before a fetch was sent lies below the high watermark its
//! answer reports. So a read is complete as of the send instant of the
//! latest answer whose high watermark the reader has since read up to; with
//! no transaction open that is the answer itself, and behind a hanging one
//! the instant stays where the transaction began.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// At most this many answers wait for the reader to reach their high
/// watermark; beyond it the oldest two are merged (conservatively: the
/// older instant with the higher watermark).
const MAX_WAITING: usize = 64;

/// The answers of one partition whose high watermark is not read yet.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// (send instant, high watermark), oldest first.
    waiting: VecDeque<(Instant, i64)>,
    /// The latest send instant whose high watermark was read up to.
    complete: Option<Instant>,
}

impl Settled {
    /// Takes in an answer sent at `sent` (already bounded by its leader's
    /// confirmation) reporting `high_watermark`, after which the reader's
    /// next offset is `read_to`; returns the instant the read is complete
    /// as of, if any yet.
    pub(crate) fn answer(
        &mut self,
        sent: Instant,
        high_watermark: i64,
        read_to: i64,
    ) -> Option<Instant> {
        self.waiting.push_back((sent, high_watermark));
        if let Some(latest) = self
            .waiting
            .iter()
            .filter(|(_, hw)| *hw <= read_to)
            .map(|(at, _)| *at)
            .max()
        {
            self.complete = self.complete.max(Some(latest));
            self.waiting.retain(|(at, _)| *at > latest);
        }
        if self.waiting.len() > MAX_WAITING
            && let (Some((at, a)), Some((_, b))) =
                (self.waiting.pop_front(), self.waiting.pop_front())
        {
            self.waiting.push_front((at, a.max(b)));
        }
        self.complete
    }

    /// How long the oldest unread high watermark has been waiting at `now`:
    /// how long an open transaction has held the partition's reads back.
    pub(crate) fn held_back(&self, now: Instant) -> Option<Duration> {
        self.waiting
            .front()
            .map(|(at, _)| now.saturating_duration_since(*at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_read_is_complete_as_of_the_latest_answer_whose_high_watermark_it_reached() {
        let mut s = Settled::default();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // Nothing open: each answer is complete as of its own send instant.
        assert_eq!(s.answer(at(0), 10, 10), Some(at(0)));
        assert_eq!(s.answer(at(100), 12, 12), Some(at(100)));
        // A transaction opens at 12: the LSO stays there while writes go on.
        assert_eq!(s.answer(at(200), 15, 12), Some(at(100)));
        assert_eq!(s.answer(at(300), 19, 12), Some(at(100)));
        assert_eq!(s.held_back(at(1_300)), Some(Duration::from_millis(1_100)));
        // It commits; the reader reaches 17: the answer at 200 (hw 15) is
        // read, the one at 300 (hw 19) not yet.
        assert_eq!(s.answer(at(400), 19, 17), Some(at(200)));
        assert_eq!(s.answer(at(500), 19, 19), Some(at(500)));
        assert_eq!(s.held_back(at(600)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_transaction_keeps_the_instant_where_it_began_however_many_answers_wait() {
        let mut s = Settled::default();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(s.answer(at(0), 5, 5), Some(at(0)));
        for i in 1..1_000 {
            assert_eq!(s.answer(at(i * 10), 5 + i as i64, 5), Some(at(0)));
        }
        assert!(s.waiting.len() <= MAX_WAITING);
        // Merging kept the oldest instant and the highest watermark: reading
        // up to it settles everything at once.
        assert_eq!(
            s.held_back(at(10_000)),
            Some(Duration::from_millis(10_000 - 10))
        );
        assert_eq!(s.answer(at(10_000), 1_004, 1_004), Some(at(10_000)));
        // A first answer behind an open transaction is complete as of nothing.
        let mut s = Settled::default();
        assert_eq!(s.answer(at(0), 9, 4), None);
    }
}
