//! `GET /v1/events`: the event stream of ask mode's pending requests, read
//! as it arrives (`text/event-stream`), one [`Event`] at a time.
//!
//! The parsing of the stream's lines is pure ([`Parser`]) and apart from
//! the connection that feeds it.

use crate::transport::Streaming;
use crate::Error;
use http_body_util::BodyExt;

/// One event of `GET /v1/events`: the daemon's own definition, name and
/// JSON.
pub use crackbox_wire::ask::Event;

/// The events of one open `GET /v1/events`, from [`crate::Client::events`].
pub struct Events {
    streaming: Streaming,
    parser: Parser,
    url: String,
}

impl Events {
    pub(crate) fn new(streaming: Streaming, url: String) -> Self {
        Events {
            streaming,
            parser: Parser::default(),
            url,
        }
    }

    /// The next event; `None` once the daemon ended the stream.
    pub async fn next(&mut self) -> Option<Result<Event, Error>> {
        loop {
            if let Some(event) = self.parser.next_event() {
                return Some(self.decode(event));
            }
            match self.streaming.body.frame().await? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        self.parser.feed(&data);
                    }
                }
                Err(err) => {
                    return Some(Err(Error::Unreachable {
                        url: self.url.clone(),
                        source: std::io::Error::other(err),
                    }))
                }
            }
        }
    }

    fn decode(&self, (name, data): (String, String)) -> Result<Event, Error> {
        Event::parse(&name, &data).map_err(|err| Error::Malformed {
            url: self.url.clone(),
            detail: crate::error::one_line(&err.to_string()),
        })
    }
}

/// Splits `text/event-stream` bytes into `(event, data)` pairs; comments
/// (keep-alives) and fields other than `event` and `data` are skipped.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    buffer: Vec<u8>,
    name: String,
    data: String,
}

impl Parser {
    /// Adds bytes as they arrived.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next complete event, if one is in.
    pub(crate) fn next_event(&mut self) -> Option<(String, String)> {
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                let name = std::mem::take(&mut self.name);
                let data = std::mem::take(&mut self.data);
                if data.is_empty() && name.is_empty() {
                    continue;
                }
                return Some((if name.is_empty() { "message".into() } else { name }, data));
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => self.name = value.to_string(),
                "data" => {
                    if !self.data.is_empty() {
                        self.data.push('\n');
                    }
                    self.data.push_str(value);
                }
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_reads_and_keep_alives_skipped() {
        let mut parser = Parser::default();
        parser.feed(b": keep-alive\n\nevent: pending\nda");
        assert_eq!(parser.next_event(), None);
        parser.feed(b"ta: {\"a\":1}\r\n\r\nevent: lagged\ndata: {\"missed\":3}\n\n");
        assert_eq!(parser.next_event(), Some(("pending".into(), "{\"a\":1}".into())));
        assert_eq!(parser.next_event(), Some(("lagged".into(), "{\"missed\":3}".into())));
        assert_eq!(parser.next_event(), None);
        parser.feed(b"data: a\ndata: b\nid: 7\n\n");
        assert_eq!(parser.next_event(), Some(("message".into(), "a\nb".into())));
    }
}
