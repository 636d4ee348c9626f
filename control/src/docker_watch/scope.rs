//! Which networks the watcher answers for: the networks of crackbox's own
//! container, or (crackbox on the host) the networks named by
//! `--docker-network`. Read again at every reconciliation, since a daemon
//! container gains and loses networks (`crackbox run --daemon`).

use super::plan::Scope;
use bollard::query_parameters::InspectNetworkOptions;
use bollard::Docker;
use crackbox_policy::watch::Subnet;

/// Where the watched networks come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The networks of this container (crackbox runs in it).
    OwnContainer(String),
    /// Networks by name (crackbox runs on the host).
    Named(Vec<String>),
}

/// The networks in scope now and their subnets. A named network that does
/// not exist (yet) is left out with a warning.
pub async fn resolve(docker: &Docker, source: &Source) -> Result<Scope, String> {
    let mut scope = Scope::default();
    match source {
        Source::OwnContainer(id) => {
            let inspect = docker
                .inspect_container(id, None)
                .await
                .map_err(|e| format!("inspecting crackbox's own container {id}: {e}"))?;
            let networks = inspect.network_settings.and_then(|n| n.networks).unwrap_or_default();
            for endpoint in networks.values() {
                let Some(network) = endpoint.network_id.clone().filter(|n| !n.is_empty()) else {
                    continue;
                };
                let v4 = (endpoint.ip_address.as_deref(), endpoint.ip_prefix_len);
                let v6 = (endpoint.global_ipv6_address.as_deref(), endpoint.global_ipv6_prefix_len);
                for (addr, prefix) in [v4, v6] {
                    if let (Some(addr), Some(prefix)) = (addr.filter(|a| !a.is_empty()), prefix) {
                        let field = "the container's IPAddress/IPPrefixLen";
                        scope
                            .subnets
                            .extend(subnet(&network, field, &format!("{addr}/{prefix}")));
                    }
                }
                scope.networks.insert(network);
            }
        }
        Source::Named(names) => {
            for name in names {
                match docker.inspect_network(name, None::<InspectNetworkOptions>).await {
                    Ok(network) => {
                        let configs = network.ipam.and_then(|i| i.config).unwrap_or_default();
                        for text in configs.into_iter().filter_map(|c| c.subnet) {
                            scope.subnets.extend(subnet(name, "IPAM.Config.Subnet", &text));
                        }
                        scope.networks.extend(network.id);
                    }
                    Err(e) => tracing::warn!(network = %name, error = %e, "watched Docker network not found"),
                }
            }
        }
    }
    Ok(scope)
}

/// The subnet Docker gave as `text` in `field` of `network`; a warning
/// naming both, and none, when it is no subnet.
fn subnet(network: &str, field: &str, text: &str) -> Option<Subnet> {
    text.parse()
        .map_err(|err| tracing::warn!(%network, field, error = %err, "watched Docker network: subnet left out"))
        .ok()
}

/// This process's container id, from the Docker bind mounts in
/// `/proc/self/mountinfo` (`.../containers/<64 hex>/hostname`).
pub fn own_container_id() -> Option<String> {
    container_id_in_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").ok()?)
}

fn container_id_in_mountinfo(mountinfo: &str) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        line.split_whitespace().find_map(|field| {
            let (_, rest) = field.split_once("/containers/")?;
            let id = rest.split('/').next()?;
            (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_id_comes_from_the_docker_bind_mounts() {
        let id = "0123456789abcdef".repeat(4);
        let inside = format!(
            "612 590 0:52 / / rw,relatime - overlay overlay rw\n\
             631 612 254:1 /var/lib/docker/containers/{id}/hostname /etc/hostname rw - ext4 /dev/vda1 rw\n"
        );
        assert_eq!(container_id_in_mountinfo(&inside), Some(id));
        let host = "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
                    40 22 0:35 / /var/lib/docker/containers rw - tmpfs tmpfs rw\n";
        assert_eq!(container_id_in_mountinfo(host), None);
        assert_eq!(container_id_in_mountinfo(""), None);
    }
}
