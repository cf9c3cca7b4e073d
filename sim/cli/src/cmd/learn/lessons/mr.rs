//! `softverbs learn mr`: memory registration as the NIC enforces it. A target registers two
//! buffers, one a peer may write and one it may only read, and the initiator sends an RDMA
//! WRITE to each: the first lands, the second comes back as a NAK (remote access error) on
//! the wire, an `IBV_WC_REM_ACCESS_ERR` completion, and both QPs in ERR. Then a buffer is
//! deregistered and its old rkey used: the same NAK. Two devices of this process on the
//! in-process loopback wire, with a tap on the initiator's port, so each packet printed is one
//! that crossed it and each status the one the verbs returned.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nic_model::soft::{Soft, TapDir};
use verbs_api::conn::{self, ConnOpts, Endpoint, PortAddress};
use verbs_api::ibv::IbvEnum;
use verbs_api::{
    AccessFlags, MemoryRegion, QpAttr, QpAttrMask, QpCap, QpState, QpType, RdmaTarget, SendFlags,
    SendWr, WcStatus, WrOpcode,
};

use crate::cmd::learn::table;
use crate::cmd::words::{describe_packet, describe_wc};
use crate::cmd::CliError;

/// How long a completion may take on the loopback wire before the lesson gives up.
const WAIT: Duration = Duration::from_secs(10);
/// The bytes each WRITE carries.
const PAYLOAD: &[u8] = b"written by RDMA";

type Log = Arc<Mutex<Vec<(TapDir, Vec<u8>)>>>;

fn verbs<T>(r: verbs_api::Result<T>) -> Result<T, CliError> {
    r.map_err(|e| CliError::failed(e.to_string()))
}

fn say(out: &mut dyn Write, line: impl AsRef<str>) -> Result<(), CliError> {
    table::lines(out, "", &[line])
}

/// libibverbs' names of the access flags set in `a`.
fn access_names(a: AccessFlags) -> String {
    let names = [
        (AccessFlags::LOCAL_WRITE, "IBV_ACCESS_LOCAL_WRITE"),
        (AccessFlags::REMOTE_WRITE, "IBV_ACCESS_REMOTE_WRITE"),
        (AccessFlags::REMOTE_READ, "IBV_ACCESS_REMOTE_READ"),
        (AccessFlags::REMOTE_ATOMIC, "IBV_ACCESS_REMOTE_ATOMIC"),
    ];
    let set: Vec<&str> = names.iter().filter(|(f, _)| a.contains(*f)).map(|(_, n)| *n).collect();
    if set.is_empty() {
        "0 (local read only)".into()
    } else {
        set.join(" | ")
    }
}

fn show_mr(out: &mut dyn Write, what: &str, mr: &MemoryRegion) -> Result<(), CliError> {
    say(
        out,
        format!(
            "  {what}: addr {:#x}, {} bytes, lkey {:#x}, rkey {:#x}, access {}",
            mr.addr(),
            mr.len(),
            mr.lkey(),
            mr.rkey(),
            access_names(mr.access())
        ),
    )
}

/// Posts one signaled RDMA WRITE of [`PAYLOAD`] to (`addr`, `rkey`), prints the packets that
/// crossed the initiator's port meanwhile and its completion; returns the completion's status.
fn write_to(
    out: &mut dyn Write,
    ea: &Endpoint,
    log: &Log,
    addr: u64,
    rkey: u32,
    wr_id: u64,
) -> Result<WcStatus, CliError> {
    log.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let sge = [ea.mr.sge(0, PAYLOAD.len() as u32)];
    verbs(ea.qp.post_send(&[SendWr {
        wr_id,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: addr, rkey },
        ..Default::default()
    }]))?;
    let wc = verbs(ea.cq.poll_n(1, WAIT))?;
    for (dir, data) in log.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let arrow = if *dir == TapDir::Tx { "->" } else { "<-" };
        say(out, format!("      wire softverbs0 {arrow} {}", describe_packet(data)))?;
    }
    say(out, format!("      initiator CQ: {}", describe_wc(&wc[0])))?;
    Ok(wc[0].status)
}

/// Both QPs back through RESET to RTS, as a program recovers a connection after an error.
fn reconnect(ea: &Endpoint, eb: &Endpoint, psn: u32) -> Result<(), CliError> {
    let (pa, pb) = (verbs(PortAddress::of(&ea.ctx, None))?, verbs(PortAddress::of(&eb.ctx, None))?);
    let (oa, ob) =
        (verbs(pa.conn_opts(ConnOpts::default()))?, verbs(pb.conn_opts(ConnOpts::default()))?);
    let reset = QpAttr { qp_state: QpState::Reset, ..Default::default() };
    for ep in [ea, eb] {
        verbs(ep.qp.modify(&reset, QpAttrMask::STATE))?;
    }
    let (ia, ib) = (pa.qp_info(&ea.qp, psn), pb.qp_info(&eb.qp, psn + 0x100));
    verbs(conn::connect(&ea.qp, psn, &ib, &oa))?;
    verbs(conn::connect(&eb.qp, psn + 0x100, &ia, &ob))
}

