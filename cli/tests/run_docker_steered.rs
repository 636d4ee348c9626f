//! `crackbox run` (docker backend) with steered interception, the default:
//! a workload that ignores the proxy variables reaches allowed names on 80
//! and 443 and nothing else, with the proxy container binding 53, 80 and
//! 443 on the jail network without any capability. The upstream is
//! `run_support`'s web upstream (`web.test` and `decoy.test`, a node server
//! on a network the test creates).

use crackbox_test_support::describe;
use crackbox_test_support::docker::*;
use crackbox_test_support::steer_probe;

#[test]
fn clients_without_proxy_support_reach_allowed_names_on_80_and_443_only() {
    if !docker_ready() {
        return;
    }
    let (upstream, cert) = web_upstream();
    let id = unique("steered");
    let image = node_image();
    let script = steer_probe::script(&cert, &upstream.ip);
    let out = run_command_with(&upstream, &id, "web.test", &["--image", &image], &["sh", "-c", &script])
        .output()
        .unwrap();
    steer_probe::assert_answers(&out);
    assert_eq!(leftovers(&id), Vec::<String>::new());
}

#[test]
fn proxy_aware_clients_keep_using_the_proxy_when_steered() {
    if !docker_ready() {
        return;
    }
    let (upstream, cert) = web_upstream();
    let id = unique("steered-proxy");
    let script = steer_probe::proxied_script(&cert);
    let out = run_command_with(&upstream, &id, "web.test", &[], &["sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    steer_probe::assert_proxied(&String::from_utf8_lossy(&out.stdout), &describe(&out));
    assert_eq!(leftovers(&id), Vec::<String>::new());
}
