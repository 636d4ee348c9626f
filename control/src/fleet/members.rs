//! A call of the admin API to etcd (a policy write, a read of the inbox)
//! made on whichever member answers (docs/fleet.md, "When something
//! fails"): the shared client spreads its calls over every endpoint, so
//! with a member down some of them go to it. A call that failed without
//! reaching etcd (the connection to the member could not be made) cannot
//! have been applied, so it is made again on each endpoint in turn, and
//! only when none answers is etcd unreachable. Any other failure is the
//! caller's: a write etcd may have taken is never sent twice.

use super::connect::connect_to;
use super::writes::WriteError;
use super::Shared;
use etcd_client::Client;
use std::error::Error;
use std::future::Future;

impl Shared {
    /// `call` with the shared client; when it never reached etcd, with a
    /// client of each endpoint in turn until one answers.
    pub(super) async fn on_a_member<T, F, Fut>(&self, call: F) -> Result<T, WriteError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let first = match call(self.client()?).await {
            Ok(answer) => return Ok(answer),
            Err(err) if never_reached(&err) => err,
            Err(err) => return Err(failed(err)),
        };
        tracing::debug!(error = %first, "fleet: an etcd member could not be reached; trying each");
        let mut last = first.to_string();
        for endpoint in &self.settings.endpoints {
            let client = match connect_to(&self.settings, std::slice::from_ref(endpoint)).await {
                Ok(client) => client,
                Err(err) => {
                    last = format!("{endpoint}: {err}");
                    continue;
                }
            };
            match call(client).await {
                Ok(answer) => return Ok(answer),
                Err(err) if never_reached(&err) => last = format!("{endpoint}: {err}"),
                Err(err) => return Err(failed(err)),
            }
        }
        tracing::warn!(error = %last, "fleet: no etcd member could be reached");
        Err(WriteError::Unreachable)
    }
}

/// A call etcd failed, told in full in the log.
fn failed(err: etcd_client::Error) -> WriteError {
    tracing::warn!(error = %err, "fleet: etcd failed a call");
    WriteError::Etcd(err)
}

/// Whether `err` says the call never reached etcd: the connection to the
/// member could not be made (refused, no route, timed out connecting), so
/// nothing of it can have been applied.
fn never_reached(err: &etcd_client::Error) -> bool {
    let mut source: Option<&(dyn Error + 'static)> = match err {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(transport) => Some(transport),
        _ => None,
    };
    while let Some(err) = source {
        if err.is::<tonic::ConnectError>() {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_connection_is_a_call_that_never_reached_etcd() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let connect = tonic::ConnectError(Box::new(refused));
        let status = tonic::Status::from_error(Box::new(connect));
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(never_reached(&etcd_client::Error::GRpcStatus(status)));
        for reached in [
            tonic::Status::unavailable("etcdserver: request timed out"),
            tonic::Status::unknown("h2 protocol error: error reading a body from connection"),
        ] {
            assert!(!never_reached(&etcd_client::Error::GRpcStatus(reached)));
        }
        assert!(!never_reached(&etcd_client::Error::InvalidArgs("x".into())));
    }
}
