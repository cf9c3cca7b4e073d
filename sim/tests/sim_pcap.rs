//! A capture of a run that makes the engine emit every RC opcode it has, checked against the
//! simulator's own record of what it delivered, and (when `tshark` is installed) against
//! Wireshark's dissector: same opcodes, same PSNs, nothing malformed.

use std::collections::BTreeSet;
use std::path::Path;

// The capture helpers live with the command line's capture tests (sim/cli/tests/pcap_check/),
// which have the other user of them.
#[path = "../cli/tests/pcap_check/mod.rs"]
mod pcap_check;
use pcap_check::{num, read_pcap, tshark_fields};

use nic_model::packet::{parse_datagram, AethKind, Opcode};
use softverbs_sim::conn::{ConnOpts, Endpoint};
use softverbs_sim::world::trace::TraceKind;
use softverbs_sim::world::{connect_rc, LinkChange, LinkParams, SimWorld};
use verbs_api::{
    AtomicTarget, Mtu, QpCap, RdmaTarget, RecvWr, SendFlags, SendWr, WcStatus, WorkCompletion,
    WrOpcode,
};

const CAP: QpCap = QpCap {
    max_send_wr: 64,
    max_recv_wr: 64,
    max_send_sge: 2,
    max_recv_sge: 2,
    max_inline_data: 64,
};

