//! Verbs across a process boundary, for the multi-process tests: a `verbs-api` backend whose
//! objects live in an `sv-peer verbs` child. Each verb is one request line on the child's stdin
//! and one reply line on its stdout; the child runs it on its own device ([`serve`]). A test
//! body written against [`verbs_api::Context`] thus drives a device in another process
//! unchanged: the data moves between the two processes' NICs over the shared-memory fabric, and
//! only the verbs calls cross the pipe.
//!
//! Requests are `<verb> <handle> <fields...>`; replies are `OK <fields...>` or
//! `ERR <errno> <message>`, so errors keep their errno and their words across the pipe. Numbers
//! are decimal, bytes are hex (`-` when empty, `~` for "none"). The child prints
//! `VERBS <device>` first and answers `BYE` by dropping everything and exiting.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use verbs_api::provider::{AhOps, CompChannelOps, ContextOps, CqOps, MrOps, PdOps, QpOps, SrqOps};
use verbs_api::*;

use crate::Peer;

/// Bound on waiting for a reply, on top of the call's own timeout.
pub const REPLY_WAIT: Duration = Duration::from_secs(30);
/// What "wait forever" (`None`) becomes for a blocking verb across the pipe: every wait here
/// has a bound.
pub const BLOCKING_CAP: Duration = Duration::from_secs(30);

// ---------------- the line codec ----------------

/// One request or reply being written: a head word and space-separated fields.
#[derive(Debug)]
struct Line(String);

impl Line {
    fn new(head: &str) -> Line {
        Line(head.to_string())
    }
    fn num(&mut self, v: impl Into<u64>) -> &mut Line {
        let _ = write!(self.0, " {}", v.into());
        self
    }
    fn flag(&mut self, v: bool) -> &mut Line {
        self.num(v)
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Line {
        if b.is_empty() {
            self.0.push_str(" -");
        } else {
            self.0.push(' ');
            for x in b {
                let _ = write!(self.0, "{x:02x}");
            }
        }
        self
    }
    fn opt_bytes(&mut self, b: Option<&[u8]>) -> &mut Line {
        match b {
            None => {
                self.0.push_str(" ~");
                self
            }
            Some(b) => self.bytes(b),
        }
    }
    fn opt_duration(&mut self, d: Option<Duration>) -> &mut Line {
        match d {
            None => {
                self.0.push_str(" ~");
                self
            }
            Some(d) => self.num(u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
        }
    }
}

/// A malformed line: a protocol error, reported as `EIO`.
fn malformed(what: String) -> Error {
    Error::new(Errno::Io, format!("verbs pipe: {what}"))
}

/// The fields of one line being read.
struct Tokens<'a> {
    it: std::str::SplitAsciiWhitespace<'a>,
    line: &'a str,
}

impl<'a> Tokens<'a> {
    fn new(line: &'a str) -> Tokens<'a> {
        Tokens { it: line.split_ascii_whitespace(), line }
    }
    fn word(&mut self, what: &str) -> Result<&'a str> {
        self.it.next().ok_or_else(|| malformed(format!("{what} missing in {:?}", self.line)))
    }
    fn num<T: TryFrom<u64>>(&mut self, what: &str) -> Result<T> {
        let w = self.word(what)?;
        let v: u64 = w.parse().map_err(|e| malformed(format!("{what} {w:?}: {e}")))?;
        T::try_from(v).map_err(|_| malformed(format!("{what} {v} is out of range")))
    }
    fn flag(&mut self, what: &str) -> Result<bool> {
        match self.num::<u8>(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(malformed(format!("{what} {v} is not 0 or 1"))),
        }
    }
    fn hex(w: &str, what: &str) -> Result<Vec<u8>> {
        if w == "-" {
            return Ok(Vec::new());
        }
        if !w.len().is_multiple_of(2) {
            return Err(malformed(format!("{what}: odd number of hex digits")));
        }
        (0..w.len())
            .step_by(2)
            .map(|i| {
                u8::from_str_radix(&w[i..i + 2], 16)
                    .map_err(|e| malformed(format!("{what}: {e} at digit {i}")))
            })
            .collect()
    }
    fn bytes(&mut self, what: &str) -> Result<Vec<u8>> {
        let w = self.word(what)?;
        Tokens::hex(w, what)
    }
    fn opt_bytes(&mut self, what: &str) -> Result<Option<Vec<u8>>> {
        match self.word(what)? {
            "~" => Ok(None),
            w => Tokens::hex(w, what).map(Some),
        }
    }
    fn opt_duration(&mut self, what: &str) -> Result<Option<Duration>> {
        match self.word(what)? {
            "~" => Ok(None),
            w => w
                .parse()
                .map(|us| Some(Duration::from_micros(us)))
                .map_err(|e| malformed(format!("{what} {w:?}: {e}"))),
        }
    }
    fn end(mut self) -> Result<()> {
        match self.it.next() {
            None => Ok(()),
            Some(w) => Err(malformed(format!("unexpected {w:?} at the end of {:?}", self.line))),
        }
    }
}

/// An error message on one line: backslashes and newlines escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        match (c, c == '\\') {
            (_, true) => match it.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

// Each enum travels as its index in a table.
const QP_TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];
const QP_STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];
const MTUS: [Mtu; 5] = [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096];
const WR_OPCODES: [WrOpcode; 7] = [
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::RdmaRead,
    WrOpcode::AtomicCmpAndSwp,
    WrOpcode::AtomicFetchAndAdd,
];
const WC_OPCODES: [WcOpcode; 7] = [
    WcOpcode::Send,
    WcOpcode::RdmaWrite,
    WcOpcode::RdmaRead,
    WcOpcode::CompSwap,
    WcOpcode::FetchAdd,
    WcOpcode::Recv,
    WcOpcode::RecvRdmaWithImm,
];
const WC_STATUSES: [WcStatus; 22] = [
    WcStatus::Success,
    WcStatus::LocLenErr,
    WcStatus::LocQpOpErr,
    WcStatus::LocEecOpErr,
    WcStatus::LocProtErr,
    WcStatus::WrFlushErr,
    WcStatus::MwBindErr,
    WcStatus::BadRespErr,
    WcStatus::LocAccessErr,
    WcStatus::RemInvReqErr,
    WcStatus::RemAccessErr,
    WcStatus::RemOpErr,
    WcStatus::RetryExcErr,
    WcStatus::RnrRetryExcErr,
    WcStatus::LocRddViolErr,
    WcStatus::RemInvRdReqErr,
    WcStatus::RemAbortErr,
    WcStatus::InvEecnErr,
    WcStatus::InvEecStateErr,
    WcStatus::FatalErr,
    WcStatus::RespTimeoutErr,
    WcStatus::GeneralErr,
];
const EVENT_TYPES: [AsyncEventType; 11] = [
    AsyncEventType::CqErr,
    AsyncEventType::QpFatal,
    AsyncEventType::QpReqErr,
    AsyncEventType::QpAccessErr,
    AsyncEventType::CommEst,
    AsyncEventType::SqDrained,
    AsyncEventType::QpLastWqeReached,
    AsyncEventType::SrqLimitReached,
    AsyncEventType::PortActive,
    AsyncEventType::PortErr,
    AsyncEventType::DeviceFatal,
];
const PORT_STATES: [PortState; 5] =
    [PortState::Nop, PortState::Down, PortState::Init, PortState::Armed, PortState::Active];
