//! What a subscriber of `GET /v1/events` asks for: `?topics=ask,usage`, or
//! `all`; without the parameter ask mode's events only (what the stream
//! always carried, so older clients see nothing new).

use std::fmt;

/// What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// Ask mode: `pending` and `decided`.
    Ask,
    /// Registry changes: `registered` and `unregistered`.
    Registrations,
    /// Usage per registration at a fixed interval: `usage`.
    Usage,
    /// Denials as they are recorded: `denials`.
    Denials,
    /// The daemon's status when it changes: `status`.
    Status,
}

impl Topic {
    /// Every topic.
    pub const ALL: [Topic; 5] = [
        Topic::Ask,
        Topic::Registrations,
        Topic::Usage,
        Topic::Denials,
        Topic::Status,
    ];

    /// The word in `?topics=`.
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Ask => "ask",
            Topic::Registrations => "registrations",
            Topic::Usage => "usage",
            Topic::Denials => "denials",
            Topic::Status => "status",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Whether the feed polls the engine for it.
    fn polled(self) -> bool {
        matches!(self, Topic::Usage | Topic::Denials | Topic::Status)
    }
}

/// A set of topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topics(u8);

impl Default for Topics {
    /// Ask mode's events only.
    fn default() -> Self {
        Topics(Topic::Ask.bit())
    }
}

impl Topics {
    /// Every topic.
    pub fn all() -> Self {
        Topics(Topic::ALL.iter().fold(0, |bits, topic| bits | topic.bit()))
    }

    /// Parses `ask,usage` or `all`; an unknown word is an error naming it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut bits = 0;
        for word in text.split(',').map(str::trim).filter(|word| !word.is_empty()) {
            if word == "all" {
                return Ok(Topics::all());
            }
            let topic = Topic::ALL
                .into_iter()
                .find(|topic| topic.as_str() == word)
                .ok_or_else(|| format!("unknown topic {word:?} (ask, registrations, usage, denials, status or all)"))?;
            bits |= topic.bit();
        }
        if bits == 0 {
            return Err("no topic given (ask, registrations, usage, denials, status or all)".into());
        }
        Ok(Topics(bits))
    }

    /// Whether `topic` is in the set (`None`, a reset, always is).
    pub fn has(self, topic: Option<Topic>) -> bool {
        topic.is_none_or(|topic| self.0 & topic.bit() != 0)
    }

    /// Whether any topic of the set is polled from the engine.
    pub fn polled(self) -> bool {
        Topic::ALL.iter().any(|topic| topic.polled() && self.has(Some(*topic)))
    }
}

impl fmt::Display for Topics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words: Vec<&str> = Topic::ALL
            .iter()
            .filter(|topic| self.has(Some(**topic)))
            .map(|topic| topic.as_str())
            .collect();
        f.write_str(&words.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_parse_and_print() {
        assert_eq!(Topics::parse("ask").unwrap(), Topics::default());
        assert_eq!(Topics::parse("all").unwrap(), Topics::all());
        assert_eq!(Topics::parse("usage, ask").unwrap().to_string(), "ask,usage");
        assert!(Topics::parse("usage").unwrap().polled());
        assert!(!Topics::parse("ask,registrations").unwrap().polled());
        assert!(Topics::parse("ask,bogus").unwrap_err().contains("\"bogus\""));
        assert!(Topics::parse(" , ").is_err());
        let ask = Topics::default();
        assert!(ask.has(Some(Topic::Ask)) && !ask.has(Some(Topic::Usage)) && ask.has(None));
    }
}
