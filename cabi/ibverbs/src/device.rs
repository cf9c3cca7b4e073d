//! Devices and contexts: `ibv_get_device_list` and the device's name and GUID,
//! `ibv_open_device`/`ibv_close_device` (the `verbs_context` in front of the `ibv_context`), and
//! the queries: device, port, GID, GID type, P_Key, and the async events.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::size_of;
use std::ptr::null_mut;
use std::sync::OnceLock;

use verbs_api::provider::Provider;
use verbs_api::{DeviceAttr, GidEntry, GidType, IbvEnum, PortAttr};

use crate::convert::async_event_c;
use crate::object::ctx_of;
use crate::{refuse, refuse_err, refuse_null, set_errno, soft};
use softverbs_cabi_abi::*;

/// One listed device: the C struct, then what softverbs knows of it.
#[repr(C)]
pub(crate) struct Dev {
    c: ibv_device,
    pub(crate) name: String,
    guid: u64,
    index: c_int,
}

// SAFETY: a listed device is never written after it is made; its `_ops` pointers are NULL.
unsafe impl Sync for Dev {}
// SAFETY: as above.
unsafe impl Send for Dev {}

/// The devices, made once per process (device pointers stay valid for its life, as the
/// lists libibverbs returns hold the same devices).
fn devices() -> Result<&'static [Dev], c_int> {
    static DEVS: OnceLock<Result<Vec<Dev>, c_int>> = OnceLock::new();
    DEVS.get_or_init(|| {
        let soft = soft().map_err(|e| refuse_err("ibv_get_device_list", e))?;
        let list = Provider::devices(soft).map_err(|e| refuse_err("ibv_get_device_list", &e))?;
        Ok(list
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                // SAFETY: ibv_device is plain old data; all zeroes is a valid value.
                let mut c: ibv_device = unsafe { std::mem::zeroed() };
                c.node_type = 1; // IBV_NODE_CA
                c.transport_type = 0; // IBV_TRANSPORT_IB, as rxe reports
                fill(&mut c.name, &d.name);
                fill(&mut c.dev_name, &format!("uverbs{i}"));
                fill(&mut c.dev_path, &format!("/sys/class/infiniband_verbs/uverbs{i}"));
                fill(&mut c.ibdev_path, &format!("/sys/class/infiniband/{}", d.name));
                Dev { c, name: d.name, guid: d.node_guid, index: i as c_int }
            })
            .collect())
    })
    .as_ref()
    .map(|v| v.as_slice())
    .map_err(|e| *e)
}

/// Copy `s` into a C char array, NUL-terminated, cut to fit.
fn fill(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    dst[n] = 0;
}

/// The listed device behind `dev`, if it is one.
pub(crate) fn dev_of(dev: *mut ibv_device) -> Option<&'static Dev> {
    devices().ok()?.iter().find(|d| std::ptr::eq(&d.c, dev)).map(|d| d as &Dev)
}

/// `ibv_get_device_list`: a NULL-terminated array of the soft devices.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let devs = match devices() {
        Ok(d) => d,
        Err(e) => {
            set_errno(e);
            return null_mut();
        }
    };
    // SAFETY: calloc of n+1 pointers; freed by ibv_free_device_list.
    let arr = unsafe { libc::calloc(devs.len() + 1, size_of::<*mut ibv_device>()) }
        as *mut *mut ibv_device;
    if arr.is_null() {
        return refuse_null("ibv_get_device_list", libc::ENOMEM, "out of memory");
    }
    for (i, d) in devs.iter().enumerate() {
        // SAFETY: i < len + 1.
        unsafe { *arr.add(i) = &d.c as *const ibv_device as *mut ibv_device };
    }
    if !num.is_null() {
        // SAFETY: the caller passed a valid int pointer.
        unsafe { *num = devs.len() as c_int };
    }
    arr
}

/// `ibv_free_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: list came from ibv_get_device_list's calloc (or is NULL).
    unsafe { libc::free(list as *mut c_void) };
}