const LINK_LAYERS: [LinkLayer; 2] = [LinkLayer::InfiniBand, LinkLayer::Ethernet];

fn code<T: PartialEq + std::fmt::Debug>(table: &[T], v: &T) -> u64 {
    let i = table.iter().position(|x| x == v);
    i.unwrap_or_else(|| panic!("{v:?} is missing from its code table")) as u64
}

fn decode<T: Copy>(table: &[T], t: &mut Tokens<'_>, what: &str) -> Result<T> {
    let c: usize = t.num(what)?;
    table.get(c).copied().ok_or_else(|| malformed(format!("{what} code {c} is unknown")))
}

fn put_sges(l: &mut Line, sges: &[Sge]) {
    l.num(sges.len() as u64);
    for s in sges {
        l.num(s.addr).num(s.length).num(s.lkey);
    }
}

fn take_sges(t: &mut Tokens<'_>) -> Result<Vec<Sge>> {
    let n: usize = t.num("num_sge")?;
    if n > 1 << 16 {
        return Err(malformed(format!("num_sge {n} is implausible")));
    }
    (0..n)
        .map(|_| Ok(Sge { addr: t.num("addr")?, length: t.num("length")?, lkey: t.num("lkey")? }))
        .collect()
}

fn put_cap(l: &mut Line, c: &QpCap) {
    l.num(c.max_send_wr)
        .num(c.max_recv_wr)
        .num(c.max_send_sge)
        .num(c.max_recv_sge)
        .num(c.max_inline_data);
}

fn take_cap(t: &mut Tokens<'_>) -> Result<QpCap> {
    Ok(QpCap {
        max_send_wr: t.num("max_send_wr")?,
        max_recv_wr: t.num("max_recv_wr")?,
        max_send_sge: t.num("max_send_sge")?,
        max_recv_sge: t.num("max_recv_sge")?,
        max_inline_data: t.num("max_inline_data")?,
    })
}

fn take_gid(t: &mut Tokens<'_>) -> Result<Gid> {
    let b = t.bytes("gid")?;
    let g: [u8; 16] =
        b.try_into().map_err(|b: Vec<u8>| malformed(format!("a GID of {} bytes", b.len())))?;
    Ok(Gid(g))
}

fn put_ah(l: &mut Line, a: &AhAttr) {
    l.num(a.dlid)
        .num(a.sl)
        .num(a.src_path_bits)
        .num(a.static_rate)
        .flag(a.is_global)
        .num(a.port_num)
        .bytes(&a.dgid.0)
        .num(a.flow_label)
        .num(a.sgid_index)
        .num(a.hop_limit)
        .num(a.traffic_class);
}

fn take_ah(t: &mut Tokens<'_>) -> Result<AhAttr> {
    Ok(AhAttr {
        dlid: t.num("dlid")?,
        sl: t.num("sl")?,
        src_path_bits: t.num("src_path_bits")?,
        static_rate: t.num("static_rate")?,
        is_global: t.flag("is_global")?,
        port_num: t.num("port_num")?,
        dgid: take_gid(t)?,
        flow_label: t.num("flow_label")?,
        sgid_index: t.num("sgid_index")?,
        hop_limit: t.num("hop_limit")?,
        traffic_class: t.num("traffic_class")?,
    })
}

fn put_qp_attr(l: &mut Line, a: &QpAttr) {
    l.num(code(&QP_STATES, &a.qp_state))
        .num(code(&QP_STATES, &a.cur_qp_state))
        .num(code(&MTUS, &a.path_mtu))
        .num(a.qkey)
        .num(a.rq_psn)
        .num(a.sq_psn)
        .num(a.dest_qp_num)
        .num(a.qp_access_flags.bits());
    put_cap(l, &a.cap);
    put_ah(l, &a.ah_attr);
    l.num(a.pkey_index)
        .flag(a.en_sqd_async_notify)
        .flag(a.sq_draining)
        .num(a.max_rd_atomic)
        .num(a.max_dest_rd_atomic)
        .num(a.min_rnr_timer)
        .num(a.port_num)
        .num(a.timeout)
        .num(a.retry_cnt)
        .num(a.rnr_retry);
}

fn take_qp_attr(t: &mut Tokens<'_>) -> Result<QpAttr> {
    Ok(QpAttr {
        qp_state: decode(&QP_STATES, t, "qp_state")?,
        cur_qp_state: decode(&QP_STATES, t, "cur_qp_state")?,
        path_mtu: decode(&MTUS, t, "path_mtu")?,
        qkey: t.num("qkey")?,
        rq_psn: t.num("rq_psn")?,
        sq_psn: t.num("sq_psn")?,
        dest_qp_num: t.num("dest_qp_num")?,
        qp_access_flags: AccessFlags::from_bits(t.num("qp_access_flags")?)
            .ok_or_else(|| malformed("unknown access flag bits".into()))?,
        cap: take_cap(t)?,
        ah_attr: take_ah(t)?,
        pkey_index: t.num("pkey_index")?,
        en_sqd_async_notify: t.flag("en_sqd_async_notify")?,
        sq_draining: t.flag("sq_draining")?,
        max_rd_atomic: t.num("max_rd_atomic")?,
        max_dest_rd_atomic: t.num("max_dest_rd_atomic")?,
        min_rnr_timer: t.num("min_rnr_timer")?,
        port_num: t.num("port_num")?,
        timeout: t.num("timeout")?,
        retry_cnt: t.num("retry_cnt")?,
        rnr_retry: t.num("rnr_retry")?,
    })
}

fn put_wc(l: &mut Line, w: &WorkCompletion) {
    l.num(w.wr_id)
        .num(code(&WC_STATUSES, &w.status))
        .num(code(&WC_OPCODES, &w.opcode))
        .num(w.vendor_err)
        .num(w.byte_len)
        .num(w.imm_data)
        .num(w.qp_num)
        .num(w.src_qp)
        .num(w.wc_flags.bits())
        .num(w.pkey_index)
        .num(w.slid)
        .num(w.sl)
        .num(w.dlid_path_bits);
}

fn take_wc(t: &mut Tokens<'_>) -> Result<WorkCompletion> {
    Ok(WorkCompletion {
        wr_id: t.num("wr_id")?,
        status: decode(&WC_STATUSES, t, "status")?,
        opcode: decode(&WC_OPCODES, t, "opcode")?,
        vendor_err: t.num("vendor_err")?,
        byte_len: t.num("byte_len")?,
        imm_data: t.num("imm_data")?,
        qp_num: t.num("qp_num")?,
        src_qp: t.num("src_qp")?,
        wc_flags: WcFlags::from_bits(t.num("wc_flags")?)
            .ok_or_else(|| malformed("unknown wc_flags bits".into()))?,
        pkey_index: t.num("pkey_index")?,
        slid: t.num("slid")?,
        sl: t.num("sl")?,
        dlid_path_bits: t.num("dlid_path_bits")?,
    })
}

