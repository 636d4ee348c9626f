//! The admin API's policy writes in a fleet: they go to etcd, never to
//! this node's registry directly (the watch brings them back, to this node
//! as to every other). A write with an expected revision is an etcd
//! transaction comparing the key's `mod_revision`, so two writers that
//! read, change and write never lose each other's change.

use super::value::{decode_policy, encode};
use super::Shared;
use crackbox_policy::{AllowEntry, PolicyName, PolicySpec};
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

/// Why a write did not land in etcd.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// No connection to etcd now.
    #[error("etcd is unreachable: the policies cannot change now (the last ones stay enforced)")]
    Unreachable,
    /// The stored policy is not at the expected revision.
    #[error("policy {name:?} is at revision {actual}, not {expected}")]
    Stale {
        /// The policy.
        name: PolicyName,
        /// The revision the write expected.
        expected: u64,
        /// The revision etcd holds (0: none).
        actual: u64,
    },
    /// etcd refused or failed; a write that got no answer may still land.
    #[error("etcd: {} (a write that got no answer may still land: read the policy before writing it again, or write with the revision read)", short(.0))]
    Etcd(#[from] etcd_client::Error),
    /// The node holding a request did not take the answer left for it in time.
    #[error("node {0:?} did not take the answer within 5 s (is it connected?); it stays in etcd for it")]
    NotTaken(String),
    /// The node holding a request refused the answer left for it.
    #[error("node {node:?} refused the answer: {reason}")]
    Refused {
        /// The node.
        node: String,
        /// Why (its admin API's message).
        reason: String,
    },
    /// The policy a name was to join is not in etcd, or not a policy, or full.
    #[error("policy {0:?} is not in etcd, or holds the most entries it may")]
    NoRoom(PolicyName),
}

/// How often a name is tried again when another writer changed the policy
/// between the read and the write.
const ALLOW_ATTEMPTS: usize = 32;

impl Shared {
    /// The connection the sync task holds.
    pub(super) fn client(&self) -> Result<Client, WriteError> {
        self.client
            .lock()
            .expect("fleet client lock")
            .clone()
            .ok_or(WriteError::Unreachable)
    }

    /// Stores `policy` in etcd (only while it is at `expect`, when given:
    /// 0 means absent); the etcd revision of the write, or the stored one's
    /// when it holds the same policy already (nothing is written then).
    pub async fn put_policy(&self, policy: &PolicySpec, expect: Option<u64>) -> Result<i64, WriteError> {
        let key = self.keys.policy(&policy.name);
        if let Some(revision) = self.same_stored(policy, expect).await? {
            return Ok(revision);
        }
        let compare: Vec<Compare> = expect
            .map(|expected| Compare::mod_revision(key.clone(), CompareOp::Equal, expected as i64))
            .into_iter()
            .collect();
        let txn = Txn::new()
            .when(compare)
            .and_then([TxnOp::put(key.clone(), encode(policy), None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self
            .on_a_member(|mut client| {
                let txn = txn.clone();
                async move { client.txn(txn).await }
            })
            .await?;
        if response.succeeded() {
            return Ok(response.header().map_or(0, |header| header.revision()));
        }
        let actual = response
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Get(get) => Some(get.kvs().first().map_or(0, |kv| kv.mod_revision())),
                _ => None,
            })
            .unwrap_or(0);
        Err(WriteError::Stale {
            name: policy.name.clone(),
            expected: expect.unwrap_or(0),
            actual: actual.max(0) as u64,
        })
    }

    /// The revision of the policy etcd stores under `policy`'s name when it
    /// is the same policy (revision aside) and at `expect`, when given: a
    /// write that would change nothing (docs/admin-api.md, "Named policies").
    async fn same_stored(&self, policy: &PolicySpec, expect: Option<u64>) -> Result<Option<i64>, WriteError> {
        let key = self.keys.policy(&policy.name);
        let read = self
            .on_a_member(|mut client| {
                let key = key.clone();
                async move { client.get(key, None).await }
            })
            .await?;
        let same = read.kvs().first().and_then(|kv| {
            let stored = decode_policy(policy.name.clone(), kv.value(), kv.mod_revision()).ok()?;
            let at = expect.is_none_or(|expected| expected == stored.revision);
            (at && stored.same_content(policy)).then_some(kv.mod_revision())
        });
        Ok(same)
    }

    /// Adds `entry` to the allow entries of policy `name` in etcd (an ask
    /// answered `always` for a policy): read, widen, and write only while
    /// the key is still at the revision read (a transaction), again when
    /// another writer came between, so concurrent answers all land. The etcd
    /// revision at which the policy holds the entry.
    pub async fn allow_in_policy(&self, name: &PolicyName, entry: &AllowEntry) -> Result<i64, WriteError> {
        let key = self.keys.policy(name);
        for _ in 0..ALLOW_ATTEMPTS {
            let read = self
                .on_a_member(|mut client| {
                    let key = key.clone();
                    async move { client.get(key, None).await }
                })
                .await?;
            let Some(kv) = read.kvs().first() else {
                return Err(WriteError::NoRoom(name.clone()));
            };
            let policy = decode_policy(name.clone(), kv.value(), kv.mod_revision())
                .map_err(|_| WriteError::NoRoom(name.clone()))?;
            let allowlist = policy
                .allowlist
                .with_entry(entry.clone())
                .ok_or_else(|| WriteError::NoRoom(name.clone()))?;
            if allowlist == policy.allowlist {
                return Ok(read.header().map_or(0, |header| header.revision()));
            }
            let widened = PolicySpec { allowlist, ..policy };
            let txn = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision())])
                .and_then([TxnOp::put(key.clone(), encode(&widened), None)]);
            let response = self
                .on_a_member(|mut client| {
                    let txn = txn.clone();
                    async move { client.txn(txn).await }
                })
                .await?;
            if response.succeeded() {
                return Ok(response.header().map_or(0, |header| header.revision()));
            }
            tracing::debug!(policy = %name, "fleet: the policy changed between read and write; trying again");
        }
        Err(WriteError::Etcd(etcd_client::Error::InvalidArgs(format!(
            "policy {name:?} kept changing under {ALLOW_ATTEMPTS} attempts"
        ))))
    }

    /// Removes policy `name` from etcd; the etcd revision of the removal.
    pub async fn delete_policy(&self, name: &PolicyName) -> Result<i64, WriteError> {
        let key = self.keys.policy(name);
        let response = self
            .on_a_member(|mut client| {
                let key = key.clone();
                async move { client.delete(key, None).await }
            })
            .await?;
        Ok(response.header().map_or(0, |header| header.revision()))
    }
}

/// What a failure of etcd says, without the transport's internals (they
/// go to the log).
fn short(err: &etcd_client::Error) -> String {
    match err {
        etcd_client::Error::GRpcStatus(status) => status.message().to_string(),
        other => other.to_string(),
    }
}
