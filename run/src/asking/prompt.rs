//! What the run's terminal prompt says and does, as a state machine with no
//! I/O: it is told of requests that start waiting, of requests settled
//! (by its own answer, elsewhere, or by the timeout) and of what the person
//! typed, and answers with lines to print and decisions to send.
//!
//! Every line it prints is whole (ends in a newline), so the workload's
//! output never lands on half a prompt; the question shown is always the
//! last prompt line. A request settled elsewhere, or timed out, is said so
//! at once and the next waiting one is asked right after, without a
//! keystroke. A key that is no answer is told the choices.

use crackbox_client::{Answer, DecidedRequest, PendingId, PendingRequest, Settlement};
use crackbox_policy::held::always_entry;
use std::collections::{HashSet, VecDeque};

/// How the person answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// One key, no Enter (the terminal is in non-canonical mode).
    Single,
    /// A line ended by Enter (the terminal could not be switched).
    Line,
}

/// What the prompt asks the caller to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Print this line on the terminal.
    Say(String),
    /// Send this decision to the admin API.
    Decide(PendingId, Answer),
}

/// The terminal prompt of one run.
#[derive(Debug)]
pub struct Prompt {
    sandbox: String,
    keys: Keys,
    /// The requests of the run's source that wait, oldest first; the first
    /// is the one asked about.
    waiting: VecDeque<PendingRequest>,
    /// Whether the first waiting request's question is on the screen.
    shown: bool,
    /// Requests answered here, whose settlement needs no word.
    answered: HashSet<PendingId>,
    /// What was typed of the current line (line mode).
    typed: String,
}

impl Prompt {
    /// The prompt of sandbox `sandbox`, answered with `keys`.
    pub fn new(sandbox: &str, keys: Keys) -> Self {
        Prompt {
            sandbox: sandbox.to_string(),
            keys,
            waiting: VecDeque::new(),
            shown: false,
            answered: HashSet::new(),
            typed: String::new(),
        }
    }

    /// `request` started waiting.
    pub fn asked(&mut self, request: PendingRequest) -> Vec<Effect> {
        if self.waiting.iter().any(|waiting| waiting.id == request.id) {
            return Vec::new();
        }
        self.waiting.push_back(request);
        self.show()
    }

    /// `decided` ended: if it was the question on the screen and not
    /// answered here, says how and asks the next.
    pub fn settled(&mut self, decided: &DecidedRequest) -> Vec<Effect> {
        let id = decided.request.id;
        if self.answered.remove(&id) {
            return Vec::new();
        }
        let Some(at) = self.waiting.iter().position(|waiting| waiting.id == id) else {
            return Vec::new();
        };
        let request = self.waiting.remove(at).expect("a waiting request");
        if at != 0 || !self.shown {
            return Vec::new();
        }
        self.shown = false;
        self.typed.clear();
        let target = target(&request);
        let how = match decided.decision {
            Settlement::Timeout => "timed out: nobody decided within the ask timeout, so it was refused".to_string(),
            Settlement::Withdrawn if decided.reason.is_none() && decided.layer.is_none() => {
                "was closed when crackbox's engine restarted (the next connection asks again)".to_string()
            }
            Settlement::Withdrawn => "was settled by a change of the run's registration".to_string(),
            other => format!("was decided elsewhere: {}", other.as_str()),
        };
        let mut effects = vec![Effect::Say(format!("crackbox: {target} {how}"))];
        effects.extend(self.show());
        effects
    }

    /// The person typed `bytes`.
    pub fn typed(&mut self, bytes: &[u8]) -> Vec<Effect> {
        let mut effects = Vec::new();
        for &byte in bytes {
            let answer = match self.keys {
                Keys::Single if byte.is_ascii_whitespace() => continue,
                Keys::Single => (byte as char).to_string(),
                Keys::Line if byte == b'\n' || byte == b'\r' => std::mem::take(&mut self.typed),
                Keys::Line => {
                    self.typed.push(byte as char);
                    continue;
                }
            };
            effects.extend(self.answer(answer.trim()));
        }
        effects
    }

    /// The question on the screen answered with `text`.
    fn answer(&mut self, text: &str) -> Vec<Effect> {
        if !self.shown || (text.is_empty() && self.keys == Keys::Line) {
            return Vec::new();
        }
        let Some(answer) = Answer::parse(&text.to_ascii_lowercase()) else {
            let choices = match self.keys {
                Keys::Single => "press o (once), a (always) or d (deny)",
                Keys::Line => "type o (once), a (always) or d (deny) and Enter",
            };
            return vec![Effect::Say(format!("crackbox: {text:?} is no answer: {choices}"))];
        };
        let request = self.waiting.pop_front().expect("a shown question");
        self.shown = false;
        self.answered.insert(request.id);
        let said = match answer {
            Answer::Always => format!("always ({} added to the allowlist)", always_reach(&request)),
            other => other.as_str().to_string(),
        };
        let mut effects = vec![
            Effect::Say(format!("crackbox: {}: {said}", target(&request))),
            Effect::Decide(request.id, answer),
        ];
        effects.extend(self.show());
        effects
    }

    /// Asks about the first waiting request, unless it is asked already.
    fn show(&mut self) -> Vec<Effect> {
        let Some(request) = self.waiting.front() else {
            return Vec::new();
        };
        if self.shown {
            return Vec::new();
        }
        self.shown = true;
        let how = match self.keys {
            Keys::Single => "press o, a or d",
            Keys::Line => "type o, a or d and Enter",
        };
        vec![Effect::Say(format!(
            "crackbox: sandbox {} wants {}: allow [o]nce, [a]lways, [d]eny? (always: {}; {how})",
            self.sandbox,
            target(request),
            always_reach(request)
        ))]
    }
}

