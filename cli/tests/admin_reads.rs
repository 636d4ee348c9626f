//! Many concurrent admin reads against the real binary at 10,000 sources:
//! a crowd of `/metrics` and `/v1/usage` scrapes is answered 200, never
//! 503, with the right figures; and a read that starts after a change was
//! answered sees it, though concurrent reads share the engine's answers
//! (docs/admin-api.md, "Concurrent reads").

use crackbox_test_support::{http, metric, try_http, Daemon};
use serde_json::{json, Value};
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Registered sources.
const SOURCES: usize = 10_000;
/// Admin clients reading at once.
const READERS: usize = 300;
/// Reads each client makes, one after the other.
const READS_EACH: usize = 2;
/// The source registered while the reads run (none of the others).
const LATE: &str = "10.200.0.1";

/// Source `i` of the registry: 10.0.0.1 and up, 250 to a /24.
fn source(i: usize) -> String {
    format!("10.0.{}.{}", i / 250, i % 250 + 1)
}

/// One read as a client saw it: which path, when it began, the answer.
struct Read {
    path: &'static str,
    began: Instant,
    status: u16,
    body: String,
}

#[test]
fn hundreds_of_concurrent_scrapes_at_ten_thousand_sources_are_answered_and_fresh() {
    let daemon = Daemon::loopback(&[], &[]);
    let state: Vec<Value> = (0..SOURCES)
        .map(|i| json!({"ip": source(i), "id": format!("agent-{i}"), "allowlist": ["pypi.org"]}))
        .collect();
    let (status, body) = http(
        daemon.admin,
        "PUT",
        "/v1/state",
        Some(&Value::from(state).to_string()),
        &[],
    );
    assert_eq!(status, 200, "{body}");
    let admin = daemon.admin;
    let start = Arc::new(Barrier::new(READERS + 1));
    let readers: Vec<_> = (0..READERS)
        .map(|reader| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                (0..READS_EACH)
                    .map(|round| {
                        let path = ["/metrics", "/v1/usage"][(reader + round) % 2];
                        let began = Instant::now();
                        let (status, body) = try_http(admin, "GET", path, None, &[]).unwrap_or((0, String::new()));
                        Read {
                            path,
                            began,
                            status,
                            body,
                        }
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    start.wait();
    // A change in the middle of the crowd: every read that begins after
    // its answer must show it.
    let late = json!({"ip": LATE, "id": "late", "allowlist": ["pypi.org"]}).to_string();
    let registered = http(admin, "POST", "/v1/register", Some(&late), &[]);
    let changed = Instant::now();
    // Two reads of the test's own while the crowd's are out.
    let mut reads: Vec<Read> = ["/v1/usage", "/metrics"]
        .into_iter()
        .map(|path| {
            let began = Instant::now();
            let (status, body) = http(admin, "GET", path, None, &[]);
            Read {
                path,
                began,
                status,
                body,
            }
        })
        .collect();
    let (_, status_body) = http(admin, "GET", "/v1/status", None, &[]);
    let generation = serde_json::from_str::<Value>(&status_body).unwrap()["generation"]
        .as_f64()
        .expect("a generation");
    reads.extend(readers.into_iter().flat_map(|reader| reader.join().unwrap()));

    let refused: Vec<String> = reads
        .iter()
        .filter(|read| read.status != 200)
        .map(|read| format!("{} {}: {}", read.path, read.status, read.body))
        .collect();
    assert!(
        refused.is_empty(),
        "{} of {} concurrent reads were not answered 200, e.g. {:?}",
        refused.len(),
        reads.len(),
        refused.first()
    );
    assert_eq!(registered.0, 200, "the change amid the reads: {}", registered.1);
    let records = |body: &str| serde_json::from_str::<Vec<Value>>(body).expect("a usage array");
    for read in &reads {
        let fresh = read.began > changed;
        let has_late = match read.path {
            "/metrics" => {
                let registrations = metric(&read.body, "crackbox_registrations", &[]).expect("registrations");
                assert!(registrations == SOURCES as f64 || registrations == SOURCES as f64 + 1.0);
                let enforced = metric(&read.body, "crackbox_engine_snapshot_generation", &[]).expect("generation");
                enforced >= generation
            }
            _ => read.body.contains(&format!("\"ip\":\"{LATE}\"")),
        };
        assert!(has_late || !fresh, "{} began after the change but misses it", read.path);
    }
    let usage = reads
        .iter()
        .rfind(|read| read.path == "/v1/usage")
        .expect("a usage read");
    let count = records(&usage.body).len();
    assert!(count == SOURCES || count == SOURCES + 1, "{count} usage records");
    let (_, body) = http(admin, "GET", "/v1/usage", None, &[]);
    let all = records(&body);
    assert_eq!(all.len(), SOURCES + 1);
    assert!(all
        .iter()
        .all(|record| record["requests"] == 0 && record["connections"] == 0));
}
