//! Connecting RC/UC QPs the way verbs programs do on RoCE: exchange each side's LID (0 on
//! RoCE), QPN, PSN and GID (what `ibv_rc_pingpong` sends over TCP), then walk each QP through
//! INIT, RTR and RTS with the attribute masks the IBA state table requires, addressing the
//! peer by its GID from a GID index of this port.

use crate::{
    AccessFlags, AhAttr, CompletionQueue, Context, Gid, MemoryRegion, Mtu, ProtectionDomain,
    QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, QueuePair, Result,
};

/// The GID index of a softverbs port's IPv4 GID (`::ffff:10.0.x.y`, RoCE v2), the one it
/// sends from by default; rxe's table has its netdev's IPv4 address there too.
pub const DEFAULT_GID_INDEX: u8 = 1;

/// What each side tells the other before connecting (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// The port's LID: 0 on RoCE ports, which are addressed by `gid`.
    pub lid: u16,
    /// The QP number.
    pub qpn: u32,
    /// The first PSN this side will send.
    pub psn: u32,
    /// The GID the peer addresses this side by (the one at the GID index this side sends
    /// from).
    pub gid: Gid,
}

impl QpInfo {
    /// The wire form `ibv_rc_pingpong` exchanges: `LLLL:QQQQQQ:PPPPPP:GID` in hex.
    pub fn to_wire(&self) -> String {
        let gid: String = self.gid.0.iter().map(|b| format!("{b:02x}")).collect();
        format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn)
    }
    /// Parse [`QpInfo::to_wire`]; `None` if malformed.
    pub fn from_wire(s: &str) -> Option<QpInfo> {
        let mut it = s.trim().split(':');
        let lid = u16::from_str_radix(it.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(it.next()?, 16).ok()?;
        let psn = u32::from_str_radix(it.next()?, 16).ok()?;
        let g = it.next()?;
        if g.len() != 32 || it.next().is_some() {
            return None;
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(g.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(QpInfo { lid, qpn, psn, gid: Gid(gid) })
    }
}

/// Connection parameters (the `ibv_modify_qp` attributes of RTR and RTS).
#[derive(Clone, Copy, Debug)]
pub struct ConnOpts {
    /// `path_mtu`.
    pub mtu: Mtu,
    /// `timeout` (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// `retry_cnt`.
    pub retry_cnt: u8,
    /// `rnr_retry` (7 = infinite).
    pub rnr_retry: u8,
    /// `min_rnr_timer`.
    pub min_rnr_timer: u8,
    /// `max_rd_atomic` and `max_dest_rd_atomic`.
    pub max_rd_atomic: u8,
    /// `qp_access_flags`: the remote operations this QP accepts.
    pub access: AccessFlags,
    /// The GID table index this side sends from (`grh.sgid_index` of the address vector; the
    /// address vector always carries a GRH, as RoCE needs). By default
    /// [`DEFAULT_GID_INDEX`]; [`PortAddress::conn_opts`] sets the index a port was asked for.
    pub sgid_index: u8,
}

impl Default for ConnOpts {
    /// The values `ibv_rc_pingpong` uses: MTU 1024, timeout 14, retry 7, rnr_retry 7, min_rnr_timer 12.
    fn default() -> ConnOpts {
        ConnOpts {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 4,
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            sgid_index: DEFAULT_GID_INDEX,
        }
    }
}

/// How peers reach port 1 of a device: what a verbs program works out before it exchanges
/// addresses (as `ibv_rc_pingpong` does with `ibv_query_port` and `ibv_query_gid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAddress {
    /// The port's LID (0 on RoCE, where ports have none).
    pub lid: u16,
    /// The GID at `gid_index`.
    pub gid: Gid,
    /// The GID table index this side sends from.
    pub gid_index: u32,
    /// The port's active MTU: no path MTU may exceed it.
    pub active_mtu: Mtu,
}

impl PortAddress {
    /// Port 1 of `ctx`, with the GID at `gid_index`; by default the first IPv4 GID of the
    /// table (`::ffff:a.b.c.d`, index 1 on softverbs and on rxe over a netdev with an IPv4
    /// address; index 0 there is the IPv6 link-local one), else index 0. `EINVAL` for an
    /// index beyond the port's GID table or an empty entry.
    pub fn of(ctx: &Context, gid_index: Option<u32>) -> Result<PortAddress> {
        let port = ctx.query_port(1)?;
        let gid_index = match gid_index {
            Some(i) if i >= port.gid_tbl_len.max(1) => {
                return Err(crate::Error::inval(format!(
                    "GID index {i} does not exist: port 1 has {} GID{} (gid_tbl_len)",
                    port.gid_tbl_len,
                    if port.gid_tbl_len == 1 { "" } else { "s" }
                )))
            }
            Some(i) => i,
            None => first_ipv4_gid(ctx, port.gid_tbl_len).unwrap_or(0),
        };
        let gid = ctx.query_gid(1, gid_index)?;
        if gid.is_zero() {
            return Err(crate::Error::inval(format!(
                "GID index {gid_index} of port 1 is empty (see `softverbs devinfo -v` or \
                 `ibv_devinfo -v` for the GIDs the port has)"
            )));
        }
        Ok(PortAddress { lid: port.lid, gid, gid_index, active_mtu: port.active_mtu })
    }

    /// `opts` adjusted to this port: the path MTU at most the active MTU, and sending from
    /// this port's GID index.
    pub fn conn_opts(&self, opts: ConnOpts) -> Result<ConnOpts> {
        let sgid_index = u8::try_from(self.gid_index).map_err(|_| {
            crate::Error::inval(format!("GID index {} is larger than 255", self.gid_index))
        })?;
        Ok(ConnOpts { mtu: opts.mtu.min(self.active_mtu), sgid_index, ..opts })
    }

    /// What to tell the peer about a QP on this port whose first PSN is `psn`.
    pub fn qp_info(&self, qp: &QueuePair, psn: u32) -> QpInfo {
        QpInfo { lid: self.lid, qpn: qp.qp_num(), psn, gid: self.gid }
    }
}

/// The index of the first IPv4 GID (`::ffff:a.b.c.d`) of port 1, as perftest picks one.
fn first_ipv4_gid(ctx: &Context, gid_tbl_len: u32) -> Option<u32> {
    (0..gid_tbl_len).find(|&i| ctx.query_gid(1, i).is_ok_and(|g| g.to_ipv4().is_some()))
}

/// RESET → INIT (port 1, P_Key index 0, the access flags).
pub fn to_init(qp: &QueuePair, opts: &ConnOpts) -> Result<()> {
    let attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: opts.access,
        ..Default::default()
    };
    let mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    qp.modify(&attr, mask)
}

