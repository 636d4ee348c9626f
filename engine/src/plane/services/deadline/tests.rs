use super::{sleep, until, within, Elapsed, Until, DEADLINES};
use std::future::{pending, poll_fn, Pending};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Waits under a deadline on this thread.
fn waiting() -> usize {
    DEADLINES.with(|cell| cell.borrow().order.len())
}

/// Runs `test` on a runtime of each io driver, each on a thread of its own
/// (a thread runs one runtime for its life, as the engine's do).
fn on_both_drivers<F: std::future::Future<Output = ()>>(test: impl Fn() -> F + Send + Sync + Copy + 'static) {
    let epoll = std::thread::spawn(move || {
        let runtime = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build();
        runtime.unwrap().block_on(test());
    });
    let uring = std::thread::spawn(move || {
        let runtime = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .enable_timer()
            .build();
        runtime.unwrap().block_on(test());
    });
    epoll.join().expect("the epoll runtime's run");
    uring.join().expect("the io_uring runtime's run");
}

/// Fails a test that waits too long for a deadline to fire.
async fn bounded<F: std::future::Future>(work: F) -> F::Output {
    monoio::time::timeout(Duration::from_secs(5), work)
        .await
        .expect("no deadline fired within 5 s")
}

/// Polls `wait` once, which puts it under its deadline, and checks that
/// it did not end.
async fn start<F: std::future::Future>(mut wait: Pin<&mut F>) {
    poll_fn(|cx| {
        assert!(wait.as_mut().poll(cx).is_pending(), "the wait ended at once");
        Poll::Ready(())
    })
    .await
}

/// A wait an hour away that never ends by itself, registered under its
/// deadline: the one waiting slot of the tests that start with it.
async fn an_hour_away() -> Pin<Box<Until<Pending<()>>>> {
    let mut wait = Box::pin(within(Duration::from_secs(3600), pending::<()>()));
    start(wait.as_mut()).await;
    assert_eq!(waiting(), 1);
    wait
}

#[test]
fn work_that_completes_first_returns_its_output_and_leaves_nothing() {
    on_both_drivers(|| async {
        assert_eq!(within(Duration::from_secs(10), async { 7 }).await, Ok(7));
        let (sent, got) = futures_channel::oneshot::channel::<u8>();
        let mut answered = Box::pin(within(Duration::from_secs(10), got));
        // The answer comes once the wait is under its deadline.
        start(answered.as_mut()).await;
        assert_eq!(waiting(), 1);
        sent.send(9).unwrap();
        assert_eq!(bounded(answered).await, Ok(Ok(9)));
        assert_eq!(waiting(), 0, "both slots given back");
    });
}

#[test]
fn a_wait_ends_at_its_deadline_and_not_before() {
    on_both_drivers(|| async {
        let started = Instant::now();
        let waited = bounded(until(started + Duration::from_millis(40), pending::<()>())).await;
        assert_eq!(waited, Err(Elapsed));
        assert!(
            started.elapsed() >= Duration::from_millis(40),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(waiting(), 0);
    });
}

#[test]
fn an_earlier_deadline_set_after_a_later_one_fires_first() {
    on_both_drivers(|| async {
        // The long wait registers (and sets the ticker's timer) first.
        let long = an_hour_away().await;
        let started = Instant::now();
        let short = until(started + Duration::from_millis(30), pending::<()>());
        assert_eq!(bounded(short).await, Err(Elapsed));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(waiting(), 1, "the long wait is still there");
        drop(long);
        assert_eq!(waiting(), 0);
    });
}

#[test]
fn a_wait_dropped_before_its_deadline_gives_its_slot_back() {
    on_both_drivers(|| async {
        let dropped = an_hour_away().await;
        drop(dropped);
        assert_eq!(waiting(), 0);
        // The slot is reused, and fires.
        assert_eq!(
            bounded(within(Duration::from_millis(10), pending::<()>())).await,
            Err(Elapsed)
        );
        assert_eq!(
            DEADLINES.with(|cell| cell.borrow().waiters.len()),
            1,
            "one slot, reused"
        );
    });
}

#[test]
fn many_waits_fire_in_the_order_of_their_deadlines() {
    on_both_drivers(|| async {
        let (order, fired) = std::sync::mpsc::channel();
        let mut waits = Vec::new();
        for n in [5u64, 1, 4, 2, 3] {
            let order = order.clone();
            waits.push(monoio::spawn(async move {
                // `sleep` is what this test is of: a `Pause` each.
                sleep(Duration::from_millis(15 * n)).await;
                order.send(n).unwrap();
            }));
        }
        for wait in waits {
            bounded(wait).await;
        }
        let fired: Vec<u64> = fired.try_iter().collect();
        assert_eq!(fired, [1, 2, 3, 4, 5]);
        assert_eq!(waiting(), 0);
    });
}
