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
        // Where the kernel will look when the thread dies: the thread's robust list starts at
        // the entry of the mutex it locked last (this one), and the list's head says where an
        // entry's futex word is. Peers read that word, so they need not know the C library's
        // layout; if it is not in this mutex or does not name this thread, the kernel would
        // not mark it, and there is no keeper.
        let word = robust_word()?;
        let mutex = mutex as usize;
        if word < mutex || word + 4 > mutex + KEEPER_LEN || !word.is_multiple_of(4) {
            return None;
        }
        let at = H_KEEPER + (word - mutex);
        if self.mapping.word(at).load(Ordering::Relaxed) & FUTEX_TID_MASK != tid {
            return None;
        }
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

/// The kernel's `struct robust_list_head` (`linux/futex.h`).
#[repr(C)]
struct RobustListHead {
    /// The first entry (`struct robust_list *`), the one locked last.
    list: usize,
    /// From an entry to its futex word, in bytes.
    futex_offset: libc::c_long,
    list_op_pending: usize,
}

/// The address of the futex word of the first entry on the calling thread's robust list: the
/// word the kernel marks `FUTEX_OWNER_DIED` when the thread dies holding that lock.
fn robust_word() -> Option<usize> {
    let mut head: *const RobustListHead = std::ptr::null();
    let mut len: libc::size_t = 0;
    // SAFETY: get_robust_list writes the head's address and size into the two locals.
    let rc = unsafe {
        libc::syscall(libc::SYS_get_robust_list, 0, &mut head as *mut _, &mut len as *mut _)
    };
    if rc != 0 || head.is_null() || len != std::mem::size_of::<RobustListHead>() {
        return None;
    }
    // SAFETY: the kernel returned the address of this thread's registered head, which the C
    // library keeps in the thread's control block for the thread's life.
    let h = unsafe { std::ptr::read(head) };
    // Bit 0 of an entry pointer marks a priority-inheritance lock; the head points to itself
    // when the list is empty.
    let entry = h.list & !1;
    if entry == 0 || entry == head as usize {
        return None;
    }
    Some(entry.wrapping_add(h.futex_offset as usize))
}