/// `ibv_get_device_name`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    match dev_of(dev) {
        Some(d) => d.c.name.as_ptr(),
        None => refuse_null("ibv_get_device_name", libc::EINVAL, "not a listed device"),
    }
}

/// `ibv_get_device_guid`: the node GUID in network byte order.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    dev_of(dev).map_or(0, |d| d.guid.to_be())
}

/// `ibv_get_device_index`: the device's position in the list (-1 for a foreign pointer).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    dev_of(dev).map_or(-1, |d| d.index)
}

/// Fill `struct ibv_device_attr` from softverbs' attributes.
fn device_attr(a: &DeviceAttr) -> ibv_device_attr {
    // SAFETY: plain old data.
    let mut d: ibv_device_attr = unsafe { std::mem::zeroed() };
    fill(&mut d.fw_ver, &a.fw_ver);
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.sys_image_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = 0xffff_f000;
    d.vendor_id = a.vendor_id;
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = a.hw_ver;
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    d.max_qp = i(a.max_qp);
    d.max_qp_wr = i(a.max_qp_wr);
    // IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_N_NOTIFY_CQ,
    // IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B, as rxe has them.
    d.device_cap_flags = (1 << 12) | (1 << 13) | (1 << 14) | (1 << 17) | (1 << 24);
    // The engine's windows share the MRs' limit.
    d.max_mw = i(a.max_mr);
    d.max_sge = i(a.max_sge);
    d.max_sge_rd = i(a.max_sge);
    d.max_cq = i(a.max_cq);
    d.max_cqe = i(a.max_cqe);
    d.max_mr = i(a.max_mr);
    d.max_pd = i(a.max_pd);
    d.max_qp_rd_atom = i(a.max_qp_rd_atom);
    d.max_res_rd_atom = i(a.max_qp_rd_atom.saturating_mul(a.max_qp));
    d.max_qp_init_rd_atom = i(a.max_qp_init_rd_atom);
    d.atomic_cap = if a.atomic_hca { 1 } else { 0 };
    d.max_ah = i(a.max_ah);
    d.max_srq = i(a.max_srq);
    d.max_srq_wr = i(a.max_srq_wr);
    d.max_srq_sge = i(a.max_srq_sge);
    d.max_pkeys = a.max_pkeys;
    d.max_mcast_grp = i(a.max_mcast_grp);
    d.max_mcast_qp_attach = i(a.max_mcast_qp_attach);
    d.max_total_mcast_qp_attach = i(a.max_total_mcast_qp_attach);
    d.local_ca_ack_delay = 15;
    d.phys_port_cnt = a.phys_port_cnt;
    d
}

/// `ibv_query_device`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    c: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    let Some(ctx) = ctx_of("ibv_query_device", c) else { return libc::EINVAL };
    if attr.is_null() {
        return refuse("ibv_query_device", libc::EINVAL, "device_attr is NULL");
    }
    match ctx.ctx.query_device() {
        // SAFETY: attr points at a struct ibv_device_attr (checked non-NULL).
        Ok(a) => unsafe { attr.write(device_attr(&a)) },
        Err(e) => return refuse_err("ibv_query_device", &e),
    }
    0
}

/// `odp_caps` as rxe reports them (`rxe_init_device_param`): `IBV_ODP_SUPPORT` (no implicit
/// MRs); RC: SEND, RECV, WRITE, READ, ATOMIC, SRQ_RECV; UC: none; UD: SEND, RECV, SRQ_RECV.
/// (rxe's RC FLUSH and ATOMIC_WRITE bits follow those operations.)
const ODP_CAPS: [u64; 3] = {
    const SEND: u64 = 1;
    const RECV: u64 = 1 << 1;
    const WRITE: u64 = 1 << 2;
    const READ: u64 = 1 << 3;
    const ATOMIC: u64 = 1 << 4;
    const SRQ_RECV: u64 = 1 << 5;
    const FLUSH: u64 = 1 << 6;
    const ATOMIC_WRITE: u64 = 1 << 7;
    let rc = SEND | RECV | WRITE | READ | ATOMIC | SRQ_RECV | FLUSH | ATOMIC_WRITE;
    let (uc, ud) = (0u64, SEND | RECV | SRQ_RECV);
    // general_caps, then {rc, uc} and {ud, padding} as two little-endian words of u32s.
    [1, rc | uc << 32, ud]
};

