//! Request-head parsing as forward mode does it: find the end of the head,
//! parse and validate it, and (for absolute-form requests) write the
//! origin-form head sent upstream. A small GET, a 30-header request, and a
//! CONNECT.

use crackbox_engine::http_head::{head_end, parse_request, write_upstream_request, FieldSlots};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

fn small_get() -> Vec<u8> {
    b"GET http://example.com/index.html HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n"
        .to_vec()
}

fn thirty_headers() -> Vec<u8> {
    let mut head =
        String::from("GET http://api.example.com/v1/items?page=2&size=50 HTTP/1.1\r\nHost: api.example.com\r\n");
    let names = [
        "User-Agent",
        "Accept",
        "Accept-Encoding",
        "Accept-Language",
        "Cache-Control",
        "Cookie",
        "Referer",
        "Authorization",
        "X-Request-Id",
        "X-Trace-Id",
        "Sec-Fetch-Mode",
        "Sec-Fetch-Site",
        "Origin",
        "Pragma",
        "If-None-Match",
    ];
    for i in 0..29 {
        let name = names[i % names.len()];
        head.push_str(&format!("{name}-{i}: value-{i}-{}\r\n", "x".repeat(20 + i)));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

fn connect() -> Vec<u8> {
    b"CONNECT registry.npmjs.org:443 HTTP/1.1\r\nHost: registry.npmjs.org:443\r\nUser-Agent: npm/10\r\n\r\n".to_vec()
}

fn bench_heads(c: &mut Criterion) {
    let mut group = c.benchmark_group("http_head");
    for (name, head) in [
        ("small-get", small_get()),
        ("30-headers", thirty_headers()),
        ("connect", connect()),
    ] {
        let parsed_len = parse_request(&head, &mut FieldSlots::new())
            .expect("bench heads are valid")
            .head_len;
        assert_eq!(parsed_len, head.len());
        group.throughput(Throughput::Bytes(head.len() as u64));
        group.bench_with_input(BenchmarkId::new("parse", name), &head, |b, head| {
            b.iter(|| {
                let end = head_end(black_box(head), 0).expect("complete head");
                parse_request(&head[..end], &mut FieldSlots::new())
                    .expect("valid head")
                    .head_len
            })
        });
        if name != "connect" {
            let mut out = Vec::with_capacity(4096);
            group.bench_with_input(BenchmarkId::new("parse+rewrite", name), &head, |b, head| {
                b.iter(|| {
                    out.clear();
                    let mut slots = FieldSlots::new();
                    let parsed = parse_request(black_box(head), &mut slots).expect("valid head");
                    write_upstream_request(&parsed, &mut out);
                    out.len()
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_heads);
criterion_main!(benches);
