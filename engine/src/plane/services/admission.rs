//! Admission: caps on concurrent client connections, per source and total,
//! so one sandbox cannot starve the others or exhaust the fd table.

use crackbox_policy::engine_config::Limits;
use rustc_hash::FxHashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Connection counts shared by all core threads.
pub struct Admission {
    per_source_cap: usize,
    total_cap: usize,
    total: AtomicUsize,
    per_source: Mutex<FxHashMap<IpAddr, usize>>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This source holds its maximum of concurrent connections.
    SourceCap,
    /// The engine holds its maximum of concurrent connections.
    TotalCap,
}

impl Admission {
    /// Caps from the engine limits.
    pub fn new(limits: &Limits) -> Self {
        Admission {
            per_source_cap: limits.max_connections_per_source,
            total_cap: limits.max_connections_total,
            total: AtomicUsize::new(0),
            per_source: Mutex::new(FxHashMap::default()),
        }
    }

    /// Admits one connection from `source`; it counts until the ticket drops.
    pub fn admit(self: &Arc<Self>, source: IpAddr) -> Result<Ticket, Refusal> {
        if self.total.fetch_add(1, Ordering::AcqRel) >= self.total_cap {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::TotalCap);
        }
        let mut per_source = self.per_source.lock().unwrap_or_else(|p| p.into_inner());
        let count = per_source.entry(source).or_insert(0);
        if *count >= self.per_source_cap {
            drop(per_source);
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::SourceCap);
        }
        *count += 1;
        Ok(Ticket {
            admission: Arc::clone(self),
            source,
        })
    }

    /// Client connections open now, all sources together.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// Connections open now, by source (sources with none are left out).
    pub fn open_connections(&self) -> FxHashMap<IpAddr, usize> {
        self.per_source.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn release(&self, source: IpAddr) {
        let mut per_source = self.per_source.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = per_source.get_mut(&source) {
            *count -= 1;
            if *count == 0 {
                per_source.remove(&source);
            }
        }
        self.total.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One admitted connection.
pub struct Ticket {
    admission: Arc<Admission>,
    source: IpAddr,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.release(self.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_source_and_total() {
        let limits = Limits {
            max_connections_per_source: 2,
            max_connections_total: 3,
            ..Limits::default()
        };
        let admission = Arc::new(Admission::new(&limits));
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let a1 = admission.admit(a).unwrap();
        let _a2 = admission.admit(a).unwrap();
        assert_eq!(admission.admit(a).err(), Some(Refusal::SourceCap));
        let _b1 = admission.admit(b).unwrap();
        assert_eq!(admission.admit(b).err(), Some(Refusal::TotalCap));
        assert_eq!(admission.open_connections().get(&a), Some(&2));
        drop(a1);
        assert!(admission.admit(b).is_ok());
        assert_eq!(admission.open_connections().get(&a), Some(&1));
    }
}
