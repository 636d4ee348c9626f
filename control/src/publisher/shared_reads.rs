//! Concurrent identical reads of the engine share one round trip
//! (docs/architecture.md, "Admin reads under load").
//!
//! Per key, at most one question is on the wire and at most one more waits
//! behind it. A reader that arrives while a question is on the wire never
//! joins it (that question was sent before the reader arrived, so its
//! answer could miss a change acknowledged just before): it joins the
//! waiting one, or starts it, and that one is sent once the answer on the
//! wire is in. Every answer a reader gets was therefore asked for after the
//! reader arrived, as a question of its own would have been; and however
//! many readers arrive at once, the engine answers at most two questions
//! for them.

use super::EngineRequestError;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// What the readers of one question get: nothing yet, then its outcome.
type Outcome<V> = Option<Result<V, EngineRequestError>>;

/// The question that waits behind the one on the wire: its readers, and
/// how long its answer may take once sent.
struct Waiting<V> {
    outcome: watch::Sender<Outcome<V>>,
    timeout: Duration,
}

/// The reads of one kind in progress, by key (present: a question is on the
/// wire for that key).
pub(super) struct SharedReads<K, V> {
    flights: Mutex<HashMap<K, Option<Waiting<V>>>>,
}

impl<K, V> Default for SharedReads<K, V> {
    fn default() -> Self {
        SharedReads {
            flights: Mutex::new(HashMap::new()),
        }
    }
}

impl<K, V> std::fmt::Debug for SharedReads<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReads").finish_non_exhaustive()
    }
}

