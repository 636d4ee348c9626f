//! One core thread's handles on the registrations (sandboxes) its
//! connections work for. A connection holds an `Rc<Sandbox>`, so taking and
//! dropping one costs no atomic reference count on the registration's id
//! and account, which every core thread touches.
//!
//! A decision borrows the registration from the snapshot in force
//! (`crackbox_policy::decide_ref`); [`Sandboxes::handle`] finds this
//! thread's handle for its account (keyed by the account's address, which
//! the handle keeps alive, so the address is never another's) or makes one:
//! the shared reference counts move once per registration and thread, not
//! once per connection. The once-a-second sweep drops the handles no
//! connection holds and no decision asked for since the sweep before.

use crate::usage::Account;
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

/// The registration a connection works for: its id (counted with every
/// decision) and its account (usage and cap).
pub(crate) struct Sandbox {
    pub(crate) id: Arc<str>,
    pub(crate) account: Arc<Account>,
}

struct Entry {
    sandbox: Rc<Sandbox>,
    /// Asked for since the last sweep.
    used: Cell<bool>,
}

/// This thread's handles, by account.
#[derive(Default)]
pub(crate) struct Sandboxes {
    table: RefCell<FxHashMap<usize, Entry>>,
}

impl Sandboxes {
    /// This thread's handle on the registration with `id` and `account`.
    pub(crate) fn handle(&self, id: &Arc<str>, account: &Arc<Account>) -> Rc<Sandbox> {
        let mut table = self.table.borrow_mut();
        let entry = table.entry(Arc::as_ptr(account) as usize).or_insert_with(|| Entry {
            sandbox: Rc::new(Sandbox {
                id: Arc::clone(id),
                account: Arc::clone(account),
            }),
            used: Cell::new(false),
        });
        entry.used.set(true);
        Rc::clone(&entry.sandbox)
    }

    /// Drops the handles nothing holds and nothing asked for since the
    /// last sweep.
    pub(crate) fn sweep(&self) {
        self.table
            .borrow_mut()
            .retain(|_, entry| entry.used.replace(false) || Rc::strong_count(&entry.sandbox) > 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_handle_per_account_until_nothing_holds_it() {
        let sandboxes = Sandboxes::default();
        let (id, account): (Arc<str>, Arc<Account>) = (Arc::from("a"), Arc::new(Account::new(1, Arc::default())));
        let first = sandboxes.handle(&id, &account);
        let again = sandboxes.handle(&id, &account);
        assert!(Rc::ptr_eq(&first, &again));
        assert_eq!(Arc::strong_count(&account), 2, "the thread's handle, once");
        let other = sandboxes.handle(&id, &Arc::new(Account::new(1, Arc::default())));
        assert!(!Rc::ptr_eq(&first, &other));
        drop((again, other));
        sandboxes.sweep();
        sandboxes.sweep();
        assert_eq!(sandboxes.table.borrow().len(), 1, "the one still held stays");
        drop(first);
        sandboxes.sweep();
        assert_eq!(Arc::strong_count(&account), 1);
    }
}
