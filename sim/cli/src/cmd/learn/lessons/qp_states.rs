//! `softverbs learn qp-states`: the control path of a queue pair. One RC QP is walked RESET →
//! INIT → RTR → RTS with each `ibv_modify_qp` printed as a program writes it (the attribute
//! mask in libibverbs' names and its value), a transition with a required attribute left out
//! and the error it gets, a move to ERR that flushes the posted receives, and the way back
//! through RESET to a working connection. Two devices of this process on the in-process
//! loopback wire: the control path needs no second process, and every state, errno and
//! status printed is the one the verbs returned in this run.

use std::io::Write;
use std::time::Duration;

use nic_model::soft::Soft;
use verbs_api::conn::{self, ConnOpts, Endpoint, PortAddress, QpInfo};
use verbs_api::ibv::IbvEnum;
use verbs_api::{
    QpAttr, QpAttrMask, QpCap, QpState, QpType, RecvWr, SendFlags, SendWr, WcStatus, WrOpcode,
};

use crate::cmd::learn::table;
use crate::cmd::CliError;

/// How long a completion may take on the loopback wire before the lesson gives up.
const WAIT: Duration = Duration::from_secs(10);
/// Receives posted before the QP is moved to ERR: each comes back flushed.
const FLUSHED: u64 = 3;

fn verbs<T>(r: verbs_api::Result<T>) -> Result<T, CliError> {
    r.map_err(|e| CliError::failed(e.to_string()))
}

fn say(out: &mut dyn Write, line: impl AsRef<str>) -> Result<(), CliError> {
    table::lines(out, "", &[line])
}

/// One `ibv_modify_qp` as the program writes it, its result and the state `ibv_query_qp`
/// reports afterwards. Returns the verbs' result.
fn modify(
    out: &mut dyn Write,
    ep: &Endpoint,
    attr: &QpAttr,
    mask: QpAttrMask,
) -> Result<verbs_api::Result<()>, CliError> {
    say(
        out,
        format!(
            "  ibv_modify_qp(qp, {{ qp_state = {}, ... }}, 0x{:06x})",
            attr.qp_state.ibv_name(),
            mask.bits()
        ),
    )?;
    say(out, format!("      mask: {}", mask.names()))?;
    let r = ep.qp.modify(attr, mask);
    let now = verbs(ep.qp.state())?.ibv_name();
    match &r {
        Ok(()) => say(out, format!("      -> 0; ibv_query_qp says {now}"))?,
        Err(e) => {
            say(out, format!("      -> {} ({}); the QP stays {now}", e.errno.name(), e.message))?
        }
    }
    Ok(r)
}

/// The attributes and mask of each forward step, as `conn` sets them for an RC QP.
fn init_step(opts: &ConnOpts) -> (QpAttr, QpAttrMask) {
    let attr = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: opts.access,
        ..Default::default()
    };
    (attr, QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS)
}

fn rtr_step(remote: &QpInfo, opts: &ConnOpts) -> (QpAttr, QpAttrMask) {
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: conn::av_to(remote.gid, opts),
        path_mtu: opts.mtu,
        dest_qp_num: remote.qpn,
        rq_psn: remote.psn,
        max_dest_rd_atomic: opts.max_rd_atomic,
        min_rnr_timer: opts.min_rnr_timer,
        ..Default::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    (attr, mask)
}

fn rts_step(psn: u32, opts: &ConnOpts) -> (QpAttr, QpAttrMask) {
    let attr = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: psn,
        timeout: opts.timeout,
        retry_cnt: opts.retry_cnt,
        rnr_retry: opts.rnr_retry,
        max_rd_atomic: opts.max_rd_atomic,
        ..Default::default()
    };
    let mask = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    (attr, mask)
}

/// Walks the QP forward from RESET to RTS, printing each step; the first failure ends it.
fn forward(
    out: &mut dyn Write,
    ep: &Endpoint,
    remote: &QpInfo,
    psn: u32,
    opts: &ConnOpts,
) -> Result<(), CliError> {
    for (attr, mask) in [init_step(opts), rtr_step(remote, opts), rts_step(psn, opts)] {
        verbs(modify(out, ep, &attr, mask)?)?;
    }
    Ok(())
}

/// Posts `n` receives of 64 bytes each at the start of `ep`'s MR, `wr_id`s from `first`.
fn post_receives(ep: &Endpoint, first: u64, n: u64) -> Result<(), CliError> {
    for i in 0..n {
        let sge = [ep.mr.sge(64 * i as usize, 64)];
        verbs(ep.qp.post_recv(&[RecvWr { wr_id: first + i, sg_list: &sge }]))?;
    }
    Ok(())
}

