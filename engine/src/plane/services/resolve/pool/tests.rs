use super::*;

/// A pool with no threads: what is admitted stays in `ready`.
fn idle_pool() -> Resolver {
    Resolver { pool: Pool::new() }
}

fn lookup(source: &str) -> (Lookup, oneshot::Receiver<io::Result<Vec<IpAddr>>>) {
    let (reply, answer) = oneshot::channel();
    let lookup = Lookup {
        source: source.parse().unwrap(),
        host: "slow.test".to_owned(),
        reply,
        started: Arc::default(),
    };
    (lookup, answer)
}

fn ready(resolver: &Resolver) -> usize {
    resolver.pool.lock().ready.len()
}

#[test]
fn a_source_has_two_lookups_admitted_and_the_rest_wait_their_turn() {
    let resolver = idle_pool();
    let mut answers = Vec::new();
    for _ in 0..5 {
        let (job, answer) = lookup("127.0.0.1");
        resolver.submit(job).unwrap();
        answers.push(answer);
    }
    assert_eq!(ready(&resolver), PER_SOURCE, "the rest wait in the source's line");
    let (other, _other_answer) = lookup("127.0.0.2");
    resolver.submit(other).unwrap();
    assert_eq!(ready(&resolver), PER_SOURCE + 1, "another source is admitted at once");

    // The first waiter gave up: a freed slot goes to the next one still waiting.
    drop(answers.remove(2));
    let first = resolver.pool.lock().ready.pop_front().unwrap();
    finished(&resolver.pool, first.source);
    let queue = resolver.pool.lock();
    assert_eq!(queue.ready.len(), PER_SOURCE + 1);
    assert_eq!(queue.waiting, 1, "the caller that gave up is dropped unrun");
}

#[test]
fn a_full_line_is_refused_at_once_and_a_source_without_lookups_is_forgotten() {
    let resolver = idle_pool();
    let mut answers = Vec::new();
    for _ in 0..PER_SOURCE + WAITING_PER_SOURCE {
        let (job, answer) = lookup("127.0.0.1");
        resolver.submit(job).unwrap();
        answers.push(answer);
    }
    let (job, _answer) = lookup("127.0.0.1");
    assert_eq!(resolver.submit(job).err(), Some(Failure::Busy));
    drop(answers);
    let admitted: Vec<_> = resolver.pool.lock().ready.drain(..).collect();
    for job in admitted {
        finished(&resolver.pool, job.source);
    }
    let queue = resolver.pool.lock();
    assert!(
        queue.shares.is_empty() && queue.waiting == 0,
        "nothing left of the source"
    );
}

#[test]
fn lookups_resolve_through_the_threads() {
    let resolver = Resolver::start(1).unwrap();
    let mut runtime = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .unwrap();
    let found = runtime.block_on(resolver.lookup("127.0.0.1".parse().unwrap(), "localhost", Duration::from_secs(10)));
    assert!(found.unwrap().iter().any(IpAddr::is_loopback));
}
