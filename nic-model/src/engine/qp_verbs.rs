//! The QP verbs (`ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`). They sit
//! beside the QP object rather than in it because they run above the transport: moving a QP
//! to RTS starts its requester.

use verbs_api::{Error, QpAttr, QpAttrMask, QpCap, QpState, QpType, Result};

use crate::packet::{self, IpUdp};

use super::addr::av_path;
use super::cq::CqId;
use super::mr::PdId;
use super::qp::{self, Qp};
use super::req;
use super::time::{Nanos, Now};
use super::timers::refile_timer;
use super::{Hex, Nic};

impl Nic {
    /// `ibv_create_qp`: returns the QP number and the capabilities granted.
    pub fn create_qp(
        &mut self,
        pd: PdId,
        qp_type: QpType,
        send_cq: CqId,
        recv_cq: CqId,
        cap: QpCap,
        sq_sig_all: bool,
    ) -> Result<(u32, QpCap)> {
        let l = self.hca.cfg.limits.clone();
        if !self.hca.pds.contains_key(&pd) {
            return Err(Error::inval(format!("ibv_create_qp: PD {pd} does not exist")));
        }
        for (cq, what) in [(send_cq, "send_cq"), (recv_cq, "recv_cq")] {
            if !self.hca.cqs.contains_key(&cq) {
                return Err(Error::inval(format!("ibv_create_qp: {what} {cq} does not exist")));
            }
        }
        let checks = [
            ("max_send_wr", cap.max_send_wr, l.max_qp_wr),
            ("max_recv_wr", cap.max_recv_wr, l.max_qp_wr),
            ("max_send_sge", cap.max_send_sge, l.max_sge),
            ("max_recv_sge", cap.max_recv_sge, l.max_sge),
            ("max_inline_data", cap.max_inline_data, l.max_inline_data),
        ];
        for (what, v, max) in checks {
            if v > max {
                return Err(Error::inval(format!(
                    "ibv_create_qp: cap.{what} {v} exceeds the device limit {max}"
                )));
            }
        }
        if self.qps.len() >= l.max_qp as usize {
            return Err(Error::nomem(format!(
                "ibv_create_qp: the device's max_qp {} is reached",
                l.max_qp
            )));
        }
        // The next number of the sequence that no QP of this NIC has: fewer than max_qp are
        // in use, so at most that many are skipped.
        let range = self.hca.cfg.qpn_range();
        let mut qpn = self.hca.next_qpn;
        while self.qps.contains_key(&qpn) {
            qpn = next_qpn(qpn, range);
        }
        self.hca.next_qpn = next_qpn(qpn, range);
        // Like real providers, grant at least one WR and SGE so the QP is usable. As rxe
        // (rxe_qp.c, rxe_init_sq) sizes a send WQE to hold either the gather list or the
        // inline data, max_inline_data is rounded up to what the SGEs' room holds (16 bytes
        // per `struct ib_sge`), within the device limit.
        let max_send_sge = cap.max_send_sge.max(1);
        let granted = QpCap {
            max_send_wr: cap.max_send_wr.max(1),
            max_recv_wr: cap.max_recv_wr.max(1),
            max_send_sge,
            max_recv_sge: cap.max_recv_sge.max(1),
            max_inline_data: cap
                .max_inline_data
                .max(max_send_sge.saturating_mul(16).min(l.max_inline_data)),
        };
        for cq in [send_cq, recv_cq] {
            if let Some(c) = self.hca.cqs.get_mut(&cq) {
                c.users += 1;
            }
        }
        self.qps.insert(qpn, Qp::new(qpn, qp_type, pd, send_cq, recv_cq, granted, sq_sig_all));
        // A UD QP may hear from an IPv6 peer before it has an address handle for one.
        if let (QpType::Ud, Some(n)) = (qp_type, &self.hca.cfg.netdev) {
            n.ipv6_used.arm();
        }
        Ok((qpn, granted))
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        self.hca.qp_epoch += 1;
        let qp = self
            .qps
            .remove(&qpn)
            .ok_or_else(|| Error::inval(format!("ibv_destroy_qp: QP {qpn:#x} does not exist")))?;
        self.timers.refile(qpn, qp.timer_filed_ns, None);
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(c) = self.hca.cqs.get_mut(&cq) {
                c.users = c.users.saturating_sub(1);
            }
        }
        if let Some(s) = qp.srq.and_then(|id| self.hca.srqs.get_mut(&id)) {
            s.users = s.users.saturating_sub(1);
        }
        self.hca.mws.qp_destroyed(qpn);
        Ok(())
    }

    /// `ibv_modify_qp`, checked against the IBA state table.
    pub fn modify_qp(
        &mut self,
        now: Nanos,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<()> {
        let limits = verbs_api::qp_state::ModifyLimits {
            port_count: 1,
            pkey_tbl_len: 1,
            gid_tbl_len: super::addr::GID_TBL_LEN,
            max_mtu: self.hca.cfg.max_mtu,
            max_rd_atomic: self.hca.cfg.limits.max_rd_atom,
            max_dest_rd_atomic: self.hca.cfg.limits.max_rd_atom,
        };
        self.hca.qp_epoch += 1;
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return Err(Error::inval(format!("ibv_modify_qp: QP {qpn:#x} does not exist")));
        };
        let next = verbs_api::qp_state::check_modify(qp.qp_type, qp.state, attr, mask, &limits)?;
        if mask.contains(QpAttrMask::AV) {
            // Only connected QPs take a vector here (the state table refuses one for UD).
            let path = av_path(self.hca.cfg.ip(), self.hca.cfg.netdev.as_deref(), &attr.ah_attr)
                .map_err(|(errno, why)| {
                    Error::new(errno, format!("ibv_modify_qp: IBV_QP_AV: {why}"))
                })?;
            qp.dst_ip = path.ip;
            qp.ip6 = path.ip6;
            qp.ip_tos_ttl = qp::ip_tos_ttl(&attr.ah_attr);
        }
        if next == QpState::Reset {
            tracing::debug!(device = %self.hca.cfg.name, qpn = %Hex(qpn), from = ?qp.state,
                to = ?next, "QP state change");
            qp.reset();
            refile_timer(&mut self.timers, qp);
            return Ok(());
        }
        qp.apply_attrs(attr, mask);
        let was = qp.state;
        qp.state = next;
        if was != next {
            tracing::debug!(device = %self.hca.cfg.name, qpn = %Hex(qpn), from = ?was, to = ?next,
                sq_psn = %Hex(qp.req.psn.value()), rq_psn = %Hex(qp.resp.epsn.value()),
                "QP state change");
        }
        // Over IPv6 an ACK is built as any packet is: the template is an IPv4 datagram.
        if qp.ip6.is_some() {
            qp.ack_template = None;
        } else if qp.qp_type == QpType::Rc
            && matches!(next, QpState::Rtr | QpState::Rts | QpState::Sqd)
        {
            // The path (address, destination QP) is fixed from RTR on; build the ACK once.
            let ip = IpUdp {
                src: self.hca.cfg.ip(),
                dst: qp.dst_ip,
                src_port: qp.sport,
                tos: qp.ip_tos_ttl.0,
                ttl: qp.ip_tos_ttl.1,
                ..IpUdp::default()
            };
            qp.ack_template = Some(packet::AckTemplate::new(&ip, qp.attr.dest_qp_num));
        }
        if next == QpState::Err && was != QpState::Err {
            self.hca.flush(qp);
        }
        if next == QpState::Rts {
            req::drive(qp, &mut self.hca, &mut Now::At(now));
        }
        refile_timer(&mut self.timers, qp);
        Ok(())
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpAttr, QpCap)> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or_else(|| Error::inval(format!("ibv_query_qp: QP {qpn:#x} does not exist")))?;
        let mut a = qp.attr;
        a.qp_state = qp.state;
        a.cur_qp_state = qp.state;
        a.cap = qp.cap;
        a.sq_psn = qp.req.psn.value();
        a.rq_psn = qp.resp.epsn.value();
        Ok((a, qp.cap))
    }

    /// The state of a QP, if it exists.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state)
    }
}

/// The QP number after `qpn` in a NIC's sequence, wrapping from the highest a QP gets to the
/// lowest ([`NicConfig::qpn_range`](super::NicConfig::qpn_range)).
fn next_qpn(qpn: u32, (lo, hi): (u32, u32)) -> u32 {
    if qpn >= hi || qpn < lo {
        lo
    } else {
        qpn + 1
    }
}
