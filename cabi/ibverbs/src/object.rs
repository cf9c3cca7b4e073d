//! The C objects' plumbing, beneath every room (rdma-core's rxe.h: the casts from a C pointer
//! to the provider's object): the magic-word check that turns a pointer a program passes into
//! softverbs' box ([`obj`], [`ctx_of`]) and frees it ([`free`]), the open context ([`Ctx`]), and
//! the registry of C objects by the key the backend names them with, so events can name them.

use std::collections::HashMap;
use std::mem::offset_of;
use std::sync::Mutex;

use softverbs_cabi_abi::*;
use verbs_api::Context;

use crate::refuse;

/// A magic word after each C struct, different per object type, so a destroyed object or a
/// pointer to something else is refused with `EINVAL` instead of being used.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u64)]
pub(crate) enum Magic {
    Dead = 0,
    Context = 0x736f_6674_6374_7831,
    Pd = 0x736f_6674_7064_3031,
    Mr = 0x736f_6674_6d72_3031,
    Cq = 0x736f_6674_6371_3031,
    Channel = 0x736f_6674_6368_3031,
    Qp = 0x736f_6674_7170_3031,
    Srq = 0x736f_6674_7372_3031,
    Ah = 0x736f_6674_6168_3031,
    Mw = 0x736f_6674_6d77_3031,
}

/// Where a C object's box is, by the key the backend names it with (QPN, CQ id, SRQ id), so
/// events (completion and async) can name the C object.
pub(crate) static CQS: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);
pub(crate) static QPS: Mutex<Option<HashMap<u32, usize>>> = Mutex::new(None);
pub(crate) static SRQS: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

/// Record (`Some`) or forget (`None`) the C object for `key`.
pub(crate) fn track<K: std::hash::Hash + Eq>(
    map: &Mutex<Option<HashMap<K, usize>>>,
    key: K,
    ptr: Option<usize>,
) {
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    let m = m.get_or_insert_with(HashMap::new);
    match ptr {
        Some(p) => m.insert(key, p),
        None => m.remove(&key),
    };
}

/// The C object recorded for `key`, or NULL.
pub(crate) fn lookup<K: std::hash::Hash + Eq>(
    map: &Mutex<Option<HashMap<K, usize>>>,
    key: K,
) -> usize {
    let m = map.lock().unwrap_or_else(|e| e.into_inner());
    m.as_ref().and_then(|m| m.get(&key).copied()).unwrap_or(0)
}

/// Check `p` is a live object of kind `magic` (the magic word follows the C struct `C`) and
/// return the box it belongs to.
pub(crate) fn obj<'a, T, C>(what: &str, p: *mut C, magic: Magic) -> Option<&'a T> {
    if p.is_null() {
        refuse(what, libc::EINVAL, "NULL object");
        return None;
    }
    // SAFETY: objects we hand out are boxes of T whose first field is C and whose second is
    // the magic; a mismatching magic refuses memory that is not one (where readable).
    let m = unsafe { *((p as *const u8).add(std::mem::size_of::<C>()) as *const u64) };
    if m != magic as u64 {
        refuse(what, libc::EINVAL, "destroyed object, or not one softverbs made");
        return None;
    }
    // SAFETY: as above.
    Some(unsafe { &*(p as *const T) })
}

/// Free a box made by [`obj`]'s conventions after clearing its magic.
pub(crate) unsafe fn free<T, C>(p: *mut C) {
    // SAFETY: the caller checked p with obj(); the magic is cleared so later use is refused
    // while the allocator has not reused the memory.
    unsafe {
        *((p as *mut u8).add(std::mem::size_of::<C>()) as *mut u64) = Magic::Dead as u64;
        drop(Box::from_raw(p as *mut T));
    }
}

/// An open device: the `verbs_context` (and in it the `ibv_context` programs hold), then
/// softverbs' context.
#[repr(C)]
pub(crate) struct Ctx {
    pub v: verbs_context,
    pub magic: Magic,
    pub ctx: Context,
    /// The device's name and the token of the watcher that signals `async_fd`.
    pub name: String,
    pub watch: u64,
}

/// The [`Ctx`] behind an `ibv_context` pointer, or None (with a log line) if it is not an open
/// softverbs context.
pub(crate) fn ctx_of<'a>(what: &str, c: *mut ibv_context) -> Option<&'a Ctx> {
    if c.is_null() {
        refuse(what, libc::EINVAL, "the context is NULL");
        return None;
    }
    // SAFETY: an ibv_context we handed out sits at this offset in a Ctx; the magic check
    // refuses other memory where it can.
    let ctx = unsafe { &*((c as *mut u8).sub(offset_of!(verbs_context, context)) as *const Ctx) };
    if ctx.magic != Magic::Context {
        refuse(what, libc::EINVAL, "not an open device context (closed, or not softverbs')");
        return None;
    }
    Some(ctx)
}