fn target(request: &PendingRequest) -> String {
    format!("{}:{}", crate::untrusted::shown(&request.host), request.port)
}

/// What an `always` answer to `request` lets through from then on: the
/// entry it adds, which for a name covers its subdomains too.
pub fn always_reach(request: &PendingRequest) -> String {
    let Some(entry) = always_entry(&request.host, request.port).map(|entry| entry.to_string()) else {
        return target(request);
    };
    match request.host.parse::<std::net::IpAddr>() {
        Ok(_) => entry,
        Err(_) if request.host.starts_with('[') => entry,
        Err(_) => format!("{entry} and its subdomains"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: PendingId, host: &str, port: u16) -> PendingRequest {
        PendingRequest {
            id,
            ip: "10.213.0.2".parse().unwrap(),
            sandbox: "run-1".into(),
            host: host.into(),
            port,
            front_end: "forward".into(),
            since: 0,
            waiting: 1,
            node: None,
        }
    }

    fn settled(request: PendingRequest, decision: Settlement) -> DecidedRequest {
        DecidedRequest {
            request,
            decision,
            reason: None,
            layer: None,
        }
    }

    fn said(effects: &[Effect]) -> Vec<&str> {
        effects
            .iter()
            .filter_map(|effect| match effect {
                Effect::Say(line) => Some(line.as_str()),
                Effect::Decide(..) => None,
            })
            .collect()
    }

    #[test]
    fn one_key_answers_and_the_next_is_asked_at_once() {
        let mut prompt = Prompt::new("run-1", Keys::Single);
        let asked = prompt.asked(request(1, "localhost", 8000));
        assert_eq!(
            said(&asked),
            [
                "crackbox: sandbox run-1 wants localhost:8000: allow [o]nce, [a]lways, [d]eny? (always: \
              localhost:8000 and its subdomains; press o, a or d)"
            ]
        );
        assert!(
            prompt.asked(request(2, "10.0.0.9", 443)).is_empty(),
            "asked after the first"
        );
        assert!(prompt.asked(request(1, "localhost", 8000)).is_empty(), "told again");
        let typed = prompt.typed(b"\nx");
        assert_eq!(
            said(&typed),
            ["crackbox: \"x\" is no answer: press o (once), a (always) or d (deny)"]
        );
        let answered = prompt.typed(b"A");
        assert_eq!(
            answered,
            [
                Effect::Say(
                    "crackbox: localhost:8000: always (localhost:8000 and its subdomains added to the allowlist)"
                        .into()
                ),
                Effect::Decide(1, Answer::Always),
                Effect::Say(
                    "crackbox: sandbox run-1 wants 10.0.0.9:443: allow [o]nce, [a]lways, [d]eny? (always: \
                     10.0.0.9; press o, a or d)"
                        .into()
                ),
            ]
        );
        assert!(prompt
            .settled(&settled(request(1, "localhost", 8000), Settlement::Always))
            .is_empty());
    }

    #[test]
    fn a_question_settled_elsewhere_or_timed_out_is_said_and_the_next_is_asked() {
        let mut prompt = Prompt::new("run-1", Keys::Single);
        prompt.asked(request(1, "a.test", 443));
        prompt.asked(request(2, "b.test", 443));
        prompt.asked(request(3, "c.test", 443));
        assert!(
            prompt
                .settled(&settled(request(3, "c.test", 443), Settlement::Deny))
                .is_empty(),
            "not shown yet"
        );
        let elsewhere = prompt.settled(&settled(request(1, "a.test", 443), Settlement::Once));
        assert_eq!(said(&elsewhere)[0], "crackbox: a.test:443 was decided elsewhere: once");
        assert!(said(&elsewhere)[1].contains("wants b.test:443"));
        let timed_out = prompt.settled(&settled(request(2, "b.test", 443), Settlement::Timeout));
        assert_eq!(
            said(&timed_out),
            ["crackbox: b.test:443 timed out: nobody decided within the ask timeout, so it was refused"]
        );
        prompt.asked(request(4, "d.test", 443));
        let restarted = prompt.settled(&settled(request(4, "d.test", 443), Settlement::Withdrawn));
        assert_eq!(
            said(&restarted),
            ["crackbox: d.test:443 was closed when crackbox's engine restarted (the next connection asks again)"]
        );
        assert!(prompt.typed(b"o").is_empty(), "no question: a key does nothing");
    }

    #[test]
    fn without_single_keys_a_line_answers() {
        let mut prompt = Prompt::new("run-1", Keys::Line);
        assert!(said(&prompt.asked(request(1, "a.test", 80)))[0].ends_with("type o, a or d and Enter)"));
        assert!(prompt.typed(b"on").is_empty());
        assert_eq!(said(&prompt.typed(b"ce\n")), ["crackbox: a.test:80: once"]);
        prompt.asked(request(2, "b.test", 80));
        assert_eq!(
            said(&prompt.typed(b"maybe\r")),
            ["crackbox: \"maybe\" is no answer: type o (once), a (always) or d (deny) and Enter"]
        );
        assert_eq!(prompt.typed(b"\n"), [], "an empty line is no answer, and no complaint");
        assert_eq!(prompt.typed(b"d\n")[1], Effect::Decide(2, Answer::Deny));
    }
}
