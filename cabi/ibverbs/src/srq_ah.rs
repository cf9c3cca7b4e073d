//! Shared receive queues (`ibv_create_srq`, modify, query, destroy, and `ops.post_srq_recv`)
//! and address handles (`ibv_create_ah`, `ibv_create_ah_from_wc`, `ibv_init_ah_from_wc`).

use std::ffi::c_int;
use std::ptr::null_mut;

use verbs_api::{
    AddressHandle, AhAttr, Gid, SharedReceiveQueue, SrqAttr, SrqAttrMask, SrqInitAttr,
};

use crate::convert::post_recv_chain;
use crate::object::{ctx_of, free, obj, track, Magic, SRQS};
use crate::verbs::Pd;
use crate::{refuse, refuse_err, refuse_null};
use softverbs_cabi_abi::*;

/// A shared receive queue.
#[repr(C)]
pub(crate) struct Srq {
    c: ibv_srq,
    magic: Magic,
    pub srq: SharedReceiveQueue,
}

/// The SRQ box behind `p`, for QP creation.
pub(crate) fn srq_of<'a>(what: &str, p: *mut ibv_srq) -> Option<&'a Srq> {
    obj::<Srq, _>(what, p, Magic::Srq)
}

/// `ibv_create_srq`: the granted sizes are written back into `init->attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    p: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    let Some(pd) = obj::<Pd, _>("ibv_create_srq", p, Magic::Pd) else { return null_mut() };
    if init.is_null() {
        return refuse_null("ibv_create_srq", libc::EINVAL, "srq_init_attr is NULL");
    }
    // SAFETY: checked non-NULL.
    let a = unsafe { &mut (*init).attr };
    let ia = SrqInitAttr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit };
    match pd.pd.create_srq(&ia) {
        Ok(srq) => {
            if let Ok(q) = srq.query() {
                a.max_wr = q.max_wr;
                a.max_sge = q.max_sge;
            }
            // SAFETY: plain old data.
            let mut c: ibv_srq = unsafe { std::mem::zeroed() };
            c.context = pd.c.context;
            // SAFETY: checked non-NULL.
            c.srq_context = unsafe { (*init).srq_context };
            c.pd = p;
            let id = srq.id();
            let b = Box::into_raw(Box::new(Srq { c, magic: Magic::Srq, srq }));
            track(&SRQS, id, Some(b as usize));
            b as *mut ibv_srq
        }
        Err(e) => refuse_null("ibv_create_srq", e.errno.code(), &e.message),
    }
}

/// `ibv_modify_srq`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    p: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let Some(s) = srq_of("ibv_modify_srq", p) else { return libc::EINVAL };
    if attr.is_null() {
        return refuse("ibv_modify_srq", libc::EINVAL, "srq_attr is NULL");
    }
    // SAFETY: checked non-NULL.
    let a = unsafe { &*attr };
    let Some(m) = SrqAttrMask::from_bits(mask as u32) else {
        return refuse("ibv_modify_srq", libc::EINVAL, "unknown bits in srq_attr_mask");
    };
    let sa = SrqAttr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit };
    match s.srq.modify(&sa, m) {
        Ok(()) => 0,
        Err(e) => refuse_err("ibv_modify_srq", &e),
    }
}

/// `ibv_query_srq`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(p: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let Some(s) = srq_of("ibv_query_srq", p) else { return libc::EINVAL };
    if attr.is_null() {
        return refuse("ibv_query_srq", libc::EINVAL, "srq_attr is NULL");
    }
    match s.srq.query() {
        Ok(q) => {
            // SAFETY: checked non-NULL.
            unsafe {
                attr.write(ibv_srq_attr {
                    max_wr: q.max_wr,
                    max_sge: q.max_sge,
                    srq_limit: q.srq_limit,
                })
            };
            0
        }
        Err(e) => refuse_err("ibv_query_srq", &e),
    }
}

/// `ibv_destroy_srq`.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(p: *mut ibv_srq) -> c_int {
    let Some(s) = srq_of("ibv_destroy_srq", p) else { return libc::EINVAL };
    if let Err(e) = s.srq.clone().destroy() {
        return refuse_err("ibv_destroy_srq", &e);
    }
    track(&SRQS, s.srq.id(), None);
    // SAFETY: checked live.
    unsafe { free::<Srq, _>(p) };
    0
}

/// `ops.post_srq_recv`, behind the inline `ibv_post_srq_recv`.
pub(crate) unsafe extern "C" fn post_srq_recv(
    p: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let Some(s) = srq_of("ibv_post_srq_recv", p) else { return libc::EINVAL };
    post_recv_chain("ibv_post_srq_recv", wr, bad, |w| s.srq.post_recv(w))
}

/// An address handle.
#[repr(C)]
pub(crate) struct Ah {
    c: ibv_ah,
    magic: Magic,
    pub ah: AddressHandle,
}

/// The AH box behind `p`, for UD sends.
#[inline]
pub(crate) fn ah_of<'a>(what: &str, p: *mut ibv_ah) -> Option<&'a Ah> {
    obj::<Ah, _>(what, p, Magic::Ah)
}

