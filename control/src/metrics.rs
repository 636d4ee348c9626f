//! Prometheus text for `/metrics`, built from one engine counter report.
//!
//! The engine owns the counters (since engine start); control renders them
//! fresh on every scrape, so a restarted engine shows as a counter reset.

use crate::asks::Asks;
use crate::fleet::Fleet;
use crackbox_policy::Generation;
use crackbox_wire::link::StatsReport;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Content type of the rendered text (OpenMetrics).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// Renders the engine's `report` plus control's own `generation`, registry
/// size and ask-mode figures, and the fleet link's when there is one.
pub fn render(
    report: &StatsReport,
    generation: Generation,
    registrations: usize,
    asks: &Asks,
    fleet: Option<&Fleet>,
) -> String {
    let mut registry = Registry::with_prefix("crackbox");
    let allowed = Family::<Labels, Counter>::default();
    let denied = Family::<Labels, Counter>::default();
    let reported = Family::<Labels, Counter>::default();
    for decision in &report.decisions {
        let Some(reason) = decision.reason else {
            allowed
                .get_or_create(&vec![("id", decision.id.clone())])
                .inc_by(decision.count);
            continue;
        };
        let family = if decision.enforced { &denied } else { &reported };
        family
            .get_or_create(&vec![
                ("id", decision.id.clone()),
                ("reason", reason.as_str().to_string()),
            ])
            .inc_by(decision.count);
    }
    registry.register(
        "allowed",
        "Allowed connections and requests per registration id",
        allowed,
    );
    registry.register(
        "denied",
        "Denied connections and requests per registration id and reason",
        denied,
    );
    registry.register(
        "reported",
        "Connections, requests and DNS queries let through in report mode that the allowlist would deny, \
         per registration id and the reason they would have had",
        reported,
    );
    let bytes = Family::<Labels, Counter>::default();
    bytes
        .get_or_create(&vec![("direction", "up".into())])
        .inc_by(report.bytes_up);
    bytes
        .get_or_create(&vec![("direction", "down".into())])
        .inc_by(report.bytes_down);
    let opened = Family::<Labels, Counter>::default();
    for tunnels in &report.tunnels_opened {
        opened
            .get_or_create(&vec![("front_end", tunnels.front_end.clone())])
            .inc_by(tunnels.count);
    }
    registry.register(
        "tunnels_opened",
        "Tunnels opened per front end (connect, transparent, socks5)",
        opened,
    );
    registry.register(
        "tunnel_bytes",
        "Bytes moved through the proxy (up: client to upstream)",
        bytes,
    );
    let gauge = |value: u64| {
        let gauge = Gauge::<u64, AtomicU64>::default();
        gauge.set(value);
        gauge
    };
    registry.register(
        "active_tunnels",
        "Tunnels and forwarded connections open now",
        gauge(report.active_tunnels),
    );
    registry.register(
        "snapshot_generation",
        "Registry generation published by control",
        gauge(generation),
    );
    registry.register(
        "engine_snapshot_generation",
        "Registry generation the engine enforces",
        gauge(report.generation),
    );
    registry.register(
        "engine_revocation_generation",
        "Registry generation every engine core thread has re-decided its live connections against",
        gauge(report.revocation_generation),
    );
    registry.register(
        "registrations",
        "Registered source addresses",
        gauge(registrations as u64),
    );
    asks.register_metrics(&mut registry);
    if let Some(fleet) = fleet {
        fleet.register_metrics(&mut registry);
    }
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_policy::reason::Reason;
    use crackbox_wire::link::{DecisionCount, TunnelCount};

    #[test]
    fn renders_every_family_with_its_labels() {
        let report = StatsReport {
            decisions: vec![
                DecisionCount {
                    id: "agent".into(),
                    reason: None,
                    enforced: true,
                    count: 5,
                },
                DecisionCount {
                    id: "agent".into(),
                    reason: Some(Reason::NotAllowed),
                    enforced: true,
                    count: 2,
                },
                DecisionCount {
                    id: String::new(),
                    reason: Some(Reason::Unregistered),
                    enforced: true,
                    count: 1,
                },
                DecisionCount {
                    id: "watched".into(),
                    reason: Some(Reason::NotAllowed),
                    enforced: false,
                    count: 9,
                },
            ],
            active_tunnels: 4,
            bytes_up: 100,
            bytes_down: 2000,
            denials: vec![],
            generation: 6,
            revocation_generation: 5,
            tunnels_opened: vec![TunnelCount {
                front_end: "socks5".into(),
                count: 8,
            }],
        };
        let text = render(&report, 7, 3, &Asks::default(), None);
        assert!(!text.contains("crackbox_denied_total{id=\"watched\""), "{text}");
        for line in [
            "crackbox_allowed_total{id=\"agent\"} 5",
            "crackbox_denied_total{id=\"agent\",reason=\"not-allowed\"} 2",
            "crackbox_denied_total{id=\"\",reason=\"unregistered\"} 1",
            "crackbox_reported_total{id=\"watched\",reason=\"not-allowed\"} 9",
            "crackbox_tunnels_opened_total{front_end=\"socks5\"} 8",
            "crackbox_tunnel_bytes_total{direction=\"up\"} 100",
            "crackbox_tunnel_bytes_total{direction=\"down\"} 2000",
            "crackbox_active_tunnels 4",
            "crackbox_snapshot_generation 7",
            "crackbox_engine_snapshot_generation 6",
            "crackbox_engine_revocation_generation 5",
            "crackbox_registrations 3",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