impl<K, V> SharedReads<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// The answer to question `key`, asked with `ask` after this call began
    /// (shared with the readers that arrived before it was sent); waits at
    /// most `timeout` for it once it is sent. A question that waits behind
    /// one on the wire is sent within that one's `timeout`, so such a reader
    /// waits at most twice `timeout` in all: queueing behind a slow answer is
    /// not the engine failing to answer.
    pub(super) async fn read<A, F>(self: &Arc<Self>, key: K, timeout: Duration, ask: A) -> Result<V, EngineRequestError>
    where
        A: Fn(K, Duration) -> F + Send + 'static,
        F: Future<Output = Result<V, EngineRequestError>> + Send + 'static,
    {
        let (mut outcome, queued) = self.join(key, timeout, ask);
        let wait = if queued { timeout * 2 } else { timeout };
        let answered = tokio::time::timeout(wait, outcome.wait_for(Option::is_some)).await;
        match answered {
            Ok(Ok(outcome)) => outcome.clone().unwrap_or(Err(EngineRequestError::NoAnswer)),
            // The flight ended without an answer, or it came too late.
            Ok(Err(_)) | Err(_) => Err(EngineRequestError::NoAnswer),
        }
    }

    /// Joins the waiting question for `key`, or makes one: sent at once when
    /// none is on the wire, else once the answer on the wire is in (then
    /// `true`: queued behind it).
    fn join<A, F>(self: &Arc<Self>, key: K, timeout: Duration, ask: A) -> (watch::Receiver<Outcome<V>>, bool)
    where
        A: Fn(K, Duration) -> F + Send + 'static,
        F: Future<Output = Result<V, EngineRequestError>> + Send + 'static,
    {
        let mut flights = self.lock();
        match flights.entry(key) {
            Entry::Occupied(mut on_wire) => match on_wire.get_mut() {
                Some(waiting) => (waiting.outcome.subscribe(), true),
                none => {
                    let (outcome, receiver) = watch::channel(None);
                    *none = Some(Waiting { outcome, timeout });
                    (receiver, true)
                }
            },
            Entry::Vacant(idle) => {
                let key = idle.key().clone();
                idle.insert(None);
                let (outcome, receiver) = watch::channel(None);
                tokio::spawn(Arc::clone(self).fly(key, Waiting { outcome, timeout }, ask));
                (receiver, false)
            }
        }
    }

    /// Sends `first`, hands its readers the outcome, then sends each
    /// question that waited behind it, until none waits. A question whose
    /// readers all gave up is not sent.
    async fn fly<A, F>(self: Arc<Self>, key: K, first: Waiting<V>, ask: A)
    where
        A: Fn(K, Duration) -> F,
        F: Future<Output = Result<V, EngineRequestError>>,
    {
        let mut flight = first;
        loop {
            if !flight.outcome.is_closed() {
                let outcome = ask(key.clone(), flight.timeout).await;
                flight.outcome.send_replace(Some(outcome));
            }
            // Taken under the lock: whoever arrives from now on waits for
            // the next question, sent after it arrived.
            let mut flights = self.lock();
            match flights.get_mut(&key).and_then(Option::take) {
                Some(next) => flight = next,
                None => {
                    flights.remove(&key);
                    return;
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Option<Waiting<V>>>> {
        self.flights.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::sync::Notify;

    /// An engine whose answers are released by hand: each question gets the
    /// number of questions asked so far.
    #[derive(Default)]
    struct Gated {
        asked: AtomicU64,
        release: Notify,
    }

    fn asker(
        gated: &Arc<Gated>,
    ) -> impl Fn((), Duration) -> std::pin::Pin<Box<dyn Future<Output = Result<u64, EngineRequestError>> + Send>> {
        let gated = Arc::clone(gated);
        move |(), _| {
            let gated = Arc::clone(&gated);
            Box::pin(async move {
                let number = gated.asked.fetch_add(1, Ordering::SeqCst) + 1;
                gated.release.notified().await;
                Ok(number)
            })
        }
    }

    const WAIT: Duration = Duration::from_secs(5);

    /// Shared reads with a first reader whose question is on the wire,
    /// unanswered until released.
    async fn one_on_the_wire() -> (
        Arc<SharedReads<(), u64>>,
        Arc<Gated>,
        tokio::task::JoinHandle<Result<u64, EngineRequestError>>,
    ) {
        let reads = Arc::new(SharedReads::<(), u64>::default());
        let gated = Arc::new(Gated::default());
        let first = tokio::spawn({
            let (reads, ask) = (Arc::clone(&reads), asker(&gated));
            async move { reads.read((), WAIT, ask).await }
        });
        while gated.asked.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        (reads, gated, first)
    }

    #[tokio::test]
    async fn readers_arriving_while_a_question_is_on_the_wire_share_the_next_one() {
        let (reads, gated, first) = one_on_the_wire().await;
        let later: Vec<_> = (0..50)
            .map(|_| {
                let (reads, ask) = (Arc::clone(&reads), asker(&gated));
                tokio::spawn(async move { reads.read((), WAIT, ask).await })
            })
            .collect();
        // All of them are waiting behind the first question before it is answered.
        while reads
            .lock()
            .get(&())
            .is_none_or(|waiting| waiting.as_ref().is_none_or(|w| w.outcome.receiver_count() < 50))
        {
            tokio::task::yield_now().await;
        }
        gated.release.notify_one();
        assert_eq!(first.await.unwrap(), Ok(1));
        while gated.asked.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        gated.release.notify_one();
        for reader in later {
            assert_eq!(
                reader.await.unwrap(),
                Ok(2),
                "answered by the question sent after it arrived"
            );
        }
        assert_eq!(gated.asked.load(Ordering::SeqCst), 2);
        assert!(reads.lock().is_empty());
    }

    #[tokio::test]
    async fn a_reader_that_gives_up_gets_no_answer_and_costs_no_question() {
        let (reads, gated, first) = one_on_the_wire().await;
        let impatient = reads.read((), Duration::from_millis(20), asker(&gated)).await;
        assert_eq!(impatient, Err(EngineRequestError::NoAnswer));
        gated.release.notify_one();
        assert_eq!(first.await.unwrap(), Ok(1));
        while !reads.lock().is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            gated.asked.load(Ordering::SeqCst),
            1,
            "nobody waited for the second question"
        );
    }
}
