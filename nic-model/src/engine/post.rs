//! The post path: `ibv_post_send` and `ibv_post_recv`, with the checks that turn a WR into a
//! WQE (or an error naming what is wrong); the requester takes the WQEs from there.

use verbs_api::{Error, QpState, QpType, RecvWr, Result, SendFlags, SendWr, WrOpcode};

use crate::packet;

use super::addr::av_destination;
use super::mr::{self, PdId};
use super::qp::{self, Qp, RecvWqe, SendWqe};
use super::time::{Nanos, Now};
use super::timers::refile_timer;
use super::{reach, req};
use super::{Hca, Nic};

impl Nic {
    /// `ibv_post_send`. Each WR is checked before it is queued; the first bad one is an error
    /// naming its index (those before it were posted, as with `bad_wr`).
    pub fn post_send(&mut self, now: Nanos, qpn: u32, wrs: &[SendWr<'_>]) -> Result<()> {
        self.post_send_at(&mut Now::At(now), qpn, wrs)
    }

    /// [`Nic::post_send`] at a time that is read only if a packet arms the ACK timer (not
    /// when one is already running for an earlier request).
    pub fn post_send_at(&mut self, now: &mut Now<'_>, qpn: u32, wrs: &[SendWr<'_>]) -> Result<()> {
        let max_msg = self.hca.cfg.limits.max_msg_sz;
        let qp = self
            .qps
            .get_mut(&qpn)
            .ok_or_else(|| Error::inval(format!("ibv_post_send: QP {qpn:#x} does not exist")))?;
        let mut result = Ok(());
        let mut quiet = true;
        for (i, wr) in wrs.iter().enumerate() {
            if reach::candidate(qp, &self.hca, wr.opcode) && reach::post(qp, &mut self.hca, wr) {
                continue;
            }
            quiet = false;
            if req::post_now(qp, &mut self.hca, now, wr) {
                continue;
            }
            match self.hca.check_send(qp, wr, max_msg) {
                Ok(wqe) => {
                    qp.sq.push_back(wqe);
                }
                Err(e) => {
                    result = Err(Error::new(
                        e.errno,
                        format!("ibv_post_send: wr[{i}] (wr_id {}): {}", wr.wr_id, e.message),
                    ));
                    break;
                }
            }
        }
        self.hca.quiet_post = quiet && result.is_ok();
        if qp.state == QpState::Err {
            self.hca.flush(qp);
        } else {
            req::drive(qp, &mut self.hca, now);
        }
        refile_timer(&mut self.timers, qp);
        result
    }

    /// Whether the last `ibv_post_send` did every WR by direct reach (`engine::reach`), so
    /// that it gave the wire nothing; reading it clears it. A host may then skip the
    /// progress round it runs after a post, when nothing else waits either.
    pub fn take_quiet_post(&mut self) -> bool {
        std::mem::take(&mut self.hca.quiet_post)
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: u32, wrs: &[RecvWr<'_>]) -> Result<()> {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return Err(Error::inval(format!("ibv_post_recv: QP {qpn:#x} does not exist")));
        };
        if qp.state == QpState::Reset {
            return Err(Error::inval(format!(
                "ibv_post_recv: QP {qpn:#x} is in RESET; post receives in INIT or later"
            )));
        }
        if qp.srq.is_some() {
            return Err(Error::inval(format!(
                "ibv_post_recv: QP {qpn:#x} takes its receives from an SRQ; use ibv_post_srq_recv"
            )));
        }
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            let fail = |m: String| {
                Error::inval(format!("ibv_post_recv: wr[{i}] (wr_id {}): {m}", wr.wr_id))
            };
            if qp.rq.len() >= qp.cap.max_recv_wr as usize {
                result = Err(Error::nomem(format!(
                    "ibv_post_recv: wr[{i}] (wr_id {}): the receive queue is full ({} WRs, max_recv_wr)",
                    wr.wr_id, qp.cap.max_recv_wr
                )));
                break;
            }
            if wr.sg_list.len() > qp.cap.max_recv_sge as usize {
                result = Err(fail(format!(
                    "{} SGEs exceed max_recv_sge {}",
                    wr.sg_list.len(),
                    qp.cap.max_recv_sge
                )));
                break;
            }
            if let Err(m) = self.hca.check_sges(qp.pd, wr.sg_list) {
                result = Err(fail(m));
                break;
            }
            let len = wr.sg_list.iter().map(|s| s.length as u64).sum();
            qp.rq.push_back(RecvWqe { wr_id: wr.wr_id, sges: wr.sg_list.into(), len });
        }
        if qp.state == QpState::Err {
            // Flushing clears the QP's timers.
            self.hca.flush(qp);
            refile_timer(&mut self.timers, qp);
        }
        result
    }
}

impl Hca {
    /// Post-time SGE checks: every lkey names an MR of this PD and the range lies inside it.
    pub(crate) fn check_sges(
        &self,
        pd: PdId,
        sges: &[verbs_api::Sge],
    ) -> std::result::Result<(), String> {
        for (j, s) in sges.iter().enumerate() {
            let Some(mr) = self.mrs.get(s.lkey) else {
                return Err(format!("sg_list[{j}].lkey {:#x} names no registered MR", s.lkey));
            };
            if mr.pd != pd {
                return Err(format!("sg_list[{j}].lkey {:#x} belongs to another PD", s.lkey));
            }
            if mr.offset_of(s.addr, s.length as u64).is_none() {
                return Err(format!(
                    "sg_list[{j}] [{:#x}, +{}) is outside its MR [{:#x}, +{})",
                    s.addr,
                    s.length,
                    mr.iova,
                    mr.memory.len()
                ));
            }
        }
        Ok(())
    }

