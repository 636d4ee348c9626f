//! This node's name in the fleet, held while its inbox runs: the key
//! `PREFIX/nodes/NODE`, put under the node's lease only where no other lease
//! holds it (docs/fleet.md, "Asks across the fleet"). A second daemon
//! started with a name in use would otherwise publish its requests over
//! the first's and take the answers left for the first, applying each to
//! its own request of the same id: another sandbox, another host. Until
//! the name is free (the other daemon stopped and its lease ran out) such
//! a daemon neither publishes nor takes answers, and says so once. A node
//! restarted after a crash waits the same way for its last lease to run
//! out; what it holds meanwhile is published, and what was left for it
//! taken, once it has its name.

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};

/// What this daemon knows of its claim, across inbox sessions.
#[derive(Debug, Default)]
pub(super) struct NameClaim {
    /// The lease that last held the name for this daemon: a new session
    /// takes the name over from it rather than wait for it to run out.
    held_by: Option<i64>,
    /// Whether the name being taken was logged (once until it is claimed).
    told: bool,
}

/// Why a claim failed.
#[derive(Debug)]
pub(super) enum ClaimError {
    /// Another daemon's lease holds the name.
    Taken,
    /// etcd did not answer.
    Etcd(etcd_client::Error),
}

impl NameClaim {
    /// Puts `key` (node `node`'s) under `lease` when no lease holds it, or
    /// the one that last held it for this daemon does.
    pub(super) async fn claim(
        &mut self,
        client: &mut Client,
        key: &str,
        node: &str,
        lease: i64,
    ) -> Result<(), ClaimError> {
        let put = || TxnOp::put(key, node, Some(PutOptions::new().with_lease(lease)));
        let free = Compare::create_revision(key, CompareOp::Equal, 0);
        let mut taken = put_when(client, free, put()).await?;
        if let (false, Some(held_by)) = (taken, self.held_by) {
            taken = put_when(client, Compare::lease(key, CompareOp::Equal, held_by), put()).await?;
        }
        if !taken {
            if !self.told {
                tracing::warn!(
                    node,
                    key,
                    "fleet: this node's name is held under another lease: another running daemon has this \
                     --fleet-node, or this node restarted and its last lease has not run out yet \
                     (--fleet-lease-ttl); until it is free this node publishes no request and takes no answer"
                );
                self.told = true;
            }
            return Err(ClaimError::Taken);
        }
        if std::mem::take(&mut self.told) {
            tracing::info!(
                node,
                "fleet: this node's name is free again and now held by this daemon"
            );
        }
        self.held_by = Some(lease);
        Ok(())
    }
}

/// Runs `op` when `compare` holds; whether it did.
async fn put_when(client: &mut Client, compare: Compare, op: TxnOp) -> Result<bool, ClaimError> {
    let txn = Txn::new().when([compare]).and_then([op]);
    let response = client.txn(txn).await.map_err(ClaimError::Etcd)?;
    Ok(response.succeeded())
}