fn put_device_attr(l: &mut Line, d: &DeviceAttr) {
    l.bytes(d.fw_ver.as_bytes())
        .num(d.node_guid)
        .num(d.sys_image_guid)
        .num(d.max_mr_size)
        .num(d.vendor_id)
        .num(d.vendor_part_id)
        .num(d.hw_ver)
        .num(d.max_qp)
        .num(d.max_qp_wr)
        .num(d.max_sge)
        .num(d.max_cq)
        .num(d.max_cqe)
        .num(d.max_mr)
        .num(d.max_pd)
        .num(d.max_qp_rd_atom)
        .num(d.max_qp_init_rd_atom)
        .num(d.max_srq)
        .num(d.max_srq_wr)
        .num(d.max_srq_sge)
        .num(d.max_ah)
        .num(d.max_pkeys)
        .num(d.phys_port_cnt)
        .num(d.max_inline_data)
        .num(d.max_msg_sz)
        .flag(d.atomic_hca);
}

fn take_device_attr(t: &mut Tokens<'_>) -> Result<DeviceAttr> {
    let fw = t.bytes("fw_ver")?;
    Ok(DeviceAttr {
        fw_ver: String::from_utf8(fw).map_err(|e| malformed(format!("fw_ver: {e}")))?,
        node_guid: t.num("node_guid")?,
        sys_image_guid: t.num("sys_image_guid")?,
        max_mr_size: t.num("max_mr_size")?,
        vendor_id: t.num("vendor_id")?,
        vendor_part_id: t.num("vendor_part_id")?,
        hw_ver: t.num("hw_ver")?,
        max_qp: t.num("max_qp")?,
        max_qp_wr: t.num("max_qp_wr")?,
        max_sge: t.num("max_sge")?,
        max_cq: t.num("max_cq")?,
        max_cqe: t.num("max_cqe")?,
        max_mr: t.num("max_mr")?,
        max_pd: t.num("max_pd")?,
        max_qp_rd_atom: t.num("max_qp_rd_atom")?,
        max_qp_init_rd_atom: t.num("max_qp_init_rd_atom")?,
        max_srq: t.num("max_srq")?,
        max_srq_wr: t.num("max_srq_wr")?,
        max_srq_sge: t.num("max_srq_sge")?,
        max_ah: t.num("max_ah")?,
        max_pkeys: t.num("max_pkeys")?,
        phys_port_cnt: t.num("phys_port_cnt")?,
        max_inline_data: t.num("max_inline_data")?,
        max_msg_sz: t.num("max_msg_sz")?,
        atomic_hca: t.flag("atomic_hca")?,
    })
}

fn put_port_attr(l: &mut Line, p: &PortAttr) {
    l.num(code(&PORT_STATES, &p.state))
        .num(code(&MTUS, &p.max_mtu))
        .num(code(&MTUS, &p.active_mtu))
        .num(p.gid_tbl_len)
        .num(p.max_msg_sz)
        .num(p.pkey_tbl_len)
        .num(p.lid)
        .num(p.sm_lid)
        .num(p.lmc)
        .num(p.active_width)
        .num(p.active_speed)
        .num(p.phys_state)
        .num(code(&LINK_LAYERS, &p.link_layer));
}

fn take_port_attr(t: &mut Tokens<'_>) -> Result<PortAttr> {
    Ok(PortAttr {
        state: decode(&PORT_STATES, t, "state")?,
        max_mtu: decode(&MTUS, t, "max_mtu")?,
        active_mtu: decode(&MTUS, t, "active_mtu")?,
        gid_tbl_len: t.num("gid_tbl_len")?,
        max_msg_sz: t.num("max_msg_sz")?,
        pkey_tbl_len: t.num("pkey_tbl_len")?,
        lid: t.num("lid")?,
        sm_lid: t.num("sm_lid")?,
        lmc: t.num("lmc")?,
        active_width: t.num("active_width")?,
        active_speed: t.num("active_speed")?,
        phys_state: t.num("phys_state")?,
        link_layer: decode(&LINK_LAYERS, t, "link_layer")?,
    })
}

fn put_event(l: &mut Line, e: &AsyncEvent) {
    let (kind, v) = match e.element {
        AsyncElement::Qp(n) => (0, n as u64),
        AsyncElement::Cq(id) => (1, id),
        AsyncElement::Srq(id) => (2, id),
        AsyncElement::Port(p) => (3, p as u64),
        AsyncElement::Device => (4, 0),
    };
    l.num(code(&EVENT_TYPES, &e.event_type)).num(kind as u64).num(v);
}

fn take_event(t: &mut Tokens<'_>) -> Result<AsyncEvent> {
    let event_type = decode(&EVENT_TYPES, t, "event_type")?;
    let kind: u8 = t.num("element kind")?;
    let element = match kind {
        0 => AsyncElement::Qp(t.num("qp_num")?),
        1 => AsyncElement::Cq(t.num("cq id")?),
        2 => AsyncElement::Srq(t.num("srq id")?),
        3 => AsyncElement::Port(t.num("port_num")?),
        4 => {
            let _: u64 = t.num("device")?;
            AsyncElement::Device
        }
        k => return Err(malformed(format!("element kind {k} is unknown"))),
    };
    Ok(AsyncEvent { event_type, element })
}

fn put_srq_attr(l: &mut Line, a: &SrqAttr) {
    l.num(a.max_wr).num(a.max_sge).num(a.srq_limit);
}

fn take_srq_attr(t: &mut Tokens<'_>) -> Result<SrqAttr> {
    Ok(SrqAttr {
        max_wr: t.num("max_wr")?,
        max_sge: t.num("max_sge")?,
        srq_limit: t.num("srq_limit")?,
    })
}

/// `ah` is the address handle's handle in the child (0: none).
fn put_send_wr(l: &mut Line, w: &SendWr<'_>, ah: u64) {
    l.num(w.wr_id)
        .num(code(&WR_OPCODES, &w.opcode))
        .num(w.send_flags.bits())
        .num(w.imm_data)
        .num(w.rdma.remote_addr)
        .num(w.rdma.rkey)
        .num(w.atomic.remote_addr)
        .num(w.atomic.rkey)
        .num(w.atomic.compare_add)
        .num(w.atomic.swap)
        .num(ah)
        .num(w.ud.as_ref().map_or(0, |u| u.remote_qpn))
        .num(w.ud.as_ref().map_or(0, |u| u.remote_qkey))
        .opt_bytes(w.inline_data);
    put_sges(l, w.sg_list);
}

/// A send WR as read from a line, owning what [`SendWr`] borrows.
struct OwnedSendWr {
    wr_id: u64,
    opcode: WrOpcode,
    send_flags: SendFlags,
    imm_data: u32,
    rdma: RdmaTarget,
    atomic: AtomicTarget,
    /// (handle of the AH, remote QPN, remote Q_Key); handle 0 means no `wr.ud`.
    ud: (u64, u32, u32),
    inline: Option<Vec<u8>>,
    sges: Vec<Sge>,
}

fn take_send_wr(t: &mut Tokens<'_>) -> Result<OwnedSendWr> {
    Ok(OwnedSendWr {
        wr_id: t.num("wr_id")?,
        opcode: decode(&WR_OPCODES, t, "opcode")?,
        send_flags: SendFlags::from_bits(t.num("send_flags")?)
            .ok_or_else(|| malformed("unknown send_flags bits".into()))?,
        imm_data: t.num("imm_data")?,
        rdma: RdmaTarget { remote_addr: t.num("remote_addr")?, rkey: t.num("rkey")? },
        atomic: AtomicTarget {
            remote_addr: t.num("atomic remote_addr")?,
            rkey: t.num("atomic rkey")?,
            compare_add: t.num("compare_add")?,
            swap: t.num("swap")?,
        },
        ud: (t.num("ah")?, t.num("remote_qpn")?, t.num("remote_qkey")?),
        inline: t.opt_bytes("inline_data")?,
        sges: take_sges(t)?,
    })
}