/// The address vector towards the port whose GID is `dgid` from port 1, as RoCE needs it: a
/// GRH (`is_global`) with the peer's GID and this side's GID index `opts.sgid_index`, hop
/// limit 1 as `ibv_rc_pingpong` sets it. For an RC/UC QP's RTR and for `ibv_create_ah`.
pub fn av_to(dgid: Gid, opts: &ConnOpts) -> AhAttr {
    AhAttr {
        port_num: 1,
        is_global: true,
        dgid,
        sgid_index: opts.sgid_index,
        hop_limit: 1,
        ..Default::default()
    }
}

/// INIT → RTR towards `remote`.
pub fn to_rtr(qp: &QueuePair, remote: &QpInfo, opts: &ConnOpts) -> Result<()> {
    let mut attr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr { dlid: remote.lid, ..av_to(remote.gid, opts) },
        path_mtu: opts.mtu,
        dest_qp_num: remote.qpn,
        rq_psn: remote.psn,
        ..Default::default()
    };
    let mut mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    if qp.qp_type() == QpType::Rc {
        attr.max_dest_rd_atomic = opts.max_rd_atomic;
        attr.min_rnr_timer = opts.min_rnr_timer;
        mask |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
    }
    qp.modify(&attr, mask)
}

/// RTR → RTS, sending from `psn`.
pub fn to_rts(qp: &QueuePair, psn: u32, opts: &ConnOpts) -> Result<()> {
    let mut attr = QpAttr { qp_state: QpState::Rts, sq_psn: psn, ..Default::default() };
    let mut mask = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
    if qp.qp_type() == QpType::Rc {
        attr.timeout = opts.timeout;
        attr.retry_cnt = opts.retry_cnt;
        attr.rnr_retry = opts.rnr_retry;
        attr.max_rd_atomic = opts.max_rd_atomic;
        mask |= QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::MAX_QP_RD_ATOMIC;
    }
    qp.modify(&attr, mask)
}