    fn check_send(&self, qp: &Qp, wr: &SendWr<'_>, max_msg: u32) -> Result<SendWqe> {
        let inval = |m: String| Err(Error::inval(m));
        if !matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Err | QpState::Sqe) {
            return inval(format!("QP {:#x} is in {}; ibv_post_send needs RTS", qp.qpn, qp.state));
        }
        if !wr.opcode.valid_for(qp.qp_type) {
            return inval(format!("{} is not valid on a {:?} QP", wr.opcode.name(), qp.qp_type));
        }
        if qp.sq.len() >= qp.cap.max_send_wr as usize {
            return Err(Error::nomem(format!(
                "the send queue is full ({} WRs, max_send_wr)",
                qp.cap.max_send_wr
            )));
        }
        let inline_flag = wr.send_flags.contains(SendFlags::INLINE);
        let inline_ok = matches!(
            wr.opcode,
            WrOpcode::Send
                | WrOpcode::SendWithImm
                | WrOpcode::RdmaWrite
                | WrOpcode::RdmaWriteWithImm
        );
        let mut inline = None;
        let mut sges = qp::SgList::default();
        let len: u64;
        if inline_flag || wr.inline_data.is_some() {
            if !inline_ok {
                return inval(format!("IBV_SEND_INLINE is not valid with {}", wr.opcode.name()));
            }
            let too_long = |len: usize| {
                Error::inval(format!(
                    "{len} bytes of inline data exceed max_inline_data {}",
                    qp.cap.max_inline_data
                ))
            };
            let data = match wr.inline_data {
                Some(d) if d.len() > qp.cap.max_inline_data as usize => {
                    return Err(too_long(d.len()))
                }
                Some(d) => qp::InlineData::from(d),
                None => {
                    if wr.sg_list.len() > qp.cap.max_send_sge as usize {
                        return inval(format!(
                            "{} SGEs exceed max_send_sge {}",
                            wr.sg_list.len(),
                            qp.cap.max_send_sge
                        ));
                    }
                    let total: usize = wr.sg_list.iter().map(|s| s.length as usize).sum();
                    let gathered = match total <= qp.cap.max_inline_data as usize {
                        true => qp::InlineData::filled(total, |buf| {
                            self.mrs.gather(qp.pd, wr.sg_list, 0, buf)
                        }),
                        false => Err(mr::DmaError::Length),
                    };
                    match gathered {
                        Ok(data) => data,
                        Err(e) => {
                            // The gather checks each SGE as `check_sges` does: only a failure
                            // walks them again, for the message that names the bad one.
                            self.check_sges(qp.pd, wr.sg_list).map_err(Error::inval)?;
                            return match e {
                                mr::DmaError::Length => Err(too_long(total)),
                                e => inval(format!("inline gather failed: {e:?}")),
                            };
                        }
                    }
                }
            };
            len = data.len() as u64;
            inline = Some(data);
        } else {
            if wr.sg_list.len() > qp.cap.max_send_sge as usize {
                return inval(format!(
                    "{} SGEs exceed max_send_sge {}",
                    wr.sg_list.len(),
                    qp.cap.max_send_sge
                ));
            }
            self.check_sges(qp.pd, wr.sg_list).map_err(Error::inval)?;
            sges = qp::SgList::from(wr.sg_list);
            len = sges.iter().map(|s| s.length as u64).sum();
        }
        // A message longer than max_msg_sz is accepted here and fails at execution with
        // LOC_LEN_ERR, as on hardware; it must still fit the 32-bit length field.
        let _ = max_msg;
        if len > u32::MAX as u64 {
            return inval(format!("message of {len} bytes does not fit a 32-bit length"));
        }
        if wr.opcode.is_atomic() {
            if len != 8 {
                return inval(format!(
                    "{} needs one 8-byte SGE for the original value, got {len} bytes",
                    wr.opcode.name()
                ));
            }
            if !wr.atomic.remote_addr.is_multiple_of(8) {
                return inval(format!(
                    "atomic remote_addr {:#x} is not 8-byte aligned",
                    wr.atomic.remote_addr
                ));
            }
        }
        let mut ud = None;
        if qp.qp_type == QpType::Ud {
            let Some(wr_ud) = &wr.ud else {
                return inval("a UD send needs wr.ud (address handle, remote QPN, Q_Key)".into());
            };
            let ah = wr_ud.ah.attr();
            let dst_ip = match av_destination(self.cfg.ip(), &ah) {
                Ok(ip) => ip,
                Err((_, why)) => return inval(format!("the address handle: {why}")),
            };
            ud = Some(qp::UdDest {
                dst_ip,
                ip_tos_ttl: qp::ip_tos_ttl(&ah),
                remote_qpn: wr_ud.remote_qpn,
                remote_qkey: wr_ud.remote_qkey,
            });
            // UD messages are single packets of at most the port's MTU.
            let mtu = self.cfg.max_mtu.bytes();
            if len > mtu as u64 {
                return inval(format!("a UD message of {len} bytes exceeds the path MTU {mtu}"));
            }
        }
        let signaled = qp.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED);
        let mut wqe = SendWqe {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            signaled,
            solicited: wr.send_flags.contains(SendFlags::SOLICITED),
            fence: wr.send_flags.contains(SendFlags::FENCE),
            sges,
            inline,
            len: len as u32,
            rdma: wr.rdma,
            atomic: wr.atomic,
            imm: wr.imm_data,
            ud,
            first_psn: packet::Psn::new(0),
            npsn: 0,
            started: false,
        };
        wqe.npsn = if wqe.opcode.is_atomic() || qp.qp_type == QpType::Ud {
            1
        } else {
            qp.packets_for(wqe.len)
        };
        Ok(wqe)
    }
}