/// `verbs_context.query_device_ex`, which the inline `ibv_query_device_ex` calls with the size
/// of the `ibv_device_attr_ex` the program was compiled with.
pub(crate) unsafe extern "C" fn query_device_ex(
    c: *mut ibv_context,
    _input: *const c_void,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let Some(ctx) = ctx_of("ibv_query_device_ex", c) else { return libc::EINVAL };
    if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
        return refuse("ibv_query_device_ex", libc::EINVAL, "attr is NULL or too small");
    }
    let a = match ctx.ctx.query_device() {
        Ok(a) => a,
        Err(e) => return refuse_err("ibv_query_device_ex", &e),
    };
    // SAFETY: plain old data.
    let mut x: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
    x.orig_attr = device_attr(&a);
    // The 32 bits of device_cap_flags and above them, as rxe has them: IBV_DEVICE_FLUSH_GLOBAL
    // (1 << 38) and IBV_DEVICE_ATOMIC_WRITE (1 << 40). Not IBV_DEVICE_FLUSH_PERSISTENT (rxe's
    // 1 << 39): no memory here is persistent, so no MR can take such a FLUSH.
    x.device_cap_flags_ex = x.orig_attr.device_cap_flags as u64 | (1 << 38) | (1 << 40);
    x.completion_timestamp_mask = 0;
    x.odp_caps = ODP_CAPS;
    x.phys_port_cnt_ex = a.phys_port_cnt as u32;
    let n = attr_size.min(size_of::<ibv_device_attr_ex>());
    // SAFETY: the caller gave attr_size bytes at attr; n is no more than both sizes.
    unsafe { std::ptr::copy_nonoverlapping(&x as *const _ as *const u8, attr as *mut u8, n) };
    0
}

/// Fill `struct ibv_port_attr` from softverbs' port attributes.
fn port_attr(p: &PortAttr) -> ibv_port_attr {
    ibv_port_attr {
        state: p.state.to_c_int(),
        max_mtu: p.max_mtu.to_c_int(),
        active_mtu: p.active_mtu.to_c_int(),
        gid_tbl_len: p.gid_tbl_len as c_int,
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: 1,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: p.link_layer.to_ibv() as u8,
        ..Default::default()
    }
}

/// Query port `port` into `len` bytes at `attr` (the 48-byte compat struct for the exported
/// symbol, the full 52 bytes for the inline path).
fn query_port_into(what: &str, c: *mut ibv_context, port: u8, attr: *mut u8, len: usize) -> c_int {
    let Some(ctx) = ctx_of(what, c) else { return libc::EINVAL };
    if attr.is_null() {
        return refuse(what, libc::EINVAL, "port_attr is NULL");
    }
    match ctx.ctx.query_port(port) {
        Ok(p) => {
            let a = port_attr(&p);
            let n = len.min(size_of::<ibv_port_attr>());
            // SAFETY: the caller gave len bytes at attr.
            unsafe { std::ptr::copy_nonoverlapping(&a as *const _ as *const u8, attr, n) };
            0
        }
        Err(e) => refuse_err(what, &e),
    }
}

/// `ibv_query_port@IBVERBS_1.1`: programs reach it when the extended path is absent, with the
/// 48-byte `_compat_ibv_port_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(c: *mut ibv_context, port: u8, attr: *mut c_void) -> c_int {
    query_port_into("ibv_query_port", c, port, attr as *mut u8, 48)
}

/// `verbs_context.query_port`, which the inline `ibv_query_port` calls.
pub(crate) unsafe extern "C" fn query_port_ex(
    c: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    query_port_into("ibv_query_port", c, port, attr as *mut u8, len)
}