/// softverbs' address vector of a `struct ibv_ah_attr`.
pub(crate) fn ah_attr(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global != 0,
        port_num: a.port_num,
        dgid: Gid(a.grh.dgid.raw),
        flow_label: a.grh.flow_label,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
    }
}

/// `struct ibv_ah_attr` of softverbs' address vector.
pub(crate) fn ah_attr_c(a: &AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: a.dgid.0 },
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global as u8,
        port_num: a.port_num,
    }
}

/// `ibv_create_ah`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(p: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    let Some(pd) = obj::<Pd, _>("ibv_create_ah", p, Magic::Pd) else { return null_mut() };
    if attr.is_null() {
        return refuse_null("ibv_create_ah", libc::EINVAL, "ah_attr is NULL");
    }
    // SAFETY: checked non-NULL.
    match pd.pd.create_ah(&ah_attr(unsafe { &*attr })) {
        Ok(ah) => {
            let c = ibv_ah { context: pd.c.context, pd: p, handle: 0 };
            Box::into_raw(Box::new(Ah { c, magic: Magic::Ah, ah })) as *mut ibv_ah
        }
        Err(e) => refuse_null("ibv_create_ah", e.errno.code(), &e.message),
    }
}

/// `ibv_destroy_ah`.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(p: *mut ibv_ah) -> c_int {
    if ah_of("ibv_destroy_ah", p).is_none() {
        return libc::EINVAL;
    }
    // SAFETY: checked live.
    unsafe { free::<Ah, _>(p) };
    0
}

/// `ibv_init_ah_from_wc`: the address vector that answers the sender of `wc` (its GRH's
/// source GID when the completion has one).
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    c: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    let Some(ctx) = ctx_of("ibv_init_ah_from_wc", c) else {
        return -1;
    };
    if wc.is_null() || attr.is_null() {
        refuse("ibv_init_ah_from_wc", libc::EINVAL, "wc or ah_attr is NULL");
        return -1;
    }
    // SAFETY: checked non-NULL.
    let w = unsafe { &*wc };
    let mut a = ibv_ah_attr {
        dlid: w.slid,
        sl: w.sl,
        src_path_bits: w.dlid_path_bits,
        port_num: port,
        ..Default::default()
    };
    if w.wc_flags & 1 != 0 {
        if grh.is_null() {
            refuse("ibv_init_ah_from_wc", libc::EINVAL, "the completion has a GRH but grh is NULL");
            return -1;
        }
        // SAFETY: checked non-NULL; the GRH the NIC wrote at the front of the receive buffer.
        let g = unsafe { &*grh };
        let flow = u32::from_be(g.version_tclass_flow);
        a.is_global = 1;
        a.grh.dgid = g.sgid;
        a.grh.flow_label = flow & 0xfffff;
        a.grh.sgid_index = 0;
        // RoCE v2 over IPv4 (as libibverbs tells it): 20 zero bytes, then the IPv4 header,
        // whose source address (bytes 32..36 of the area) is the sender's IPv4-mapped GID,
        // answered from the port's IPv4 GID (index 1).
        // SAFETY: the 40-byte GRH area the caller's buffer holds.
        let raw = unsafe { std::slice::from_raw_parts(grh.cast::<u8>(), 40) };
        if raw[..20].iter().all(|&b| b == 0) && raw[20] >> 4 == 4 {
            a.grh.dgid.raw = [0; 16];
            a.grh.dgid.raw[10] = 0xff;
            a.grh.dgid.raw[11] = 0xff;
            a.grh.dgid.raw[12..].copy_from_slice(&raw[32..36]);
            a.grh.sgid_index = 1;
            a.grh.flow_label = 0;
            a.grh.traffic_class = raw[21] >> 2;
        } else if raw[0] >> 4 == 6 {
            // RoCE v2 over IPv6: answered from the GID the datagram was sent to (its IPv6
            // destination), as libibverbs' ibv_init_ah_from_wc finds its index in the table.
            let sent_to = g.dgid.raw;
            let mut table =
                (0..64u32).map_while(|i| ctx.ctx.query_gid(port, i).ok().map(|x| (i, x)));
            if let Some((i, _)) = table.find(|(_, x)| x.0 == sent_to) {
                a.grh.sgid_index = i as u8;
            }
        }
        a.grh.hop_limit = 0xff;
        a.grh.traffic_class = ((flow >> 20) & 0xff) as u8;
    }
    // SAFETY: checked non-NULL.
    unsafe { attr.write(a) };
    0
}

/// `ibv_create_ah_from_wc`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    p: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    let Some(pd) = obj::<Pd, _>("ibv_create_ah_from_wc", p, Magic::Pd) else { return null_mut() };
    let mut a = ibv_ah_attr::default();
    // SAFETY: forwarded caller pointers, checked there.
    if unsafe { ibv_init_ah_from_wc(pd.c.context, port, wc, grh, &mut a) } != 0 {
        return null_mut();
    }
    // SAFETY: p checked live; a is ours.
    unsafe { ibv_create_ah(p, &mut a) }
}