fn put_recv_wrs(l: &mut Line, wrs: &[RecvWr<'_>]) {
    l.num(wrs.len() as u64);
    for w in wrs {
        l.num(w.wr_id);
        put_sges(l, w.sg_list);
    }
}

fn take_recv_wrs(t: &mut Tokens<'_>) -> Result<Vec<(u64, Vec<Sge>)>> {
    let n: usize = t.num("number of WRs")?;
    if n > 1 << 20 {
        return Err(malformed(format!("{n} receive WRs is implausible")));
    }
    (0..n).map(|_| Ok((t.num("wr_id")?, take_sges(t)?))).collect()
}

// ---------------- the test's side: proxies ----------------

/// The pipe to one `sv-peer verbs` child, shared by every proxy object.
struct Conn {
    peer: Mutex<Peer>,
    /// The first failure of the pipe; every later call fails at once with it.
    broken: Mutex<Option<String>>,
    /// The CQs by their handle in the child, so `get_cq_event` returns the proxy the test holds.
    cqs: Mutex<BTreeMap<u64, Weak<RemoteCq>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Conn {
    /// Sends one request and returns the fields of its `OK` reply, or its error.
    fn call(&self, line: &Line, wait: Duration) -> Result<String> {
        if let Some(why) = lock(&self.broken).clone() {
            return Err(Error::new(Errno::Io, format!("the verbs peer is unusable: {why}")));
        }
        let mut peer = lock(&self.peer);
        let reply = peer.try_send_line(&line.0).and_then(|()| peer.recv_line(REPLY_WAIT + wait));
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                *lock(&self.broken) = Some(e.clone());
                return Err(Error::new(Errno::Io, e));
            }
        };
        if reply == "OK" {
            return Ok(String::new());
        }
        if let Some(rest) = reply.strip_prefix("OK ") {
            return Ok(rest.to_string());
        }
        if let Some(rest) = reply.strip_prefix("ERR ") {
            let (errno, message) = rest.split_once(' ').unwrap_or((rest, ""));
            let errno = errno.parse().map(Errno::from_code).unwrap_or(Errno::Io);
            return Err(Error::new(errno, unescape(message)));
        }
        Err(malformed(format!("reply {reply:?} to {:?}", line.0)))
    }

    /// Tells the child that the test dropped its last reference to handle `h`.
    fn release(&self, h: u64) {
        let mut l = Line::new("drop");
        l.num(h);
        let _ = self.call(&l, Duration::ZERO);
    }
}

/// One object in the child: dropping it drops the child's handle too.
struct Remote {
    conn: Arc<Conn>,
    h: u64,
}

impl Remote {
    /// A request about this object.
    fn req(&self, verb: &str) -> Line {
        let mut l = Line::new(verb);
        l.num(self.h);
        l
    }
    fn call(&self, l: &Line) -> Result<String> {
        self.conn.call(l, Duration::ZERO)
    }
    fn same_peer(&self, other: &Remote) -> bool {
        Arc::ptr_eq(&self.conn, &other.conn)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.conn.release(self.h);
    }
}

fn foreign(what: &str) -> Error {
    Error::inval(format!("{what} belongs to another device or backend"))
}

/// A device in an `sv-peer verbs` child, as a [`Context`] of this process.
pub struct RemoteDevice {
    conn: Arc<Conn>,
    context: Context,
}

impl RemoteDevice {
    /// Takes over `peer`, an `sv-peer verbs` child, once it has said `VERBS <device>`.
    pub fn attach(mut peer: Peer) -> std::result::Result<RemoteDevice, String> {
        let hello = peer.recv_line(REPLY_WAIT)?;
        let name = hello
            .strip_prefix("VERBS ")
            .ok_or_else(|| format!("expected VERBS <device> from the verbs peer, got {hello:?}"))?
            .to_string();
        let conn = Arc::new(Conn {
            peer: Mutex::new(peer),
            broken: Mutex::new(None),
            cqs: Mutex::new(BTreeMap::new()),
        });
        let context = Context::from_ops(Arc::new(RemoteContext { conn: conn.clone(), name }));
        Ok(RemoteDevice { conn, context })
    }

    /// The child's device.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        lock(&self.conn.peer).pid()
    }

    /// SIGKILLs the child (to test what a test sees when its peer dies).
    pub fn kill(&self) {
        lock(&self.conn.peer).kill();
    }

    /// Ends the session: says `BYE` (the child drops every object and its device) and waits at
    /// most `timeout` for it to exit 0. Panics, with the child's stderr, if it does not.
    pub fn close(self, timeout: Duration) {
        let RemoteDevice { conn, context } = self;
        drop(context);
        if let Err(e) = conn.call(&Line::new("BYE"), Duration::ZERO) {
            panic!("closing the verbs peer: {e}");
        }
        let mut peer = lock(&conn.peer);
        peer.wait_success(timeout);
        peer.assert_exited();
    }
}

struct RemoteContext {
    conn: Arc<Conn>,
    name: String,
}

impl RemoteContext {
    fn call(&self, l: &Line, wait: Duration) -> Result<String> {
        self.conn.call(l, wait)
    }
    fn remote(&self, h: u64) -> Remote {
        Remote { conn: self.conn.clone(), h }
    }
}