/// `ibv_query_gid`: 0, or -1 for an index with no GID.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    let Some(ctx) = ctx_of("ibv_query_gid", c) else { return -1 };
    if gid.is_null() || index < 0 {
        refuse("ibv_query_gid", libc::EINVAL, "gid is NULL or the index negative");
        return -1;
    }
    match ctx.ctx.query_gid(port, index as u32) {
        Ok(g) => {
            // SAFETY: gid is non-NULL, the caller's union ibv_gid.
            unsafe { (*gid).raw = g.0 };
            0
        }
        Err(e) => {
            tracing::debug!("ibv_query_gid: {}", e.message);
            set_errno(e.errno.code());
            -1
        }
    }
}

/// `struct ibv_gid_entry` of softverbs' entry. Its network device is `lo`, as `softverbs run`'s
/// sysfs names it (`gid_attrs/ndevs/N`, docs/c.md "Device nodes and sysfs"): a soft port has no
/// kernel netdev, and a program that names the GID's interface finds one that exists.
fn gid_entry_c(e: &GidEntry) -> ibv_gid_entry {
    static LO: OnceLock<u32> = OnceLock::new();
    // SAFETY: a NUL-terminated literal.
    let lo = *LO.get_or_init(|| unsafe { libc::if_nametoindex(c"lo".as_ptr()) });
    ibv_gid_entry {
        gid: ibv_gid { raw: e.gid.0 },
        gid_index: e.gid_index,
        port_num: e.port_num,
        gid_type: e.gid_type.to_ibv(),
        ndev_ifindex: if e.ndev_ifindex == 0 { lo } else { e.ndev_ifindex },
    }
}

/// `_ibv_query_gid_ex` (behind the inline `ibv_query_gid_ex`): the entry and its type; 0, or
/// `ENODATA` for an empty entry and `EINVAL` past the table.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    c: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    let Some(ctx) = ctx_of("ibv_query_gid_ex", c) else { return libc::EINVAL };
    if entry.is_null() || flags != 0 || entry_size < size_of::<ibv_gid_entry>() || port > 255 {
        return refuse("ibv_query_gid_ex", libc::EINVAL, "entry NULL or too small, or flags set");
    }
    match ctx.ctx.query_gid_entry(port as u8, index) {
        Ok(e) => {
            // SAFETY: checked non-NULL and large enough.
            unsafe { entry.write(gid_entry_c(&e)) };
            0
        }
        Err(e) => {
            tracing::debug!("ibv_query_gid_ex: {}", e.message);
            e.errno.code()
        }
    }
}

/// `_ibv_query_gid_table` (behind the inline `ibv_query_gid_table`): every valid entry of
/// every port; the count, or a negative errno (`EINVAL` when `max_entries` is too small).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    c: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    const W: &str = "ibv_query_gid_table";
    let Some(ctx) = ctx_of(W, c) else { return -(libc::EINVAL as isize) };
    if flags != 0
        || entry_size < size_of::<ibv_gid_entry>()
        || (entries.is_null() && max_entries > 0)
    {
        return -(refuse(W, libc::EINVAL, "flags set, entry_size too small or entries NULL")
            as isize);
    }
    let table = match ctx.ctx.query_gid_table() {
        Ok(t) => t,
        Err(e) => return -(refuse_err(W, &e) as isize),
    };
    if table.len() > max_entries {
        return -(refuse(
            W,
            libc::EINVAL,
            &format!("{} entries do not fit in {max_entries}", table.len()),
        ) as isize);
    }
    for (i, e) in table.iter().enumerate() {
        // SAFETY: the caller gave max_entries entries of entry_size bytes.
        unsafe {
            (entries as *mut u8)
                .add(i * entry_size)
                .cast::<ibv_gid_entry>()
                .write_unaligned(gid_entry_c(e))
        };
    }
    table.len() as isize
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE_34, imported by `ibv_devinfo`): the sysfs form of the
/// entry's type (`IBV_GID_TYPE_SYSFS_IB_ROCE_V1` 0, `IBV_GID_TYPE_SYSFS_ROCE_V2` 1).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    c: *mut ibv_context,
    port: u8,
    index: u32,
    ty: *mut c_int,
) -> c_int {
    let Some(ctx) = ctx_of("ibv_query_gid_type", c) else { return -1 };
    let entry = match ctx.ctx.query_gid_entry(port, index) {
        Ok(e) if !ty.is_null() => e,
        _ => {
            set_errno(libc::EINVAL);
            return -1;
        }
    };
    // SAFETY: checked non-NULL.
    unsafe { *ty = if entry.gid_type == GidType::RoceV2 { 1 } else { 0 } };
    0
}

