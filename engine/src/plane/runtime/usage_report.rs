//! Usage records for control: the accounts of the registrations in force,
//! summed, with the connections each source holds open now.
//!
//! Runs on the control link's thread, never on a core thread; reads the
//! accounts' counters (relaxed loads) and takes the admission pool's lock once.

use crate::plane::services::admission::Admission;
use crate::usage::attached::{Registered, Snapshot};
use crackbox_policy::parse_source_ip;
use crackbox_wire::link::{SourceUsage, UsageQuery};
use std::net::IpAddr;

/// The usage of the registrations in `snapshot` that `query` asks for,
/// sorted by source address.
pub(crate) fn report(snapshot: &Snapshot, query: &UsageQuery, admission: &Admission) -> Vec<SourceUsage> {
    let wanted_id = |registered: &Registered| query.id.as_deref().is_none_or(|id| *registered.id == *id);
    let mut chosen: Vec<(IpAddr, &Registered)> = match &query.ip {
        Some(ip) => match parse_source_ip(ip) {
            Ok(ip) => snapshot
                .lookup(ip)
                .map(|registered| (ip, registered))
                .into_iter()
                .collect(),
            Err(_) => Vec::new(),
        },
        None => snapshot.iter().collect(),
    };
    chosen.retain(|(_, registered)| wanted_id(registered));
    chosen.sort_unstable_by_key(|(ip, _)| *ip);
    let open = admission.open_connections();
    chosen
        .into_iter()
        .map(|(ip, registered)| {
            let usage = registered.account.usage();
            SourceUsage {
                ip: ip.to_string(),
                id: registered.id.to_string(),
                bytes_up: usage.bytes_up,
                bytes_down: usage.bytes_down,
                tunnels: usage.tunnels,
                requests: usage.requests,
                denials: usage.denials.into_iter().collect(),
                reported: usage.reported.into_iter().collect(),
                connections: open.get(&ip).copied().unwrap_or(0) as u64,
                bandwidth: registered.account.limiter().rate(),
                since_ms: usage.since_ms,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_policy::reason::Reason;
    use crackbox_policy::Direction;
    use crackbox_policy::{Bandwidth, RegistrationSpec, SourceChange};
    use crackbox_wire::engine_config::Limits;
    use std::sync::Arc;

    #[test]
    fn records_sum_the_accounts_and_follow_the_query() {
        let put = |ip: &str, id: &str| SourceChange::Put(RegistrationSpec::parse(ip, id, &["a.test"]).unwrap());
        let capped = RegistrationSpec::parse("10.0.0.3", "b", &["a.test"])
            .unwrap()
            .with_bandwidth(Bandwidth::parse("1MiB/s").ok());
        let snapshot = Snapshot::empty_for(2).apply(
            1,
            &[put("10.0.0.2", "a"), SourceChange::Put(capped), put("10.0.0.1", "b")],
        );
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let account = &snapshot.lookup(ip("10.0.0.2")).unwrap().account;
        account.add_bytes(0, Direction::Up, 10);
        account.add_bytes(1, Direction::Down, 20);
        account.add_tunnel(1);
        account.add_request(0);
        account.add_denial(1, Reason::NotAllowed);
        let admission = Arc::new(Admission::new(&Limits::default(), 2));
        let _open = crate::plane::services::admission::Gate::new(Arc::clone(&admission), 1)
            .admit(ip("10.0.0.2"))
            .unwrap();
        let all = report(&snapshot, &UsageQuery::default(), &admission);
        let ips: Vec<&str> = all.iter().map(|u| u.ip.as_str()).collect();
        assert_eq!(ips, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
        let a = &all[1];
        assert_eq!((a.bytes_up, a.bytes_down, a.tunnels, a.requests), (10, 20, 1, 1));
        assert_eq!((a.connections, a.bandwidth), (1, None));
        assert_eq!(a.denials.get(&Reason::NotAllowed), Some(&1));
        assert_eq!(all[2].bandwidth, Some(1 << 20));
        let query = |ip: Option<&str>, id: Option<&str>| UsageQuery {
            ip: ip.map(str::to_string),
            id: id.map(str::to_string),
        };
        let cases = [
            (query(Some("10.0.0.2"), None), vec!["10.0.0.2"]),
            (query(Some("::ffff:10.0.0.2"), None), vec!["10.0.0.2"]),
            (query(Some("10.0.0.9"), None), vec![]),
            (query(Some("not an ip"), None), vec![]),
            (query(None, Some("b")), vec!["10.0.0.1", "10.0.0.3"]),
            (query(Some("10.0.0.3"), Some("b")), vec!["10.0.0.3"]),
            (query(Some("10.0.0.2"), Some("b")), vec![]),
        ];
        for (query, want) in cases {
            let got: Vec<String> = report(&snapshot, &query, &admission)
                .into_iter()
                .map(|u| u.ip)
                .collect();
            assert_eq!(got, want, "{query:?}");
        }
    }
}
