//! The admin API's policy writes in a fleet: they go to etcd, never to
//! this node's registry directly (the watch brings them back, to this node
//! as to every other). A write with an expected revision is an etcd
//! transaction comparing the key's `mod_revision`, so two writers that
//! read, change and write never lose each other's change.

use super::value::encode;
use super::Shared;
use crackbox_policy::{PolicyName, PolicySpec};
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
    /// etcd refused or failed.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
}

impl Shared {
    fn client(&self) -> Result<Client, WriteError> {
        self.client
            .lock()
            .expect("fleet client lock")
            .clone()
            .ok_or(WriteError::Unreachable)
    }

    /// Stores `policy` in etcd (only while it is at `expect`, when given:
    /// 0 means absent); the etcd revision of the write.
    pub async fn put_policy(&self, policy: &PolicySpec, expect: Option<u64>) -> Result<i64, WriteError> {
        let key = self.keys.policy(&policy.name);
        let compare: Vec<Compare> = expect
            .map(|expected| Compare::mod_revision(key.clone(), CompareOp::Equal, expected as i64))
            .into_iter()
            .collect();
        let txn = Txn::new()
            .when(compare)
            .and_then([TxnOp::put(key.clone(), encode(policy), None)])
            .or_else([TxnOp::get(key, None)]);
        let response = self.client()?.txn(txn).await?;
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

    /// Removes policy `name` from etcd; the etcd revision of the removal.
    pub async fn delete_policy(&self, name: &PolicyName) -> Result<i64, WriteError> {
        let response = self.client()?.delete(self.keys.policy(name), None).await?;
        Ok(response.header().map_or(0, |header| header.revision()))
    }
}