/// All three steps: INIT, RTR towards `remote`, RTS from `local_psn`.
pub fn connect(qp: &QueuePair, local_psn: u32, remote: &QpInfo, opts: &ConnOpts) -> Result<()> {
    to_init(qp, opts)?;
    to_rtr(qp, remote, opts)?;
    to_rts(qp, local_psn, opts)
}

/// The usual set of objects one side of a connection holds: a PD, one CQ for sends and
/// receives, one QP and one MR.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The open device.
    pub ctx: Context,
    /// Its PD.
    pub pd: ProtectionDomain,
    /// The CQ both queues complete into.
    pub cq: CompletionQueue,
    /// The QP.
    pub qp: QueuePair,
    /// A registered buffer with every access right.
    pub mr: MemoryRegion,
}

/// A QP of `qp_type` with `cap` in `pd` whose send and receive queues both complete into `cq`,
/// no SRQ, signaling chosen per WR: the QP of an [`Endpoint`] and of each of a server's clients.
pub fn create_qp_on(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    qp_type: QpType,
    cap: QpCap,
) -> Result<QueuePair> {
    pd.create_qp(&QpInitAttr {
        qp_type,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        srq: None,
        cap,
        sq_sig_all: false,
    })
}

impl Endpoint {
    /// Allocate a PD, a CQ of `cq_depth`, a QP of `qp_type` with `cap`, and an MR of `mr_len` bytes.
    pub fn new(
        ctx: &Context,
        qp_type: QpType,
        cap: QpCap,
        cq_depth: u32,
        mr_len: usize,
    ) -> Result<Endpoint> {
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(cq_depth, None, 0)?;
        let qp = create_qp_on(&pd, &cq, qp_type, cap)?;
        let mr = pd.reg_mr(mr_len, AccessFlags::all())?;
        Ok(Endpoint { ctx: ctx.clone(), pd, cq, qp, mr })
    }

    /// What to tell the peer, with `psn` as this side's first PSN: the GID is the one at the
    /// port's default GID index ([`PortAddress::of`] with none asked for), which
    /// [`ConnOpts::default`]'s `sgid_index` names on softverbs ports.
    pub fn info(&self, psn: u32) -> Result<QpInfo> {
        Ok(PortAddress::of(&self.ctx, None)?.qp_info(&self.qp, psn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_info_wire_form_round_trips() {
        let i = QpInfo { lid: 0, qpn: 0x11, psn: 0xabcdef, gid: Gid::from_ipv4([10, 0, 0, 3]) };
        let w = i.to_wire();
        // As ibv_rc_pingpong's "%04x:%06x:%06x:%s" with gid_to_wire_gid: the GID's bytes in order.
        assert_eq!(w, "0000:000011:abcdef:00000000000000000000ffff0a000003");
        assert_eq!(QpInfo::from_wire(&w), Some(i));
        assert_eq!(QpInfo::from_wire("0003:000011"), None);
        assert_eq!(QpInfo::from_wire("zz:1:1:00"), None);
    }
}