/// Runs the lesson on two devices of this process over the in-process loopback wire.
pub fn run(out: &mut dyn Write) -> Result<(), CliError> {
    say(out, "softverbs learn qp-states")?;
    table::lines(
        out,
        "",
        &[
            "",
            "What to watch:",
            "  A QP is a state machine the program drives with ibv_modify_qp: RESET -> INIT -> RTR",
            "  (ready to receive) -> RTS (ready to send). Each step must carry exactly the attributes",
            "  the IBA requires for it, named by the attribute mask; a missing one is refused and the",
            "  QP does not move. ERR flushes every posted work request; RESET clears the QP for reuse.",
            "",
            "The live run (two devices of this process on the in-process loopback wire):",
        ],
    )?;
    let soft = Soft::loopback();
    let (a, b) = (verbs(soft.open("softverbs0"))?, verbs(soft.open("softverbs1"))?);
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let ea = verbs(Endpoint::new(&a, QpType::Rc, cap, 16, 4096))?;
    let eb = verbs(Endpoint::new(&b, QpType::Rc, cap, 16, 4096))?;
    let (pa, pb) = (verbs(PortAddress::of(&a, None))?, verbs(PortAddress::of(&b, None))?);
    let opts_a = verbs(pa.conn_opts(ConnOpts::default()))?;
    let opts_b = verbs(pb.conn_opts(ConnOpts::default()))?;
    let (psn_a, psn_b) = (0x1000, 0x2000);
    let (info_a, info_b) = (pa.qp_info(&ea.qp, psn_a), pb.qp_info(&eb.qp, psn_b));
    // The peer is brought up quietly: this lesson is about the first QP.
    verbs(conn::connect(&eb.qp, psn_b, &info_a, &opts_b))?;
    let masks = [init_step(&opts_a).1, rtr_step(&info_b, &opts_a).1, rts_step(psn_a, &opts_a).1];
    say(out, format!(
        "  QP 0x{:06x} on softverbs0 was created in {}; its peer is QP 0x{:06x} on softverbs1 (GID {}).",
        ea.qp.qp_num(),
        verbs(ea.qp.state())?.ibv_name(),
        eb.qp.qp_num(),
        crate::cmd::gid_ntop(&info_b.gid)
    ))?;

    say(out, "\n1. RESET -> INIT: the port, the P_Key index and what remote peers may do to this QP's memory.")?;
    let (attr, mask) = init_step(&opts_a);
    verbs(modify(out, &ea, &attr, mask)?)?;

    say(
        out,
        "\n2. INIT -> RTR without IBV_QP_DEST_QPN: the responder would not know whom it answers.",
    )?;
    let (attr, full) = rtr_step(&info_b, &opts_a);
    let missing = match modify(out, &ea, &attr, full - QpAttrMask::DEST_QPN)? {
        Ok(()) => return Err(CliError::failed("an RTR without DEST_QPN was accepted")),
        Err(e) => e,
    };
    say(out, "   The same step with every required attribute:")?;
    verbs(modify(out, &ea, &attr, full)?)?;

    say(out, "\n3. RTR -> RTS: the first PSN it sends, its ACK timeout and retry counts.")?;
    let (attr, mask) = rts_step(psn_a, &opts_a);
    verbs(modify(out, &ea, &attr, mask)?)?;

    say(
        out,
        format!(
            "\n4. {FLUSHED} receives posted, then the QP moved to ERR: each comes back flushed."
        ),
    )?;
    post_receives(&ea, 100, FLUSHED)?;
    let err = QpAttr { qp_state: QpState::Err, ..Default::default() };
    verbs(modify(out, &ea, &err, QpAttrMask::STATE)?)?;
    let wcs = verbs(ea.cq.poll_n(FLUSHED as usize, WAIT))?;
    for wc in &wcs {
        say(
            out,
            format!(
                "      completion: wr_id {}, status {} ({}, {})",
                wc.wr_id,
                wc.status.to_ibv(),
                wc.status.name(),
                wc.status
            ),
        )?;
    }
    let flushed = wcs.iter().filter(|w| w.status == WcStatus::WrFlushErr).count();

    say(out, "\n5. ERR -> RESET, and forward again: the same QP number, a fresh QP.")?;
    let reset = QpAttr { qp_state: QpState::Reset, ..Default::default() };
    verbs(modify(out, &ea, &reset, QpAttrMask::STATE)?)?;
    // The peer expects the PSN it was told; a reused QP starts where the new exchange says.
    forward(out, &ea, &info_b, psn_a, &opts_a)?;

    say(out, "\n6. A SEND over the revived QP:")?;
    post_receives(&eb, 200, 1)?;
    verbs(ea.mr.write(0, b"back in RTS"))?;
    let sge = [ea.mr.sge(0, 11)];
    verbs(ea.qp.post_send(&[SendWr {
        wr_id: 7,
        sg_list: &sge,
        opcode: WrOpcode::Send,
        send_flags: SendFlags::SIGNALED,
        ..Default::default()
    }]))?;
    let sent = verbs(ea.cq.poll_n(1, WAIT))?;
    let got = verbs(eb.cq.poll_n(1, WAIT))?;
    let mut landed = [0u8; 11];
    verbs(eb.mr.read(0, &mut landed))?;
    say(
        out,
        format!(
            "      sender: wr_id {} status {}; receiver: wr_id {} status {} byte_len {}: {:?}",
            sent[0].wr_id,
            sent[0].status.name(),
            got[0].wr_id,
            got[0].status.name(),
            got[0].byte_len,
            String::from_utf8_lossy(&landed)
        ),
    )?;

    table::lines(
        out,
        "",
        &[
            "",
            "What is emulated:",
            "  Nothing on the control path: ibv_modify_qp checks the IBA's table of required and",
            "  optional attributes per transition (verbs-api's qp_state.rs), as a real NIC's driver",
            "  does; the flush completions are made by the emulated NIC as a real one makes them.",
            "",
            "Takeaway: a QP moves only by ibv_modify_qp with the attributes its next state needs; ERR",
            "flushes, RESET makes it new.",
            "",
            "Try:",
            "  softverbs demo --in-process   (the same three steps, then the traffic)",
            "  man ibv_modify_qp             (the table of required attributes)",
        ],
    )?;
    writeln!(
        out,
        "\nRESULT learn=qp-states masks=[{},{},{}] missing_errno={} flushed={flushed} of={FLUSHED} revived_send={} revived_recv_len={}",
        masks[0].bits(),
        masks[1].bits(),
        masks[2].bits(),
        missing.errno.name(),
        sent[0].status.name(),
        got[0].byte_len
    )
    .map_err(crate::cmd::output_error)
}
