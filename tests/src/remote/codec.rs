//! The line codec of the verbs pipe: one request or reply per line, a head word and
//! space-separated fields; numbers in decimal, bytes in hex (`-` when empty, `~` for "none"),
//! each enum as its index in a table, and error messages escaped onto one line. The client and
//! the server both speak it; it knows neither.

use std::fmt::Write as _;
use std::time::Duration;

use verbs_api::*;

/// One request or reply being written: a head word and space-separated fields.
#[derive(Debug)]
pub(super) struct Line(pub(super) String);

impl Line {
    pub(super) fn new(head: &str) -> Line {
        Line(head.to_string())
    }
    pub(super) fn num(&mut self, v: impl Into<u64>) -> &mut Line {
        let _ = write!(self.0, " {}", v.into());
        self
    }
    pub(super) fn flag(&mut self, v: bool) -> &mut Line {
        self.num(v)
    }
    pub(super) fn bytes(&mut self, b: &[u8]) -> &mut Line {
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
    pub(super) fn opt_bytes(&mut self, b: Option<&[u8]>) -> &mut Line {
        match b {
            None => {
                self.0.push_str(" ~");
                self
            }
            Some(b) => self.bytes(b),
        }
    }
    pub(super) fn opt_duration(&mut self, d: Option<Duration>) -> &mut Line {
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
pub(super) fn malformed(what: String) -> Error {
    Error::new(Errno::Io, format!("verbs pipe: {what}"))
}

/// The fields of one line being read.
pub(super) struct Tokens<'a> {
    it: std::str::SplitAsciiWhitespace<'a>,
    line: &'a str,
}

impl<'a> Tokens<'a> {
    pub(super) fn new(line: &'a str) -> Tokens<'a> {
        Tokens { it: line.split_ascii_whitespace(), line }
    }
    pub(super) fn word(&mut self, what: &str) -> Result<&'a str> {
        self.it.next().ok_or_else(|| malformed(format!("{what} missing in {:?}", self.line)))
    }
    pub(super) fn num<T: TryFrom<u64>>(&mut self, what: &str) -> Result<T> {
        let w = self.word(what)?;
        let v: u64 = w.parse().map_err(|e| malformed(format!("{what} {w:?}: {e}")))?;
        T::try_from(v).map_err(|_| malformed(format!("{what} {v} is out of range")))
    }
    pub(super) fn flag(&mut self, what: &str) -> Result<bool> {
        match self.num::<u8>(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(malformed(format!("{what} {v} is not 0 or 1"))),
        }
    }
    pub(super) fn hex(w: &str, what: &str) -> Result<Vec<u8>> {
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
    pub(super) fn bytes(&mut self, what: &str) -> Result<Vec<u8>> {
        let w = self.word(what)?;
        Tokens::hex(w, what)
    }
    pub(super) fn opt_bytes(&mut self, what: &str) -> Result<Option<Vec<u8>>> {
        match self.word(what)? {
            "~" => Ok(None),
            w => Tokens::hex(w, what).map(Some),
        }
    }
    pub(super) fn opt_duration(&mut self, what: &str) -> Result<Option<Duration>> {
        match self.word(what)? {
            "~" => Ok(None),
            w => w
                .parse()
                .map(|us| Some(Duration::from_micros(us)))
                .map_err(|e| malformed(format!("{what} {w:?}: {e}"))),
        }
    }
    pub(super) fn end(mut self) -> Result<()> {
        match self.it.next() {
            None => Ok(()),
            Some(w) => Err(malformed(format!("unexpected {w:?} at the end of {:?}", self.line))),
        }
    }
}

/// An error message on one line: backslashes and newlines escaped.
pub(super) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

pub(super) fn unescape(s: &str) -> String {
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

// Each enum travels as its `IBV_*` value, from verbs-api's one table per enum (verbs_api::ibv).

/// The `IBV_*` value an enum travels as.
pub(super) fn code<T: IbvEnum>(v: T) -> u64 {
    v.to_ibv().into()
}

/// The enum of the `IBV_*` value read as `what`; a value with no variant is a malformed line.
pub(super) fn decode<T: IbvEnum>(t: &mut Tokens<'_>, what: &str) -> Result<T> {
    let c: u32 = t.num(what)?;
    T::from_ibv(c).ok_or_else(|| malformed(format!("{what} code {c} is unknown ({})", T::C_ENUM)))
}

pub(super) fn put_sges(l: &mut Line, sges: &[Sge]) {
    l.num(sges.len() as u64);
    for s in sges {
        l.num(s.addr).num(s.length).num(s.lkey);
    }
}

pub(super) fn take_sges(t: &mut Tokens<'_>) -> Result<Vec<Sge>> {
    let n: usize = t.num("num_sge")?;
    if n > 1 << 16 {
        return Err(malformed(format!("num_sge {n} is implausible")));
    }
    (0..n)
        .map(|_| Ok(Sge { addr: t.num("addr")?, length: t.num("length")?, lkey: t.num("lkey")? }))
        .collect()
}

pub(super) fn put_cap(l: &mut Line, c: &QpCap) {
    l.num(c.max_send_wr)
        .num(c.max_recv_wr)
        .num(c.max_send_sge)
        .num(c.max_recv_sge)
        .num(c.max_inline_data);
}

pub(super) fn take_cap(t: &mut Tokens<'_>) -> Result<QpCap> {
    Ok(QpCap {
        max_send_wr: t.num("max_send_wr")?,
        max_recv_wr: t.num("max_recv_wr")?,
        max_send_sge: t.num("max_send_sge")?,
        max_recv_sge: t.num("max_recv_sge")?,
        max_inline_data: t.num("max_inline_data")?,
    })
}

pub(super) fn take_gid(t: &mut Tokens<'_>) -> Result<Gid> {
    let b = t.bytes("gid")?;
    let g: [u8; 16] =
        b.try_into().map_err(|b: Vec<u8>| malformed(format!("a GID of {} bytes", b.len())))?;
    Ok(Gid(g))
}

pub(super) fn put_ah(l: &mut Line, a: &AhAttr) {
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

pub(super) fn take_ah(t: &mut Tokens<'_>) -> Result<AhAttr> {
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

pub(super) fn put_qp_attr(l: &mut Line, a: &QpAttr) {
    l.num(code(a.qp_state))
        .num(code(a.cur_qp_state))
        .num(code(a.path_mtu))
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

pub(super) fn take_qp_attr(t: &mut Tokens<'_>) -> Result<QpAttr> {
    Ok(QpAttr {
        qp_state: decode(t, "qp_state")?,
        cur_qp_state: decode(t, "cur_qp_state")?,
        path_mtu: decode(t, "path_mtu")?,
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

pub(super) fn put_wc(l: &mut Line, w: &WorkCompletion) {
    l.num(w.wr_id)
        .num(code(w.status))
        .num(code(w.opcode))
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

pub(super) fn take_wc(t: &mut Tokens<'_>) -> Result<WorkCompletion> {
    Ok(WorkCompletion {
        wr_id: t.num("wr_id")?,
        status: decode(t, "status")?,
        opcode: decode(t, "opcode")?,
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

pub(super) fn put_device_attr(l: &mut Line, d: &DeviceAttr) {
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
        .num(d.max_mcast_grp)
        .num(d.max_mcast_qp_attach)
        .num(d.max_total_mcast_qp_attach)
        .num(d.phys_port_cnt)
        .num(d.max_inline_data)
        .num(d.max_msg_sz)
        .flag(d.atomic_hca);
}

pub(super) fn take_device_attr(t: &mut Tokens<'_>) -> Result<DeviceAttr> {
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
        max_mcast_grp: t.num("max_mcast_grp")?,
        max_mcast_qp_attach: t.num("max_mcast_qp_attach")?,
        max_total_mcast_qp_attach: t.num("max_total_mcast_qp_attach")?,
        phys_port_cnt: t.num("phys_port_cnt")?,
        max_inline_data: t.num("max_inline_data")?,
        max_msg_sz: t.num("max_msg_sz")?,
        atomic_hca: t.flag("atomic_hca")?,
    })
}

pub(super) fn put_port_attr(l: &mut Line, p: &PortAttr) {
    l.num(code(p.state))
        .num(code(p.max_mtu))
        .num(code(p.active_mtu))
        .num(p.gid_tbl_len)
        .num(p.port_cap_flags)
        .num(p.max_msg_sz)
        .num(p.pkey_tbl_len)
        .num(p.lid)
        .num(p.sm_lid)
        .num(p.lmc)
        .num(p.active_width)
        .num(p.active_speed)
        .num(p.phys_state)
        .num(code(p.link_layer));
}

pub(super) fn take_port_attr(t: &mut Tokens<'_>) -> Result<PortAttr> {
    Ok(PortAttr {
        state: decode(t, "state")?,
        max_mtu: decode(t, "max_mtu")?,
        active_mtu: decode(t, "active_mtu")?,
        gid_tbl_len: t.num("gid_tbl_len")?,
        port_cap_flags: t.num("port_cap_flags")?,
        max_msg_sz: t.num("max_msg_sz")?,
        pkey_tbl_len: t.num("pkey_tbl_len")?,
        lid: t.num("lid")?,
        sm_lid: t.num("sm_lid")?,
        lmc: t.num("lmc")?,
        active_width: t.num("active_width")?,
        active_speed: t.num("active_speed")?,
        phys_state: t.num("phys_state")?,
        link_layer: decode(t, "link_layer")?,
    })
}

pub(super) fn put_event(l: &mut Line, e: &AsyncEvent) {
    let (kind, v) = match e.element {
        AsyncElement::Qp(n) => (0, n as u64),
        AsyncElement::Cq(id) => (1, id),
        AsyncElement::Srq(id) => (2, id),
        AsyncElement::Port(p) => (3, p as u64),
        AsyncElement::Device => (4, 0),
    };
    l.num(code(e.event_type)).num(kind as u64).num(v);
}

pub(super) fn take_event(t: &mut Tokens<'_>) -> Result<AsyncEvent> {
    let event_type = decode(t, "event_type")?;
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

pub(super) fn put_srq_attr(l: &mut Line, a: &SrqAttr) {
    l.num(a.max_wr).num(a.max_sge).num(a.srq_limit);
}

pub(super) fn take_srq_attr(t: &mut Tokens<'_>) -> Result<SrqAttr> {
    Ok(SrqAttr {
        max_wr: t.num("max_wr")?,
        max_sge: t.num("max_sge")?,
        srq_limit: t.num("srq_limit")?,
    })
}

/// `ah` is the address handle's handle in the child (0: none).
pub(super) fn put_send_wr(l: &mut Line, w: &SendWr<'_>, ah: u64) {
    l.num(w.wr_id)
        .num(code(w.opcode))
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
pub(super) struct OwnedSendWr {
    pub(super) wr_id: u64,
    pub(super) opcode: WrOpcode,
    pub(super) send_flags: SendFlags,
    pub(super) imm_data: u32,
    pub(super) rdma: RdmaTarget,
    pub(super) atomic: AtomicTarget,
    /// (handle of the AH, remote QPN, remote Q_Key); handle 0 means no `wr.ud`.
    pub(super) ud: (u64, u32, u32),
    pub(super) inline: Option<Vec<u8>>,
    pub(super) sges: Vec<Sge>,
}

pub(super) fn take_send_wr(t: &mut Tokens<'_>) -> Result<OwnedSendWr> {
    Ok(OwnedSendWr {
        wr_id: t.num("wr_id")?,
        opcode: decode(t, "opcode")?,
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

pub(super) fn put_recv_wrs(l: &mut Line, wrs: &[RecvWr<'_>]) {
    l.num(wrs.len() as u64);
    for w in wrs {
        l.num(w.wr_id);
        put_sges(l, w.sg_list);
    }
}

pub(super) fn take_recv_wrs(t: &mut Tokens<'_>) -> Result<Vec<(u64, Vec<Sge>)>> {
    let n: usize = t.num("number of WRs")?;
    if n > 1 << 20 {
        return Err(malformed(format!("{n} receive WRs is implausible")));
    }
    (0..n).map(|_| Ok((t.num("wr_id")?, take_sges(t)?))).collect()
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
        for status in WcStatus::TABLE.iter().map(|r| r.0) {
            for opcode in WcOpcode::TABLE.iter().map(|r| r.0) {
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
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
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
        for event_type in AsyncEventType::TABLE.iter().map(|r| r.0) {
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
            ..SendWr::default()
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
