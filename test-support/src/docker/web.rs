//! The web upstream of the steered-interception tests: a node server (HTTP
//! on 80 and 8080, HTTPS on 443 with a test certificate) on a network the
//! test creates, known as `web.test` and `decoy.test`.

use super::{node_image, Upstream};

/// The upstream: answers `web {sni} {host} {path}` (no SNI part over HTTP).
const WEB_SERVER: &str = r#"
const answer = (req, res) => {
  const sni = req.socket.servername;
  res.end(["web", sni, req.headers.host, req.url].filter((part) => part !== undefined).join(" "));
};
require("https").createServer({ key: process.env.KEY, cert: process.env.CERT }, answer).listen(443);
require("http").createServer(answer).listen(80);
require("http").createServer(answer).listen(8080);
"#;

/// The web upstream and its certificate in PEM.
pub fn web_upstream() -> (Upstream, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["web.test".into(), "decoy.test".into()]).unwrap();
    let cert = certified.cert.pem();
    let env = [
        format!("CERT={cert}"),
        format!("KEY={}", certified.key_pair.serialize_pem()),
    ];
    let upstream = Upstream::start_serving(
        &["web.test", "decoy.test"],
        &node_image(),
        &["node", "-e", WEB_SERVER],
        &env,
    );
    (upstream, cert)
}