impl ContextOps for RemoteContext {
    fn device_name(&self) -> String {
        self.name.clone()
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        let r = self.call(&Line::new("query_device"), Duration::ZERO)?;
        let mut t = Tokens::new(&r);
        let d = take_device_attr(&mut t)?;
        t.end()?;
        Ok(d)
    }
    fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        let mut l = Line::new("query_port");
        l.num(port_num);
        let r = self.call(&l, Duration::ZERO)?;
        let mut t = Tokens::new(&r);
        let p = take_port_attr(&mut t)?;
        t.end()?;
        Ok(p)
    }
    fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        let mut l = Line::new("query_gid");
        l.num(port_num).num(index);
        let r = self.call(&l, Duration::ZERO)?;
        take_gid(&mut Tokens::new(&r))
    }
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        let r = self.call(&Line::new("alloc_pd"), Duration::ZERO)?;
        let h = Tokens::new(&r).num("handle")?;
        Ok(Arc::new(RemotePd { r: self.remote(h) }))
    }
    fn create_comp_channel(&self) -> Result<Arc<dyn CompChannelOps>> {
        let r = self.call(&Line::new("create_comp_channel"), Duration::ZERO)?;
        let h = Tokens::new(&r).num("handle")?;
        Ok(Arc::new(RemoteChannel { r: self.remote(h) }))
    }
    fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        let ch = match channel {
            None => 0,
            Some(c) => {
                let c = c
                    .ops()
                    .as_any()
                    .downcast_ref::<RemoteChannel>()
                    .filter(|c| Arc::ptr_eq(&c.r.conn, &self.conn))
                    .ok_or_else(|| foreign("the completion channel"))?;
                c.r.h
            }
        };
        let mut l = Line::new("create_cq");
        l.num(cqe).num(ch).num(comp_vector);
        let r = self.call(&l, Duration::ZERO)?;
        let mut t = Tokens::new(&r);
        let (h, cqe, id) = (t.num("handle")?, t.num("cqe")?, t.num("id")?);
        let cq = Arc::new(RemoteCq { r: self.remote(h), cqe: AtomicU32::new(cqe), id });
        lock(&self.conn.cqs).insert(h, Arc::downgrade(&cq));
        Ok(cq)
    }
    fn get_async_event(&self, timeout: Option<Duration>) -> Result<AsyncEvent> {
        let timeout = timeout.unwrap_or(BLOCKING_CAP);
        let mut l = Line::new("get_async_event");
        l.opt_duration(Some(timeout));
        let r = self.call(&l, timeout)?;
        take_event(&mut Tokens::new(&r))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemotePd {
    r: Remote,
}

impl PdOps for RemotePd {
    fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Arc<dyn MrOps>> {
        let mut l = self.r.req("reg_mr");
        l.num(len as u64).num(access.bits());
        let r = self.r.call(&l)?;
        let mut t = Tokens::new(&r);
        Ok(Arc::new(RemoteMr {
            r: Remote { conn: self.r.conn.clone(), h: t.num("handle")? },
            lkey: t.num("lkey")?,
            rkey: t.num("rkey")?,
            addr: t.num("addr")?,
            len: t.num("len")?,
            access,
        }))
    }
    unsafe fn reg_mr_raw(
        &self,
        _addr: *mut u8,
        _len: usize,
        _access: AccessFlags,
    ) -> Result<Arc<dyn MrOps>> {
        Err(Error::new(
            Errno::NotSup,
            "ibv_reg_mr: a device in another process cannot register this process's memory",
        ))
    }
    fn create_qp(&self, init: &QpInitAttr) -> Result<Arc<dyn QpOps>> {
        let cq_of = |cq: &CompletionQueue, what: &str| -> Result<u64> {
            cq.ops()
                .as_any()
                .downcast_ref::<RemoteCq>()
                .filter(|c| c.r.same_peer(&self.r))
                .map(|c| c.r.h)
                .ok_or_else(|| foreign(what))
        };
        let srq = match &init.srq {
            None => 0,
            Some(s) => s
                .ops()
                .as_any()
                .downcast_ref::<RemoteSrq>()
                .filter(|s| s.r.same_peer(&self.r))
                .map(|s| s.r.h)
                .ok_or_else(|| foreign("ibv_create_qp: srq"))?,
        };
        let mut l = self.r.req("create_qp");
        l.num(code(&QP_TYPES, &init.qp_type))
            .num(cq_of(&init.send_cq, "ibv_create_qp: send_cq")?)
            .num(cq_of(&init.recv_cq, "ibv_create_qp: recv_cq")?)
            .num(srq);
        put_cap(&mut l, &init.cap);
        l.flag(init.sq_sig_all);
        let r = self.r.call(&l)?;
        let mut t = Tokens::new(&r);
        Ok(Arc::new(RemoteQp {
            r: Remote { conn: self.r.conn.clone(), h: t.num("handle")? },
            qpn: t.num("qp_num")?,
            qp_type: init.qp_type,
        }))
    }
    fn create_srq(&self, init: &SrqInitAttr) -> Result<Arc<dyn SrqOps>> {
        let mut l = self.r.req("create_srq");
        l.num(init.max_wr).num(init.max_sge).num(init.srq_limit);
        let r = self.r.call(&l)?;
        let mut t = Tokens::new(&r);
        Ok(Arc::new(RemoteSrq {
            r: Remote { conn: self.r.conn.clone(), h: t.num("handle")? },
            id: t.num("id")?,
        }))
    }
    fn create_ah(&self, attr: &AhAttr) -> Result<Arc<dyn AhOps>> {
        let mut l = self.r.req("create_ah");
        put_ah(&mut l, attr);
        let r = self.r.call(&l)?;
        let h = Tokens::new(&r).num("handle")?;
        Ok(Arc::new(RemoteAh { r: Remote { conn: self.r.conn.clone(), h }, attr: *attr }))
    }
    fn dealloc(&self) -> Result<()> {
        self.r.call(&self.r.req("dealloc_pd")).map(drop)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteMr {
    r: Remote,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
    access: AccessFlags,
}

impl MrOps for RemoteMr {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.rkey
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn access(&self) -> AccessFlags {
        self.access
    }
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let mut l = self.r.req("mr_read");
        l.num(offset as u64).num(buf.len() as u64);
        let r = self.r.call(&l)?;
        let got = Tokens::new(&r).bytes("data")?;
        if got.len() != buf.len() {
            return Err(malformed(format!("asked for {} bytes, got {}", buf.len(), got.len())));
        }
        buf.copy_from_slice(&got);
        Ok(())
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let mut l = self.r.req("mr_write");
        l.num(offset as u64).bytes(data);
        self.r.call(&l).map(drop)
    }
    fn dereg(&self) -> Result<()> {
        self.r.call(&self.r.req("dereg_mr")).map(drop)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteCq {
    r: Remote,
    cqe: AtomicU32,
    id: u64,
}

impl CqOps for RemoteCq {
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let mut l = self.r.req("poll_cq");
        l.num(wc.len() as u64);
        let r = self.r.call(&l)?;
        let mut t = Tokens::new(&r);
        let n: usize = t.num("count")?;
        if n > wc.len() {
            return Err(malformed(format!("{n} completions for room for {}", wc.len())));
        }
        for slot in &mut wc[..n] {
            *slot = take_wc(&mut t)?;
        }
        t.end()?;
        Ok(n)
    }
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let mut l = self.r.req("req_notify_cq");
        l.flag(solicited_only);
        self.r.call(&l).map(drop)
    }
    fn cqe(&self) -> u32 {
        self.cqe.load(Ordering::Relaxed)
    }
    fn resize(&self, cqe: u32) -> Result<()> {
        let mut l = self.r.req("resize_cq");
        l.num(cqe);
        let r = self.r.call(&l)?;
        self.cqe.store(Tokens::new(&r).num("cqe")?, Ordering::Relaxed);
        Ok(())
    }
    fn destroy(&self) -> Result<()> {
        self.r.call(&self.r.req("destroy_cq")).map(drop)
    }
    fn id(&self) -> u64 {
        self.id
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteChannel {
    r: Remote,
}

impl CompChannelOps for RemoteChannel {
    fn get_cq_event(&self, timeout: Option<Duration>) -> Result<Arc<dyn CqOps>> {
        let timeout = timeout.unwrap_or(BLOCKING_CAP);
        let mut l = self.r.req("get_cq_event");
        l.opt_duration(Some(timeout));
        let r = self.r.conn.call(&l, timeout)?;
        let h: u64 = Tokens::new(&r).num("cq handle")?;
        let cq = lock(&self.r.conn.cqs).get(&h).and_then(Weak::upgrade);
        match cq {
            Some(cq) => Ok(cq),
            None => Err(Error::new(
                Errno::Io,
                format!("ibv_get_cq_event: the event names CQ handle {h}, which is gone"),
            )),
        }
    }
    fn ack_cq_events(&self, cq: &CompletionQueue, nevents: u32) {
        let Some(c) = cq.ops().as_any().downcast_ref::<RemoteCq>() else { return };
        let mut l = self.r.req("ack_cq_events");
        l.num(c.r.h).num(nevents);
        let _ = self.r.call(&l);
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteQp {
    r: Remote,
    qpn: u32,
    qp_type: QpType,
}

impl QpOps for RemoteQp {
    fn qp_num(&self) -> u32 {
        self.qpn
    }
    fn qp_type(&self) -> QpType {
        self.qp_type
    }
    fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        let mut l = self.r.req("post_send");
        l.num(wrs.len() as u64);
        for (i, w) in wrs.iter().enumerate() {
            let ah = match &w.ud {
                None => 0,
                Some(u) => {
                    u.ah.ops()
                        .as_any()
                        .downcast_ref::<RemoteAh>()
                        .filter(|a| a.r.same_peer(&self.r))
                        .map(|a| a.r.h)
                        .ok_or_else(|| foreign(&format!("ibv_post_send: wr[{i}].ud.ah")))?
                }
            };
            put_send_wr(&mut l, w, ah);
        }
        self.r.call(&l).map(drop)
    }
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let mut l = self.r.req("post_recv");
        put_recv_wrs(&mut l, wrs);
        self.r.call(&l).map(drop)
    }
    fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        let mut l = self.r.req("modify_qp");
        put_qp_attr(&mut l, attr);
        l.num(mask.bits());
        self.r.call(&l).map(drop)
    }
    fn query(&self) -> Result<(QpAttr, QpCap)> {
        let r = self.r.call(&self.r.req("query_qp"))?;
        let mut t = Tokens::new(&r);
        let a = take_qp_attr(&mut t)?;
        let c = take_cap(&mut t)?;
        t.end()?;
        Ok((a, c))
    }
    fn destroy(&self) -> Result<()> {
        self.r.call(&self.r.req("destroy_qp")).map(drop)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteSrq {
    r: Remote,
    id: u64,
}

impl SrqOps for RemoteSrq {
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let mut l = self.r.req("post_srq_recv");
        put_recv_wrs(&mut l, wrs);
        self.r.call(&l).map(drop)
    }
    fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let mut l = self.r.req("modify_srq");
        put_srq_attr(&mut l, attr);
        l.num(mask.bits());
        self.r.call(&l).map(drop)
    }
    fn query(&self) -> Result<SrqAttr> {
        let r = self.r.call(&self.r.req("query_srq"))?;
        take_srq_attr(&mut Tokens::new(&r))
    }
    fn destroy(&self) -> Result<()> {
        self.r.call(&self.r.req("destroy_srq")).map(drop)
    }
    fn id(&self) -> u64 {
        self.id
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct RemoteAh {
    r: Remote,
    attr: AhAttr,
}

impl AhOps for RemoteAh {
    fn attr(&self) -> AhAttr {
        self.attr
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

// ---------------- the child's side ----------------

/// An object the child holds for the test, by handle.
enum Obj {
    Pd(ProtectionDomain),
    Mr(MemoryRegion),
    Cq(CompletionQueue),
    Channel(CompChannel),
    Qp(QueuePair),
    Srq(SharedReceiveQueue),
    Ah(AddressHandle),
}

/// The child's table of objects.
struct Server {
    ctx: Context,
    objs: BTreeMap<u64, Obj>,
    next: u64,
}

macro_rules! getter {
    ($name:ident, $variant:ident, $ty:ty, $what:literal) => {
        fn $name(&self, t: &mut Tokens<'_>) -> Result<&$ty> {
            let h: u64 = t.num(concat!($what, " handle"))?;
            match self.objs.get(&h) {
                Some(Obj::$variant(x)) => Ok(x),
                _ => Err(malformed(format!("no {} with handle {h}", $what))),
            }
        }
    };
}

impl Server {
    getter!(pd, Pd, ProtectionDomain, "PD");
    getter!(mr, Mr, MemoryRegion, "MR");
    getter!(cq, Cq, CompletionQueue, "CQ");
    getter!(channel, Channel, CompChannel, "completion channel");
    getter!(qp, Qp, QueuePair, "QP");
    getter!(srq, Srq, SharedReceiveQueue, "SRQ");

    fn add(&mut self, o: Obj) -> u64 {
        let h = self.next;
        self.next += 1;
        self.objs.insert(h, o);
        h
    }

    /// Handle 0 is "none"; any other must name a CQ.
    fn opt_cq(&self, h: u64) -> Result<Option<&CompletionQueue>> {
        match (h, self.objs.get(&h)) {
            (0, _) => Ok(None),
            (_, Some(Obj::Cq(c))) => Ok(Some(c)),
            _ => Err(malformed(format!("no CQ with handle {h}"))),
        }
    }

    fn recv_wrs<'a>(owned: &'a [(u64, Vec<Sge>)]) -> Vec<RecvWr<'a>> {
        owned.iter().map(|(wr_id, sges)| RecvWr { wr_id: *wr_id, sg_list: sges }).collect()
    }

    /// Runs one request; the reply's fields go into `out` (after `OK`).
    fn handle(&mut self, verb: &str, t: &mut Tokens<'_>, out: &mut Line) -> Result<()> {
        match verb {
            "drop" => {
                let h: u64 = t.num("handle")?;
                self.objs.remove(&h);
            }
            "query_device" => put_device_attr(out, &self.ctx.query_device()?),
            "query_port" => put_port_attr(out, &self.ctx.query_port(t.num("port_num")?)?),
            "query_gid" => {
                let gid = self.ctx.query_gid(t.num("port_num")?, t.num("index")?)?;
                out.bytes(&gid.0);
            }
            "alloc_pd" => {
                let pd = self.ctx.alloc_pd()?;
                out.num(self.add(Obj::Pd(pd)));
            }
            "create_comp_channel" => {
                let ch = self.ctx.create_comp_channel()?;
                out.num(self.add(Obj::Channel(ch)));
            }
            "create_cq" => {
                let cqe = t.num("cqe")?;
                let ch: u64 = t.num("channel handle")?;
                let vector = t.num("comp_vector")?;
                let channel = match (ch, self.objs.get(&ch)) {
                    (0, _) => None,
                    (_, Some(Obj::Channel(c))) => Some(c.clone()),
                    _ => return Err(malformed(format!("no completion channel with handle {ch}"))),
                };
                let cq = self.ctx.create_cq(cqe, channel.as_ref(), vector)?;
                let (cqe, id) = (cq.cqe(), cq.ops().id());
                out.num(self.add(Obj::Cq(cq))).num(cqe).num(id);
            }
            "get_async_event" => {
                let timeout = t.opt_duration("timeout")?.unwrap_or(BLOCKING_CAP);
                put_event(out, &self.ctx.get_async_event(Some(timeout))?);
            }
            "reg_mr" => {
                let pd = self.pd(t)?;
                let len = t.num("len")?;
                let access = AccessFlags::from_bits(t.num("access")?)
                    .ok_or_else(|| malformed("unknown access flag bits".into()))?;
                let mr = pd.reg_mr(len, access)?;
                let (lkey, rkey, addr, len) = (mr.lkey(), mr.rkey(), mr.addr(), mr.len());
                out.num(self.add(Obj::Mr(mr))).num(lkey).num(rkey).num(addr).num(len as u64);
            }
            "create_qp" => {
                let pd = self.pd(t)?.clone();
                let qp_type = decode(&QP_TYPES, t, "qp_type")?;
                let send_cq = self.opt_cq(t.num("send_cq")?)?.cloned();
                let recv_cq = self.opt_cq(t.num("recv_cq")?)?.cloned();
                let srq_h: u64 = t.num("srq")?;
                let srq = match (srq_h, self.objs.get(&srq_h)) {
                    (0, _) => None,
                    (_, Some(Obj::Srq(s))) => Some(s.clone()),
                    _ => return Err(malformed(format!("no SRQ with handle {srq_h}"))),
                };
                let cap = take_cap(t)?;
                let sq_sig_all = t.flag("sq_sig_all")?;
                let (Some(send_cq), Some(recv_cq)) = (send_cq, recv_cq) else {
                    return Err(malformed("create_qp without both CQs".into()));
                };
                let qp =
                    pd.create_qp(&QpInitAttr { qp_type, send_cq, recv_cq, srq, cap, sq_sig_all })?;
                let qpn = qp.qp_num();
                out.num(self.add(Obj::Qp(qp))).num(qpn);
            }
            "create_srq" => {
                let pd = self.pd(t)?;
                let init = SrqInitAttr {
                    max_wr: t.num("max_wr")?,
                    max_sge: t.num("max_sge")?,
                    srq_limit: t.num("srq_limit")?,
                };
                let srq = pd.create_srq(&init)?;
                let id = srq.id();
                out.num(self.add(Obj::Srq(srq))).num(id);
            }
            "create_ah" => {
                let pd = self.pd(t)?;
                let ah = pd.create_ah(&take_ah(t)?)?;
                out.num(self.add(Obj::Ah(ah)));
            }
            "dealloc_pd" => self.pd(t)?.ops().dealloc()?,
            "mr_read" => {
                let mr = self.mr(t)?;
                let (off, len): (usize, usize) = (t.num("offset")?, t.num("len")?);
                if len > mr.len() {
                    return Err(Error::inval(format!(
                        "reading {len} bytes from an MR of {} bytes",
                        mr.len()
                    )));
                }
                out.bytes(&mr.read_vec(off, len)?);
            }
            "mr_write" => {
                let mr = self.mr(t)?;
                let off = t.num("offset")?;
                mr.write(off, &t.bytes("data")?)?;
            }
            "dereg_mr" => self.mr(t)?.ops().dereg()?,
            "poll_cq" => {
                let cq = self.cq(t)?;
                let n: usize = t.num("count")?;
                let mut wc = vec![WorkCompletion::default(); n.min(4096)];
                let got = cq.poll(&mut wc)?;
                out.num(got as u64);
                for w in &wc[..got] {
                    put_wc(out, w);
                }
            }
            "req_notify_cq" => {
                let cq = self.cq(t)?;
                cq.req_notify(t.flag("solicited_only")?)?;
            }
            "resize_cq" => {
                let cq = self.cq(t)?;
                cq.resize(t.num("cqe")?)?;
                out.num(cq.cqe());
            }
            "destroy_cq" => self.cq(t)?.ops().destroy()?,
            "get_cq_event" => {
                let ch = self.channel(t)?;
                let timeout = t.opt_duration("timeout")?.unwrap_or(BLOCKING_CAP);
                let cq = ch.get_cq_event(Some(timeout))?;
                let h = self.objs.iter().find_map(|(h, o)| match o {
                    Obj::Cq(c) if *c == cq => Some(*h),
                    _ => None,
                });
                let h = h.ok_or_else(|| {
                    Error::new(Errno::Io, "ibv_get_cq_event: the event names a CQ the test dropped")
                })?;
                out.num(h);
            }
            "ack_cq_events" => {
                let ch = self.channel(t)?;
                let cq = self.cq(t)?;
                ch.ack_cq_events(cq, t.num("nevents")?);
            }
            "post_send" => {
                let qp = self.qp(t)?;
                let n: usize = t.num("number of WRs")?;
                let owned = (0..n.min(1 << 16))
                    .map(|_| take_send_wr(t))
                    .collect::<Result<Vec<OwnedSendWr>>>()?;
                let mut wrs = Vec::with_capacity(owned.len());
                for o in &owned {
                    let (ah_h, remote_qpn, remote_qkey) = o.ud;
                    let ud = match (ah_h, self.objs.get(&ah_h)) {
                        (0, _) => None,
                        (_, Some(Obj::Ah(ah))) => {
                            Some(UdTarget { ah: ah.clone(), remote_qpn, remote_qkey })
                        }
                        _ => return Err(malformed(format!("no AH with handle {ah_h}"))),
                    };
                    wrs.push(SendWr {
                        wr_id: o.wr_id,
                        sg_list: &o.sges,
                        opcode: o.opcode,
                        send_flags: o.send_flags,
                        imm_data: o.imm_data,
                        rdma: o.rdma,
                        atomic: o.atomic,
                        ud,
                        inline_data: o.inline.as_deref(),
                    });
                }
                qp.post_send(&wrs)?;
            }
            "post_recv" => {
                let qp = self.qp(t)?;
                let owned = take_recv_wrs(t)?;
                qp.post_recv(&Server::recv_wrs(&owned))?;
            }
            "modify_qp" => {
                let qp = self.qp(t)?;
                let attr = take_qp_attr(t)?;
                let mask = QpAttrMask::from_bits(t.num("mask")?)
                    .ok_or_else(|| malformed("unknown attribute mask bits".into()))?;
                qp.modify(&attr, mask)?;
            }
            "query_qp" => {
                let (a, c) = self.qp(t)?.query()?;
                put_qp_attr(out, &a);
                put_cap(out, &c);
            }
            "destroy_qp" => self.qp(t)?.ops().destroy()?,
            "post_srq_recv" => {
                let srq = self.srq(t)?;
                let owned = take_recv_wrs(t)?;
                srq.post_recv(&Server::recv_wrs(&owned))?;
            }
            "modify_srq" => {
                let srq = self.srq(t)?;
                let attr = take_srq_attr(t)?;
                let mask = SrqAttrMask::from_bits(t.num("mask")?)
                    .ok_or_else(|| malformed("unknown SRQ attribute mask bits".into()))?;
                srq.modify(&attr, mask)?;
            }
            "query_srq" => put_srq_attr(out, &self.srq(t)?.query()?),
            "destroy_srq" => self.srq(t)?.ops().destroy()?,
            other => return Err(malformed(format!("unknown verb {other:?}"))),
        }
        Ok(())
    }

    /// Drops every object, users before what they use, so the backend can free each one.
    fn drop_all(&mut self) {
        let rank = |o: &Obj| match o {
            Obj::Qp(_) => 0,
            Obj::Srq(_) | Obj::Ah(_) => 1,
            Obj::Mr(_) => 2,
            Obj::Cq(_) => 3,
            Obj::Channel(_) => 4,
            Obj::Pd(_) => 5,
        };
        for r in 0..=5 {
            self.objs.retain(|_, o| rank(o) != r);
        }
    }
}

/// The child's side: says `VERBS <device>`, then runs each request line from `input` on `ctx`
/// and writes its reply to `output`, until `BYE` (Ok, after dropping every object) or the end
/// of `input` (an error: the test is gone).
pub fn serve(
    ctx: &Context,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
) -> std::result::Result<(), String> {
    let mut say = |line: &str| -> std::result::Result<(), String> {
        writeln!(output, "{line}")
            .and_then(|()| output.flush())
            .map_err(|e| format!("writing a reply: {e}"))
    };
    say(&format!("VERBS {}", ctx.device_name()))?;
    let mut s = Server { ctx: ctx.clone(), objs: BTreeMap::new(), next: 1 };
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => return Err("stdin closed: the test process is gone".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("reading a request: {e}")),
        }
        let request = line.trim_end();
        if request == "BYE" {
            s.drop_all();
            return say("OK");
        }
        let mut t = Tokens::new(request);
        let mut out = Line::new("OK");
        let result = t.word("verb").and_then(|verb| s.handle(verb, &mut t, &mut out));
        let result = result.and_then(|()| t.end());
        match result {
            Ok(()) => say(&out.0)?,
            Err(e) => say(&format!("ERR {} {}", e.errno.code(), escape(&e.message)))?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T>(put: impl Fn(&mut Line), take: impl Fn(&mut Tokens<'_>) -> Result<T>) -> T {
        let mut l = Line::new("OK");
        put(&mut l);
        let mut t = Tokens::new(&l.0);
        assert_eq!(t.word("head").unwrap(), "OK");
        let v = take(&mut t).unwrap();
        t.end().unwrap();
        v
    }

    #[test]
    fn every_struct_survives_the_pipe() {
        let attr = QpAttr {
            qp_state: QpState::Rts,
            cur_qp_state: QpState::Sqe,
            path_mtu: Mtu::Mtu2048,
            qkey: 0x8000_0011,
            rq_psn: 0xff_fffe,
            sq_psn: 3,
            dest_qp_num: 0x12,
            qp_access_flags: AccessFlags::REMOTE_READ | AccessFlags::LOCAL_WRITE,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: 2,
                max_send_sge: 3,
                max_recv_sge: 4,
                max_inline_data: 5,
            },
            ah_attr: AhAttr {
                dlid: 7,
                sl: 1,
                src_path_bits: 2,
                static_rate: 3,
                is_global: true,
                port_num: 1,
                dgid: Gid::from_ipv4([10, 0, 0, 7]),
                flow_label: 0xabcde,
                sgid_index: 4,
                hop_limit: 64,
                traffic_class: 9,
            },
            pkey_index: 1,
            en_sqd_async_notify: true,
            sq_draining: false,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 8,
            min_rnr_timer: 12,
            port_num: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
        };
        assert_eq!(round_trip(|l| put_qp_attr(l, &attr), take_qp_attr), attr);
        for status in WC_STATUSES {
            for opcode in WC_OPCODES {
                let wc = WorkCompletion {
                    wr_id: u64::MAX,
                    status,
                    opcode,
                    vendor_err: 1,
                    byte_len: 2,
                    imm_data: u32::MAX,
                    qp_num: 4,
                    src_qp: 5,
                    wc_flags: WcFlags::GRH | WcFlags::WITH_IMM,
                    pkey_index: 6,
                    slid: 7,
                    sl: 8,
                    dlid_path_bits: 9,
                };
                assert_eq!(round_trip(|l| put_wc(l, &wc), take_wc), wc);
            }
        }
        let dev = DeviceAttr {
            fw_ver: "0.1.0 beta".into(),
            node_guid: 1,
            max_qp: 1024,
            max_ah: 65536,
            max_pkeys: 1,
            phys_port_cnt: 1,
            atomic_hca: true,
            ..DeviceAttr::default()
        };
        assert_eq!(round_trip(|l| put_device_attr(l, &dev), take_device_attr), dev);
        let port = PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::Mtu4096,
            active_mtu: Mtu::Mtu1024,
            lid: 0xfffe,
            link_layer: LinkLayer::Ethernet,
            ..PortAttr::default()
        };
        assert_eq!(round_trip(|l| put_port_attr(l, &port), take_port_attr), port);
        for event_type in EVENT_TYPES {
            for element in [
                AsyncElement::Qp(3),
                AsyncElement::Cq(u64::MAX),
                AsyncElement::Srq(1 << 40),
                AsyncElement::Port(1),
                AsyncElement::Device,
            ] {
                let e = AsyncEvent { event_type, element };
                assert_eq!(round_trip(|l| put_event(l, &e), take_event), e);
            }
        }
        let sges = [Sge { addr: 1 << 47, length: 7, lkey: 9 }, Sge::default()];
        let wr = SendWr {
            wr_id: 5,
            sg_list: &sges,
            opcode: WrOpcode::AtomicCmpAndSwp,
            send_flags: SendFlags::SIGNALED | SendFlags::FENCE,
            imm_data: 0xdead_beef,
            rdma: RdmaTarget { remote_addr: 1, rkey: 2 },
            atomic: AtomicTarget { remote_addr: 3, rkey: 4, compare_add: 5, swap: u64::MAX },
            ud: None,
            inline_data: Some(b""),
        };
        let o = round_trip(|l| put_send_wr(l, &wr, 0), take_send_wr);
        assert_eq!(
            (o.wr_id, o.opcode, o.send_flags, o.imm_data, o.rdma, o.atomic, o.ud),
            (wr.wr_id, wr.opcode, wr.send_flags, wr.imm_data, wr.rdma, wr.atomic, (0, 0, 0))
        );
        assert_eq!((o.inline.as_deref(), o.sges.as_slice()), (Some(&b""[..]), &sges[..]));
        let o = round_trip(|l| put_send_wr(l, &SendWr::default(), 0), take_send_wr);
        assert_eq!((o.inline, o.sges), (None, Vec::new()));
    }

    #[test]
    fn the_server_answers_each_line_and_names_what_it_cannot_run() {
        let soft = nic_model::soft::Soft::loopback();
        let ctx = soft.open("softverbs0").unwrap();
        let input = "alloc_pd\nreg_mr 1 64 1\nmr_write 2 0 abcd\nmr_read 2 0 2\nbogus 7\n\
                     reg_mr 99 64 1\nmr_read 2 0\nquery_port 2\nBYE\nalloc_pd\n";
        let mut out = Vec::new();
        serve(&ctx, &mut input.as_bytes(), &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "VERBS softverbs0");
        assert_eq!(lines[1], "OK 1");
        assert!(lines[2].starts_with("OK 2 "), "{}", lines[2]);
        assert_eq!(lines[3..5], ["OK", "OK abcd"]);
        assert_eq!(lines[5], "ERR 5 verbs pipe: unknown verb \"bogus\"");
        assert_eq!(lines[6], "ERR 5 verbs pipe: no PD with handle 99");
        assert_eq!(lines[7], "ERR 5 verbs pipe: len missing in \"mr_read 2 0\"");
        assert!(
            lines[8].starts_with("ERR 22 ibv_query_port: port 2 does not exist"),
            "{}",
            lines[8]
        );
        assert_eq!(lines[9..], ["OK"], "nothing is served after BYE");
        let e = serve(&ctx, &mut "alloc_pd\n".as_bytes(), &mut Vec::new()).unwrap_err();
        assert!(e.contains("stdin closed"), "{e}");
    }

    #[test]
    fn errors_keep_their_words_and_malformed_lines_are_named() {
        let m = "line one\nback\\slash";
        assert_eq!(unescape(&escape(m)), m);
        assert!(!escape(m).contains('\n'));
        let e = take_wc(&mut Tokens::new("1 2")).unwrap_err();
        assert_eq!(e.errno, Errno::Io);
        assert!(e.message.contains("opcode missing in \"1 2\""), "{e}");
        let e = take_wc(&mut Tokens::new("1 99")).unwrap_err();
        assert!(e.message.contains("status code 99 is unknown"), "{e}");
        let e = Tokens::new("zz").bytes("data").unwrap_err();
        assert!(e.message.contains("data"), "{e}");
    }
}