/// Runs the lesson on two devices of this process over the in-process loopback wire.
pub fn run(out: &mut dyn Write) -> Result<(), CliError> {
    table::lines(
        out,
        "",
        &[
            "softverbs learn mr",
            "",
            "What to watch:",
            "  Registering memory gives it two keys: the lkey, which this side's work requests name,",
            "  and the rkey, which a peer puts in an RDMA WRITE, READ or atomic. The NIC checks every",
            "  remote access against the region's bounds and access flags, with no CPU involved: a",
            "  WRITE to memory registered without IBV_ACCESS_REMOTE_WRITE is refused on the wire.",
            "",
            "The live run (two devices of this process on the in-process loopback wire):",
        ],
    )?;
    let soft = Soft::loopback();
    let (a, b) = (verbs(soft.open("softverbs0"))?, verbs(soft.open("softverbs1"))?);
    let log: Log = Arc::default();
    let sink = log.clone();
    verbs(soft.set_tap(
        "softverbs0",
        Some(Arc::new(move |dir, data: &[u8]| {
            sink.lock().unwrap_or_else(|e| e.into_inner()).push((dir, data.to_vec()));
        })),
    ))?;
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let ea = verbs(Endpoint::new(&a, QpType::Rc, cap, 16, 4096))?;
    let eb = verbs(Endpoint::new(&b, QpType::Rc, cap, 16, 4096))?;
    verbs(ea.mr.write(0, PAYLOAD))?;
    let writable = verbs(eb.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE))?;
    let read_only = verbs(eb.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ))?;
    say(out, "  The target registered two buffers (ibv_reg_mr):")?;
    show_mr(out, "writable ", &writable)?;
    show_mr(out, "read-only", &read_only)?;
    reconnect(&ea, &eb, 0x100)?;

    say(out, "\n1. An RDMA WRITE to the writable buffer, with its rkey:")?;
    let ok = write_to(out, &ea, &log, writable.addr(), writable.rkey(), 1)?;
    let landed = verbs(writable.read_vec(0, PAYLOAD.len()))?;
    say(
        out,
        format!("      the target's buffer now holds {:?}", String::from_utf8_lossy(&landed)),
    )?;

    say(out, "\n2. The same WRITE to the read-only buffer, with its own (valid) rkey:")?;
    let denied = write_to(out, &ea, &log, read_only.addr(), read_only.rkey(), 2)?;
    let untouched = verbs(read_only.read_vec(0, PAYLOAD.len()))?.iter().all(|&b| b == 0);
    let (qa, qb) = (verbs(ea.qp.state())?, verbs(eb.qp.state())?);
    // The port's own events of the device's opening come first; the QP's follows them.
    let event = loop {
        match b.get_async_event(Some(Duration::from_millis(500))) {
            Ok(e) if matches!(e.element, verbs_api::AsyncElement::Port(_)) => continue,
            other => break other,
        }
    };
    say(
        out,
        format!(
            "      the read-only buffer is {}; initiator QP {qa}, target QP {qb}",
            if untouched { "untouched" } else { "CHANGED" }
        ),
    )?;
    match &event {
        Ok(e) => {
            let on = match e.element {
                verbs_api::AsyncElement::Qp(n) => format!("QP {n:#x}, the target's"),
                verbs_api::AsyncElement::Cq(n) => format!("CQ {n}"),
                verbs_api::AsyncElement::Srq(n) => format!("SRQ {n}"),
                verbs_api::AsyncElement::Port(n) => format!("port {n}"),
                verbs_api::AsyncElement::Device => "the device".into(),
            };
            say(
                out,
                format!(
                    "      target's async event (ibv_get_async_event): {} on {on}",
                    e.event_type.ibv_name()
                ),
            )?
        }
        Err(e) => say(out, format!("      target's async event: none ({})", e.errno.name()))?,
    }

    say(out, "\n3. Both QPs reset and reconnected; the writable buffer deregistered (ibv_dereg_mr), then its old rkey used:")?;
    reconnect(&ea, &eb, 0x200)?;
    let (addr, rkey) = (writable.addr(), writable.rkey());
    verbs(writable.dereg())?;
    let stale = write_to(out, &ea, &log, addr, rkey, 3)?;

    table::lines(
        out,
        "",
        &[
            "",
            "What is emulated:",
            "  The key, bounds and access checks are the target NIC's, made by the emulated NIC before",
            "  it touches memory, as a real NIC makes them in hardware; the target program did nothing.",
            "",
            "Takeaway: an rkey is a capability: it opens exactly the registered range for exactly the",
            "access flags given, and it dies with ibv_dereg_mr.",
            "",
            "Try:",
            "  softverbs learn qp-states   (how a QP gets to ERR and back)",
            "  man ibv_reg_mr              (the access flags)",
        ],
    )?;
    let event_name =
        event.as_ref().map_or("none".to_string(), |e| e.event_type.ibv_name().to_string());
    let event_on_target_qp =
        event.as_ref().is_ok_and(|e| e.element == verbs_api::AsyncElement::Qp(eb.qp.qp_num()));
    writeln!(
        out,
        "\nRESULT learn=mr target_event={event_name} event_on_target_qp={event_on_target_qp} writable={} read_only={} untouched={untouched} target_qp={qb} initiator_qp={qa} dereg={} landed={:?}",
        ok.name(),
        denied.name(),
        stale.name(),
        String::from_utf8_lossy(&landed)
    )
    .map_err(crate::cmd::output_error)
}
