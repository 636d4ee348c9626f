//! The lab's upstream servers, in the upstream namespace: TLS (real, decoy,
//! echo), HTTP on 80 and 8080, HTTPS, and a DNS resolver, each recording
//! what it saw in [`Seen`].

use super::{Seen, REAL, WAIT};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long the keep-alive and echo upstreams keep a silent connection.
const HOLD: Duration = Duration::from_secs(120);

/// The TLS upstream: completes the handshake, records the SNI, answers one
/// line with who it is.
pub fn serve_tls(listener: TcpListener, config: Arc<rustls::ServerConfig>, seen: Arc<Seen>, real: bool) {
    for stream in listener.incoming().map_while(Result::ok) {
        let counter = if real {
            &seen.real_tls_accepted
        } else {
            &seen.decoy_tls_accepted
        };
        counter.fetch_add(1, Ordering::SeqCst);
        let (config, seen) = (Arc::clone(&config), Arc::clone(&seen));
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(WAIT));
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(conn, stream);
            let mut line = String::new();
            if BufReader::new(&mut tls).read_line(&mut line).is_err() {
                return;
            }
            let sni = tls.conn.server_name().unwrap_or("").to_owned();
            if real {
                seen.real_sni.lock().unwrap().push(sni.clone());
            }
            let who = if real { "real" } else { "decoy" };
            let _ = tls.write_all(format!("{who} {sni} {}", line).as_bytes());
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
        });
    }
}

/// The echo upstream: completes the handshake, then answers every line
/// with the SNI and the line until the client closes; counts accepts.
pub fn serve_tls_echo(listener: TcpListener, config: Arc<rustls::ServerConfig>, seen: Arc<Seen>) {
    for stream in listener.incoming().map_while(Result::ok) {
        seen.echo_tls_accepted.fetch_add(1, Ordering::SeqCst);
        let config = Arc::clone(&config);
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(HOLD));
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut tls = BufReader::new(rustls::StreamOwned::new(conn, stream));
            loop {
                let mut line = String::new();
                if tls.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let sni = tls.get_ref().conn.server_name().unwrap_or("").to_owned();
                let tls = tls.get_mut();
                if tls.write_all(format!("{sni} {line}").as_bytes()).is_err() || tls.flush().is_err() {
                    return;
                }
            }
        });
    }
}

/// The HTTP upstream: keep-alive, answers each request with its Host and path.
pub fn serve_http(listener: TcpListener, seen: Arc<Seen>, label: &'static str) {
    for stream in listener.incoming().map_while(Result::ok) {
        seen.http_accepted.fetch_add(1, Ordering::SeqCst);
        let seen = Arc::clone(&seen);
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(HOLD));
            answer_http(BufReader::new(stream), &seen, label);
        });
    }
}

/// The HTTPS upstream: HTTP/1.1 over TLS, answers each request with the
/// SNI, its Host and path (`web {sni} {host} {path}`).
pub fn serve_https(listener: TcpListener, config: Arc<rustls::ServerConfig>, seen: Arc<Seen>) {
    for stream in listener.incoming().map_while(Result::ok) {
        seen.web_tls_accepted.fetch_add(1, Ordering::SeqCst);
        let (config, seen) = (Arc::clone(&config), Arc::clone(&seen));
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(HOLD));
            let Ok(conn) = rustls::ServerConnection::new(config) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(conn, stream);
            while tls.conn.is_handshaking() {
                if tls.conn.complete_io(&mut tls.sock).is_err() {
                    return;
                }
            }
            let label = format!("web {}", tls.conn.server_name().unwrap_or(""));
            answer_http(BufReader::new(tls), &seen, &label);
        });
    }
}

/// Answers the HTTP/1.1 requests of one connection with
/// `{label} {host} {path}` until the client closes; `/bytes/N` is answered
/// with a body of `N` bytes instead. A request body (`Content-Length`) is
/// read and dropped.
fn answer_http<S: Read + Write>(mut reader: BufReader<S>, seen: &Seen, label: &str) {
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut host = String::new();
        let mut length = 0u64;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("host") {
                    host = value.trim().to_owned();
                }
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        if length > 0 && std::io::copy(&mut (&mut reader).take(length), &mut std::io::sink()).ok() != Some(length) {
            return;
        }
        seen.http_requests.lock().unwrap().push((host.clone(), path.clone()));
        let body = match path.strip_prefix("/bytes/").and_then(|n| n.parse::<usize>().ok()) {
            Some(size) => "x".repeat(size),
            None => format!("{label} {host} {path}"),
        };
        let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        let out = reader.get_mut();
        if out.write_all(response.as_bytes()).is_err() || out.flush().is_err() {
            return;
        }
    }
}

/// The upstream resolver: `allowed.test` and its subdomains are at
/// [`REAL`], everything else NXDOMAIN; stops (closing its port) once
/// `dns_down` is set, and says so in `dns_stopped`.
pub fn serve_dns(socket: UdpSocket, seen: Arc<Seen>) {
    socket.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 4096];
    while !seen.dns_down.load(Ordering::SeqCst) {
        let Ok((len, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let Ok(request) = Message::from_vec(&buf[..len]) else {
            continue;
        };
        let Some(query) = request.queries.first().cloned() else {
            continue;
        };
        let name = query.name().to_ascii();
        seen.dns_asked.lock().unwrap().push(name.clone());
        let mut reply = Message::response(request.metadata.id, request.metadata.op_code);
        reply.add_query(query.clone());
        if name.ends_with("allowed.test.") && query.query_type() == RecordType::A {
            reply.add_answer(Record::from_rdata(query.name().clone(), 60, RData::A(A(REAL))));
        } else if !name.ends_with("allowed.test.") {
            reply.metadata.response_code = ResponseCode::NXDomain;
        }
        let _ = socket.send_to(&reply.to_vec().unwrap(), from);
    }
    drop(socket);
    seen.dns_stopped.store(true, Ordering::SeqCst);
}