fn drain(cq: &verbs_api::CompletionQueue) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::default(); 16];
    while let Ok(n @ 1..) = cq.poll(&mut buf) {
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn post(a: &Endpoint, b: &Endpoint, wr_id: u64, opcode: WrOpcode, len: u32) {
    let sge = [a.mr.sge(0, len)];
    let rdma = RdmaTarget { remote_addr: b.mr.addr() + 8192, rkey: b.mr.rkey() };
    let atomic =
        AtomicTarget { remote_addr: b.mr.addr(), rkey: b.mr.rkey(), compare_add: 0, swap: 5 };
    let wr = SendWr {
        wr_id,
        sg_list: &sge,
        opcode,
        send_flags: SendFlags::SIGNALED,
        imm_data: 0xfeed,
        rdma,
        atomic,
        ..Default::default()
    };
    a.qp.post_send(&[wr]).unwrap();
}

fn recv(b: &Endpoint, n: u64) {
    for i in 0..n {
        b.qp.post_recv(&[RecvWr { wr_id: 1000 + i, sg_list: &[b.mr.sge(16384, 8192)] }]).unwrap();
    }
}

/// Runs the workload; returns the (opcode, PSN) of every delivered packet as the sim saw it.
fn run(pcap: &Path) -> Vec<(u8, u32)> {
    let world = SimWorld::mesh(11, 2, LinkParams::default());
    {
        let mut w = world.lock();
        w.trace_mut().set_keep(true);
        w.capture_to(Box::new(std::fs::File::create(pcap).unwrap()), false).unwrap();
    }
    let opts = ConnOpts { mtu: Mtu::Mtu1024, min_rnr_timer: 1, timeout: 10, ..ConnOpts::default() };
    let (a, b) = connect_rc(&world, 0, 1, CAP, 256, 1 << 16, &opts, (0x10, 0xfffff0)).unwrap();
    let idle = |world: &SimWorld| assert!(world.run_until_idle(100_000));

    // RNR NAK: a SEND before any receive is posted; the receive comes 100 µs later.
    post(&a, &b, 1, WrOpcode::Send, 100);
    world.run_for(100_000);
    recv(&b, 8);
    idle(&world);
    // SEND FIRST/MIDDLE/LAST, SEND ONLY, SEND with immediate (LAST and ONLY).
    post(&a, &b, 2, WrOpcode::Send, 3000);
    post(&a, &b, 3, WrOpcode::Send, 10);
    post(&a, &b, 4, WrOpcode::SendWithImm, 3000);
    post(&a, &b, 5, WrOpcode::SendWithImm, 10);
    // WRITE FIRST/MIDDLE/LAST, ONLY, with immediate (LAST and ONLY).
    post(&a, &b, 6, WrOpcode::RdmaWrite, 3000);
    post(&a, &b, 7, WrOpcode::RdmaWrite, 10);
    post(&a, &b, 8, WrOpcode::RdmaWriteWithImm, 3000);
    post(&a, &b, 9, WrOpcode::RdmaWriteWithImm, 10);
    // READ REQUEST, READ RESPONSE FIRST/MIDDLE/LAST and ONLY.
    post(&a, &b, 10, WrOpcode::RdmaRead, 3000);
    post(&a, &b, 11, WrOpcode::RdmaRead, 10);
    // COMPARE SWAP, FETCH ADD and their ATOMIC ACKNOWLEDGEs.
    post(&a, &b, 12, WrOpcode::AtomicCmpAndSwp, 8);
    post(&a, &b, 13, WrOpcode::AtomicFetchAndAdd, 8);
    idle(&world);
    // A PSN-sequence NAK: drop the second packet of a three-packet SEND.
    {
        let mut w = world.lock();
        let l = w.link_between(0, 1).unwrap();
        let next = w.links()[l].stats.offered + 1;
        w.change_link(l, LinkChange::DropNth(next));
    }
    post(&a, &b, 14, WrOpcode::Send, 3000);
    idle(&world);

    let wc = drain(&a.cq);
    assert_eq!(wc.len(), 14, "{wc:?}");
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    let mut w = world.lock();
    w.finish_capture().unwrap();
    assert!(w.nic(1).unwrap().stats().rnr_naks_sent > 0);
    assert!(w.nic(1).unwrap().stats().seq_naks_sent > 0);
    w.trace()
        .records()
        .iter()
        .filter(|r| r.kind == TraceKind::Deliver)
        .map(|r| (r.opcode as u8, r.psn))
        .collect()
}

#[test]
fn capture_holds_every_rc_opcode_and_wireshark_agrees() {
    let dir = std::env::temp_dir().join(format!("softverbs-sim-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("every-rc-opcode.pcap");
    let delivered = run(&pcap);

    // The file holds exactly the delivered datagrams, each valid, in delivery order.
    let datagrams = read_pcap(&pcap);
    assert_eq!(datagrams.len(), delivered.len());
    let mut kinds = BTreeSet::new();
    for (d, &(op, psn)) in datagrams.iter().zip(&delivered) {
        let (_, p) = parse_datagram(d).expect("every captured datagram parses");
        assert_eq!((p.bth.opcode.0, p.bth.psn.value()), (op, psn));
        kinds.insert(match p.aeth.map(|a| a.kind()) {
            Some(AethKind::RnrNak { .. }) => "RNR NAK".to_string(),
            Some(AethKind::Nak(_)) => "NAK".to_string(),
            _ => format!("{:#04x}", op),
        });
    }
    let mut want: BTreeSet<String> = [
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST,
        Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        Opcode::RC_SEND_ONLY,
        Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        Opcode::RC_RDMA_WRITE_ONLY,
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
    ]
    .iter()
    .map(|o| format!("{:#04x}", o.0))
    .collect();
    want.insert("NAK".into());
    want.insert("RNR NAK".into());
    let missing: Vec<_> = want.difference(&kinds).collect();
    assert!(missing.is_empty(), "opcodes missing from the capture: {missing:?}");

    let fields = ["infiniband.bth.opcode", "infiniband.bth.psn"];
    let Some(rows) = tshark_fields("sim_pcap", &pcap, &fields) else { return };
    let seen: Vec<(u8, u32)> =
        rows.iter().map(|r| (num(&r[0]) as u8, num(r.get(1).map_or("", |s| s)) as u32)).collect();
    assert_eq!(seen, delivered, "tshark's opcodes and PSNs differ from the simulator's");
    let _ = std::fs::remove_dir_all(&dir);
}
