//! The checks a send WR must pass at `ibv_post_send`, written once ([`check_send`]), and the
//! checked WR they give ([`CheckedWr`]), which the post path (`post`) hands to the first
//! executor that can take it: direct reach (`reach`), the send-now fast path (`req`) or the
//! send queue. Also the SGE checks `ibv_post_recv` shares.

use verbs_api::ibv::IbvEnum;
use verbs_api::{AccessFlags, Error, QpState, QpType, Result, SendFlags, SendWr, WrOpcode};

use crate::packet;

use super::addr::av_path;
use super::mr::{MrTable, PdId};
use super::qp::{self, Qp, SendWqe};
use super::Hca;

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
}

/// A send WR that passed every check of `ibv_post_send`: only [`check_send`] makes one. It keeps
/// what the checks found (the message length, whether its data is read at post time, the UD
/// destination) beside the WR, and copies nothing: an executor reads the data once, where it
/// goes (a packet, the peer's memory, the WQE).
pub(crate) struct CheckedWr<'w, 'd> {
    wr: &'w SendWr<'d>,
    len: u32,
    inline: bool,
    signaled: bool,
    ud: Option<qp::UdDest>,
}

impl<'w, 'd> CheckedWr<'w, 'd> {
    /// The WR.
    #[inline]
    pub(crate) fn wr(&self) -> &'w SendWr<'d> {
        self.wr
    }

    /// The message length in bytes (8 for an atomic).
    #[inline]
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// Whether it completes with a work completion (`IBV_SEND_SIGNALED` or `sq_sig_all`).
    #[inline]
    pub(crate) fn signaled(&self) -> bool {
        self.signaled
    }

    /// Reads the message into `out` (its length): the WR's `inline_data`, or its gather list
    /// (an inline WR without `inline_data` is gathered from its SGEs too). False when a page
    /// of an on-demand MR is not mapped (`check_send` checked everything else): the WR then
    /// goes to the send queue, whose gather fails it with `LOC_PROT_ERR`.
    #[inline]
    pub(crate) fn read_into(&self, qp: &Qp, mrs: &MrTable, out: &mut [u8]) -> bool {
        debug_assert_eq!(out.len(), self.len as usize);
        match self.wr.inline_data {
            Some(d) => {
                out.copy_from_slice(d);
                true
            }
            None => mrs.gather(qp.pd, self.wr.sg_list, 0, out).is_ok(),
        }
    }

    /// The send queue's executor: the WQE the requester sends from (inline data copied in now).
    pub(crate) fn queued_wqe(&self, qp: &Qp, mrs: &MrTable) -> SendWqe {
        let inline = match (self.inline, self.wr.inline_data) {
            (false, _) => None,
            (true, Some(d)) => Some(qp::InlineData::from(d)),
            // Where the gather fails (an unmapped page of an on-demand MR: `check_send`
            // checked everything else), the WQE gathers at execution, which fails it.
            (true, None) => qp::InlineData::filled(self.len as usize, |buf| {
                mrs.gather(qp.pd, self.wr.sg_list, 0, buf)
            })
            .ok(),
        };
        let one_packet = matches!(self.wr.opcode, WrOpcode::AtomicWrite | WrOpcode::Flush);
        let npsn = match self.wr.opcode.is_atomic() || one_packet || qp.qp_type == QpType::Ud {
            _ if self.wr.opcode.is_local() => 0,
            true => 1,
            false => qp.packets_for(self.len),
        };
        self.wqe(inline, npsn)
    }

    /// The WQE of a WR that `req::post_now` sent whole, at `psn`, as one packet carrying
    /// `payload`.
    #[inline]
    pub(crate) fn sent_wqe(&self, payload: &[u8], psn: packet::Psn) -> SendWqe {
        let inline = self.inline.then(|| qp::InlineData::from(payload));
        let mut wqe = self.wqe(inline, 1);
        wqe.first_psn = psn;
        wqe.started = true;
        wqe
    }

    #[inline]
    fn wqe(&self, inline: Option<qp::InlineData>, npsn: u32) -> SendWqe {
        let wr = self.wr;
        SendWqe {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            signaled: self.signaled,
            solicited: wr.send_flags.contains(SendFlags::SOLICITED),
            fence: wr.send_flags.contains(SendFlags::FENCE),
            sges: match self.inline {
                true => qp::SgList::default(),
                false => qp::SgList::from(wr.sg_list),
            },
            inline,
            len: self.len,
            rdma: wr.rdma,
            atomic: wr.atomic,
            flush: wr.flush,
            imm: match wr.opcode {
                WrOpcode::SendWithInv | WrOpcode::LocalInv => wr.invalidate_rkey,
                _ => wr.imm_data,
            },
            bind: (wr.opcode == WrOpcode::BindMw).then(|| Box::new(wr.bind_mw)),
            ud: self.ud,
            first_psn: packet::Psn::new(0),
            npsn,
            started: false,
        }
    }
}

