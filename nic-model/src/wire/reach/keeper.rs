//! The keeper of a reach file: the thread whose life is the owner's life for its peers. It
//! holds a robust, process-shared mutex in the file's header; the kernel marks the mutex's
//! futex word `FUTEX_OWNER_DIED` (with no owner) as that thread dies, however it dies, and the
//! unlock at close clears it, so a peer sees the owner gone with one load
//! ([`ReachView::blocked`](super::ReachView::blocked)).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{ReachArena, FUTEX_TID_MASK, H_KEEPER, H_KEEPER_AT, H_KEEPER_TID, KEEPER_LEN};

impl ReachArena {
    /// Makes the calling thread the file's keeper, for as long as the returned guard lives on
    /// it: the thread locks the header's robust, process-shared mutex, and peers take the
    /// owner for alive while the mutex's word names that thread. When the thread dies (the
    /// process is killed) the kernel walks its robust list and marks the word
    /// `FUTEX_OWNER_DIED` with no owner; when the guard drops, the unlock clears it: either
    /// way every peer's next reach sees that the owner is gone
    /// ([`ReachView::blocked`](super::ReachView::blocked)).
    /// The device's NIC thread keeps it, since it lives exactly as long as the device.
    /// None if the mutex cannot be made (peers then send packets).
    pub fn keep(self: &Arc<Self>) -> Option<Keeper> {
        let mutex = self.keeper_mutex();
        // SAFETY: the header's keeper bytes are this owner's alone, reserved for the mutex
        // (KEEPER_LEN covers `pthread_mutex_t`, asserted below) and 8-aligned; it is
        // initialised once, here, before anyone locks it.
        let locked = unsafe {
            let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
            if libc::pthread_mutexattr_init(attr.as_mut_ptr()) != 0 {
                return None;
            }
            let ok =
                libc::pthread_mutexattr_setpshared(attr.as_mut_ptr(), libc::PTHREAD_PROCESS_SHARED)
                    == 0
                    && libc::pthread_mutexattr_setrobust(
                        attr.as_mut_ptr(),
                        libc::PTHREAD_MUTEX_ROBUST,
                    ) == 0
                    && libc::pthread_mutex_init(mutex, attr.as_ptr()) == 0;
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            ok && libc::pthread_mutex_lock(mutex) == 0
        };
        if !locked {
            return None;
        }
        let keeper = Keeper { arena: self.clone(), _on_this_thread: std::marker::PhantomData };
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        // The libc keeps the owner's thread id in the mutex's futex word (the kernel's robust
        // futex protocol requires it); find which word that is, so peers need not know the
        // libc's layout. The first word that holds it: glibc and musl put the lock word before
        // any owner field.
        let at = (0..KEEPER_LEN / 4)
            .map(|k| H_KEEPER + 4 * k)
            .find(|&o| self.mapping.word(o).load(Ordering::Relaxed) & FUTEX_TID_MASK == tid)?;
        self.mapping.word(H_KEEPER_TID).store(tid, Ordering::Relaxed);
        self.mapping.word(H_KEEPER_AT).store(at as u32, Ordering::Release);
        Some(keeper)
    }

    fn keeper_mutex(&self) -> *mut libc::pthread_mutex_t {
        const _: () = assert!(std::mem::size_of::<libc::pthread_mutex_t>() <= KEEPER_LEN);
        // SAFETY: within the header.
        unsafe { self.mapping.map.as_mut_ptr().add(H_KEEPER) as *mut libc::pthread_mutex_t }
    }
}

/// The keeper of a reach file ([`ReachArena::keep`]): while it lives, on the thread that made
/// it, peers take the owner for alive. Dropping it unlocks the keeper mutex.
pub struct Keeper {
    arena: Arc<ReachArena>,
    /// Unlocked by the thread that locked it: neither Send nor Sync.
    _on_this_thread: std::marker::PhantomData<*const ()>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // SAFETY: this thread locked the mutex in `keep` and still holds it.
        unsafe { libc::pthread_mutex_unlock(self.arena.keeper_mutex()) };
    }
}
