//! The guard over one reached range of a peer's MR: the count in the QP's slot that keeps the
//! owner from withdrawing the MR or the QP while a requester copies, undone when it drops.

use std::sync::atomic::{AtomicU32, Ordering};

/// A reached range of a peer's MR ([`ReachView::resolve`](super::ReachView::resolve)): its first byte in this process,
/// valid until this drops (the owner's `ibv_dereg_mr`, `ibv_modify_qp` and `ibv_destroy_qp`
/// wait for it). Only the caller that resolved it uses it (the port's sending half,
/// `soft::reach::place`): the pointer never goes back up to the engine.
pub struct Reached<'a> {
    users: &'a AtomicU32,
    /// The first byte.
    pub ptr: *mut u8,
    /// The message's length: the bytes from `ptr` that the operation may touch.
    pub len: usize,
}

impl<'a> Reached<'a> {
    /// A guard over the QP slot's `users`, which the caller has already counted this use in
    /// (the MR's withdrawal waits on the QP slots, `ReachArena::withdraw_mr`); it uncounts it
    /// when dropped. `ptr` starts null, `len` at 0.
    pub fn new(users: &'a AtomicU32) -> Reached<'a> {
        Reached { users, ptr: std::ptr::null_mut(), len: 0 }
    }
}

impl Drop for Reached<'_> {
    fn drop(&mut self) {
        self.users.fetch_sub(1, Ordering::SeqCst);
    }
}