/// The checks a send WR must pass at `ibv_post_send`, in order, each failure with its message:
/// the QP's state, the opcode for the QP type, room in the send queue, inline data (allowed for
/// the opcode, within `max_inline_data`, its SGEs readable), the gather list (within
/// `max_send_sge`, each SGE of an MR of the QP's PD and inside it), the message length, an
/// atomic's one 8-byte SGE and aligned address, a UD WR's address handle and path MTU.
///
/// Room in the send queue is counted as rxe's ring counts it (`post_one_send`'s
/// `queue_full`): a WR holds its slot from its post until the completer retires it, and the
/// completer runs only after the call's doorbell, so every WR posted earlier in the same call
/// holds one, even one direct reach completed at once (`done_at_once`: those, which are not in
/// the send queue). A WR completed in an earlier call holds none, polled or not.
#[inline]
pub(crate) fn check_send<'w, 'd>(
    qp: &Qp,
    hca: &Hca,
    wr: &'w SendWr<'d>,
    done_at_once: usize,
) -> Result<CheckedWr<'w, 'd>> {
    let inval = |m: String| Err(Error::inval(m));
    if !matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Err | QpState::Sqe) {
        return inval(format!("QP {:#x} is in {}; ibv_post_send needs RTS", qp.qpn, qp.state));
    }
    if !wr.opcode.valid_for(qp.qp_type) {
        return inval(format!(
            "{} is not valid on an {} QP",
            wr.opcode.name(),
            qp.qp_type.ibv_name()
        ));
    }
    if qp.sq.len() + done_at_once >= qp.cap.max_send_wr as usize {
        return Err(Error::nomem(format!(
            "the send queue is full ({} WRs, max_send_wr)",
            qp.cap.max_send_wr
        )));
    }
    let too_many_sges = || {
        Error::inval(format!(
            "{} SGEs exceed max_send_sge {}",
            wr.sg_list.len(),
            qp.cap.max_send_sge
        ))
    };
    let inline = wr.send_flags.contains(SendFlags::INLINE) || wr.inline_data.is_some();
    let len: u64 = if inline {
        let inline_ok = matches!(
            wr.opcode,
            WrOpcode::Send
                | WrOpcode::SendWithImm
                | WrOpcode::SendWithInv
                | WrOpcode::RdmaWrite
                | WrOpcode::RdmaWriteWithImm
                | WrOpcode::AtomicWrite
        );
        if !inline_ok {
            return inval(format!("IBV_SEND_INLINE is not valid with {}", wr.opcode.name()));
        }
        let too_long = |len: usize| {
            Error::inval(format!(
                "{len} bytes of inline data exceed max_inline_data {}",
                qp.cap.max_inline_data
            ))
        };
        match wr.inline_data {
            // An ATOMIC WRITE's 8 bytes are its operand, not inline data (rxe keeps them
            // apart from max_inline_data too).
            Some(d) if wr.opcode == WrOpcode::AtomicWrite => d.len() as u64,
            Some(d) if d.len() > qp.cap.max_inline_data as usize => return Err(too_long(d.len())),
            Some(d) => d.len() as u64,
            None => {
                if wr.sg_list.len() > qp.cap.max_send_sge as usize {
                    return Err(too_many_sges());
                }
                let total: usize = wr.sg_list.iter().map(|s| s.length as usize).sum();
                if total > qp.cap.max_inline_data as usize {
                    hca.check_sges(qp.pd, wr.sg_list).map_err(Error::inval)?;
                    return Err(too_long(total));
                }
                // The gather reads the SGEs that hold bytes, each as `check_sges` checks it;
                // only a failure walks them all, for the message that names the bad one.
                let unreadable = wr
                    .sg_list
                    .iter()
                    .filter(|s| s.length != 0)
                    .find_map(|s| hca.mrs.resolve_local(qp.pd, s, AccessFlags::empty()).err());
                if let Some(e) = unreadable {
                    hca.check_sges(qp.pd, wr.sg_list).map_err(Error::inval)?;
                    return inval(format!("inline gather failed: {e:?}"));
                }
                total as u64
            }
        }
    } else {
        if wr.sg_list.len() > qp.cap.max_send_sge as usize {
            return Err(too_many_sges());
        }
        hca.check_sges(qp.pd, wr.sg_list).map_err(Error::inval)?;
        wr.sg_list.iter().map(|s| s.length as u64).sum()
    };
    // A message longer than max_msg_sz is accepted here and fails at execution with
    // LOC_LEN_ERR, as on hardware; it must still fit the 32-bit length field.
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
    let len = match wr.opcode {
        // `ibv_wr_atomic_write`'s value: 8 bytes (rxe copies exactly 8).
        WrOpcode::AtomicWrite if len != 8 => {
            return inval(format!(
                "IBV_WR_ATOMIC_WRITE writes 8 bytes (inline_data or one 8-byte SGE), got {len}"
            ));
        }
        // A FLUSH reads nothing locally: its length is the range it flushes (the RETH's).
        WrOpcode::Flush => u64::from(wr.flush.len),
        _ => len,
    };
    let mut ud = None;
    if qp.qp_type == QpType::Ud {
        let Some(wr_ud) = &wr.ud else {
            return inval("a UD send needs wr.ud (address handle, remote QPN, Q_Key)".into());
        };
        let ah = wr_ud.ah.attr();
        let path = match av_path(hca.cfg.ip(), hca.cfg.netdev.as_deref(), &ah) {
            Ok(p) => p,
            Err((_, why)) => return inval(format!("the address handle: {why}")),
        };
        ud = Some(qp::UdDest {
            dst_ip: path.ip,
            ip_tos_ttl: qp::ip_tos_ttl(&ah),
            ip6: path.ip6,
            remote_qpn: wr_ud.remote_qpn,
            remote_qkey: wr_ud.remote_qkey,
        });
        // UD messages are single packets of at most the port's active MTU (rxe's mtu_cap).
        let mtu = hca.cfg.active_mtu().bytes();
        if len > mtu as u64 {
            return inval(format!("a UD message of {len} bytes exceeds the path MTU {mtu}"));
        }
    }
    Ok(CheckedWr {
        wr,
        len: len as u32,
        inline,
        signaled: qp.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED),
        ud,
    })
}