/// `ibv_query_pkey`: index 0 holds the default P_Key 0xffff.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    let Some(ctx) = ctx_of("ibv_query_pkey", c) else { return -1 };
    if pkey.is_null() || index != 0 || ctx.ctx.query_port(port).is_err() {
        refuse("ibv_query_pkey", libc::EINVAL, "no such port or P_Key index (only index 0)");
        return -1;
    }
    // SAFETY: checked non-NULL.
    unsafe { *pkey = 0xffffu16.to_be() };
    0
}

/// `ibv_get_pkey_index`: 0 for the default P_Key, -1 otherwise.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(c: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    let Some(ctx) = ctx_of("ibv_get_pkey_index", c) else { return -1 };
    if u16::from_be(pkey) | 0x8000 == 0xffff && ctx.ctx.query_port(port).is_ok() {
        0
    } else {
        set_errno(libc::ENOENT);
        -1
    }
}

/// `ibv_read_sysfs_file`: soft devices have no sysfs, so every file is missing.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    if !dir.is_null() && !file.is_null() {
        // SAFETY: C strings from the caller.
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        tracing::debug!("ibv_read_sysfs_file({d:?}, {f:?}): soft devices have no sysfs");
    }
    set_errno(libc::ENOENT);
    -1
}

/// `ibv_get_async_event`: read one event from `async_fd` (blocking unless the program made it
/// non-blocking: then -1 with `EAGAIN`), and return it. An event whose QP, CQ or SRQ was
/// destroyed before it was read is dropped, as the kernel drops a destroyed object's unread
/// events (`ib_uverbs_release_uevent`), and the next one is read: no event ever names a NULL
/// object (docs/decisions.md, "A destroyed object's unread async events").
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    c: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    let Some(ctx) = ctx_of("ibv_get_async_event", c) else { return -1 };
    if event.is_null() {
        refuse("ibv_get_async_event", libc::EINVAL, "event is NULL");
        return -1;
    }
    loop {
        let mut v = 0u64;
        // SAFETY: our eventfd; 8 bytes.
        let n = unsafe { libc::read(ctx.v.context.async_fd, &mut v as *mut u64 as *mut c_void, 8) };
        if n != 8 {
            return -1; // errno from read
        }
        match ctx.ctx.get_async_event(None) {
            Ok(ev) => {
                let (ty, element) = async_event_c(&ev);
                if element.is_null() && names_an_object(&ev) {
                    tracing::debug!(?ev, "ibv_get_async_event: its object is destroyed; dropped");
                    continue;
                }
                // SAFETY: checked non-NULL.
                unsafe { event.write(ibv_async_event { element, event_type: ty }) };
                return 0;
            }
            Err(e) => {
                refuse_err("ibv_get_async_event", &e);
                return -1;
            }
        }
    }
}

/// Whether the event is about a QP, CQ or SRQ (whose C object must be live to be named).
fn names_an_object(ev: &verbs_api::AsyncEvent) -> bool {
    use verbs_api::AsyncElement;
    matches!(ev.element, AsyncElement::Qp(_) | AsyncElement::Cq(_) | AsyncElement::Srq(_))
}

/// `ibv_ack_async_event`: softverbs keeps no count to wait on, so nothing to do.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}
