//! The test bodies: each takes a [`Backend`] and asserts what a program relies on — the bytes
//! that landed, every work-completion field, statuses, errnos and the words of errors, events
//! and their elements. Every body starts on two freshly opened devices.

use softverbs_sim::conn::{self, ConnOpts, Endpoint, QpInfo};
use verbs_api::*;

use super::{assert_no_completion, next_event, Backend};
use crate::pattern;

const SIG: SendFlags = SendFlags::SIGNALED;

fn cap(wr: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// What a successful send-side completion holds.
fn sent(wr_id: u64, opcode: WcOpcode, byte_len: usize, qp_num: u32) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode,
        byte_len: byte_len as u32,
        qp_num,
        ..Default::default()
    }
}

/// Who a receive completion is about: (the receiving QP, the sending QP, the sender's LID).
type Path = (u32, u32, u16);

/// What a successful receive completion holds.
fn received(
    wr_id: u64,
    opcode: WcOpcode,
    byte_len: usize,
    imm: Option<u32>,
    (qp_num, src_qp, slid): Path,
) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode,
        byte_len: byte_len as u32,
        imm_data: imm.unwrap_or(0),
        qp_num,
        src_qp,
        wc_flags: if imm.is_some() { WcFlags::WITH_IMM } else { WcFlags::empty() },
        slid,
        ..Default::default()
    }
}

/// The same for a UD receive: the GRH flag is set and the GRH counts in `byte_len`.
fn received_ud(wr_id: u64, payload: usize, imm: Option<u32>, path: Path) -> WorkCompletion {
    let w = received(wr_id, WcOpcode::Recv, 40 + payload, imm, path);
    WorkCompletion { wc_flags: w.wc_flags | WcFlags::GRH, ..w }
}

/// The port's LID: 0, as on every RoCE port (and so the `slid` of a receive completion).
fn lid(ctx: &Context) -> u16 {
    ctx.query_port(1).expect("query_port").lid
}

/// A RoCE address vector towards port 1 of `ctx`: its first IPv4 GID as `dgid`, sent from
/// this side's default GID index.
fn av(ctx: &Context) -> AhAttr {
    let to = conn::PortAddress::of(ctx, None).expect("the port's address");
    conn::av_to(to.gid, &ConnOpts::default())
}

/// What to tell a peer about `qp` on `ctx`.
fn info(ctx: &Context, qp: &QueuePair, psn: u32) -> QpInfo {
    conn::PortAddress::of(ctx, None).expect("the port's address").qp_info(qp, psn)
}

/// RESET → INIT (with `qkey`) → RTR → RTS, as a UD QP needs.
fn ud_up(qp: &QueuePair, qkey: u32) {
    let init = QpAttr { qp_state: QpState::Init, port_num: 1, qkey, ..Default::default() };
    let mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    qp.modify(&init, mask).expect("UD QP to INIT");
    let rtr = QpAttr { qp_state: QpState::Rtr, ..Default::default() };
    qp.modify(&rtr, QpAttrMask::STATE).expect("UD QP to RTR");
    let rts = QpAttr { qp_state: QpState::Rts, sq_psn: 0x100, ..Default::default() };
    qp.modify(&rts, QpAttrMask::STATE | QpAttrMask::SQ_PSN).expect("UD QP to RTS");
}

fn ud_endpoint(ctx: &Context, qkey: u32, mr_len: usize) -> Endpoint {
    let ep = Endpoint::new(ctx, QpType::Ud, cap(16, 1, 64), 64, mr_len).expect("UD endpoint");
    ud_up(&ep.qp, qkey);
    ep
}

/// A pair of connected endpoints of `qp_type` on A and B.
fn connected(be: &dyn Backend, qp_type: QpType, opts: &ConnOpts) -> (Endpoint, Endpoint) {
    let a = Endpoint::new(be.a(), qp_type, cap(32, 2, 64), 64, 64 << 10).expect("endpoint on A");
    let b = Endpoint::new(be.b(), qp_type, cap(32, 2, 64), 64, 64 << 10).expect("endpoint on B");
    conn::connect(&a.qp, 0x10, &b.info(0x20).expect("B's info"), opts).expect("connecting A");
    conn::connect(&b.qp, 0x20, &a.info(0x10).expect("A's info"), opts).expect("connecting B");
    (a, b)
}

fn read(mr: &MemoryRegion, off: usize, len: usize) -> Vec<u8> {
    mr.read_vec(off, len).expect("reading an MR")
}

fn state(qp: &QueuePair) -> QpState {
    qp.state().expect("ibv_query_qp")
}

fn to_error(qp: &QueuePair) {
    qp.modify(&QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE)
        .expect("moving a QP to ERR");
}

/// Every fresh device says first that its port is active.
fn expect_port_active(be: &dyn Backend, ctx: &Context) {
    assert_eq!(
        next_event(be, ctx),
        AsyncEvent { event_type: AsyncEventType::PortActive, element: AsyncElement::Port(1) },
        "[{}] the first event of {}",
        be.name(),
        ctx.device_name()
    );
}

// ---------------- UC ----------------

/// UC: SEND (two SGEs, three packets), SEND_WITH_IMM (inline), RDMA WRITE and
/// WRITE_WITH_IMM land with every completion field; READ and atomics are refused at post; where
/// the wire can lose a packet, the message it belonged to is lost silently and the receive it
/// had started to fill takes the next message.
pub fn uc_operations_and_loss(be: &dyn Backend) {
    let opts =
        ConnOpts { mtu: Mtu::Mtu1024, access: AccessFlags::REMOTE_WRITE, ..Default::default() };
    let (a, b) = connected(be, QpType::Uc, &opts);
    let (aq, bq) = (a.qp.qp_num(), b.qp.qp_num());
    let path = (bq, aq, lid(be.a()));
    let big = pattern(0x0C01, 0, 3000);
    let imm_msg = b"immediate follows";
    let block = pattern(0x0C02, 0, 5000);
    a.mr.write(0, &big).unwrap();
    a.mr.write(16384, &block).unwrap();
    let r0 = [b.mr.sge(0, 1000), b.mr.sge(4096, 2048)];
    let r1 = [b.mr.sge(8192, 128)];
    b.qp.post_recv(&[
        RecvWr { wr_id: 100, sg_list: &r0 },
        RecvWr { wr_id: 101, sg_list: &r1 },
        RecvWr { wr_id: 102, sg_list: &[] },
    ])
    .unwrap();
    let s0 = [a.mr.sge(0, 1500), a.mr.sge(1500, 1500)];
    let s2 = [a.mr.sge(16384, 5000)];
    let s3 = [a.mr.sge(16384, 10)];
    let at = |off: u64| RdmaTarget { remote_addr: b.mr.addr() + off, rkey: b.mr.rkey() };
    a.qp.post_send(&[
        SendWr { wr_id: 1, sg_list: &s0, send_flags: SIG, ..Default::default() },
        SendWr {
            wr_id: 2,
            opcode: WrOpcode::SendWithImm,
            send_flags: SIG | SendFlags::INLINE,
            imm_data: 0x1234_5678,
            inline_data: Some(imm_msg),
            ..Default::default()
        },
        SendWr {
            wr_id: 3,
            sg_list: &s2,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SIG,
            rdma: at(20_000),
            ..Default::default()
        },
        SendWr {
            wr_id: 4,
            sg_list: &s3,
            opcode: WrOpcode::RdmaWriteWithImm,
            send_flags: SIG,
            imm_data: 0xCAFE,
            rdma: at(40_000),
            ..Default::default()
        },
    ])
    .unwrap();
    assert_eq!(
        be.wait(&a.cq, 4),
        vec![
            sent(1, WcOpcode::Send, 3000, aq),
            sent(2, WcOpcode::Send, imm_msg.len(), aq),
            sent(3, WcOpcode::RdmaWrite, 5000, aq),
            sent(4, WcOpcode::RdmaWrite, 10, aq),
        ],
        "[{}] UC send completions",
        be.name()
    );
    assert_eq!(
        be.wait(&b.cq, 3),
        vec![
            received(100, WcOpcode::Recv, 3000, None, path),
            received(101, WcOpcode::Recv, imm_msg.len(), Some(0x1234_5678), path),
            received(102, WcOpcode::RecvRdmaWithImm, 10, Some(0xCAFE), path),
        ],
        "[{}] UC receive completions",
        be.name()
    );
    let mut landed = read(&b.mr, 0, 1000);
    landed.extend(read(&b.mr, 4096, 2000));
    assert_eq!(landed, big, "[{}] the SEND scattered over two SGEs", be.name());
    assert_eq!(read(&b.mr, 8192, imm_msg.len()), imm_msg);
    assert_eq!(read(&b.mr, 20_000, 5000), block, "[{}] the RDMA WRITE", be.name());
    assert_eq!(read(&b.mr, 40_000, 10), block[..10], "[{}] the WRITE_WITH_IMM", be.name());
    assert_eq!(read(&b.mr, 40_010, 4), [0; 4], "[{}] not a byte more", be.name());

    // READ and atomics are RC only: refused at post, naming the opcode; the QP goes on.
    let sg = [a.mr.sge(0, 8)];
    for opcode in [WrOpcode::RdmaRead, WrOpcode::AtomicCmpAndSwp, WrOpcode::AtomicFetchAndAdd] {
        let wr = SendWr {
            wr_id: 9,
            sg_list: &sg,
            opcode,
            send_flags: SIG,
            rdma: at(0),
            atomic: AtomicTarget {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
                ..Default::default()
            },
            ..Default::default()
        };
        let e = a.qp.post_send(&[wr]).unwrap_err();
        assert_eq!(e.errno, Errno::Inval, "[{}] {e}", be.name());
        assert!(
            e.message.contains(&format!(
                "wr[0] (wr_id 9): {} is not valid on an IBV_QPT_UC QP",
                opcode.name()
            )),
            "[{}] {e}",
            be.name()
        );
    }
    assert_eq!(state(&a.qp), QpState::Rts);
    assert_no_completion(be, &a.cq, "refused WRs never reach the send queue");

    // Loss: the middle packet of a three-packet SEND.
    if !be.lose_a_to_b(1) {
        println!("[{}] no packet loss on this wire: the UC loss case is for the sim", be.name());
        return;
    }
    let r = [b.mr.sge(0, 4096)];
    let r2 = [b.mr.sge(8192, 4096)];
    b.qp.post_recv(&[RecvWr { wr_id: 200, sg_list: &r }, RecvWr { wr_id: 201, sg_list: &r2 }])
        .unwrap();
    let after = b"after the loss";
    a.qp.post_send(&[
        SendWr { wr_id: 5, sg_list: &s0, send_flags: SIG, ..Default::default() },
        SendWr {
            wr_id: 6,
            send_flags: SIG | SendFlags::INLINE,
            inline_data: Some(after),
            ..Default::default()
        },
    ])
    .unwrap();
    assert_eq!(
        be.wait(&a.cq, 2),
        vec![sent(5, WcOpcode::Send, 3000, aq), sent(6, WcOpcode::Send, after.len(), aq)],
        "[{}] a UC sender never learns of the loss",
        be.name()
    );
    assert_eq!(
        be.wait(&b.cq, 1),
        vec![received(200, WcOpcode::Recv, after.len(), None, path)],
        "[{}] the lost message's receive took the next message",
        be.name()
    );
    assert_eq!(read(&b.mr, 0, after.len()), after);
    // The first packet of a two-packet WRITE: nothing of it lands.
    b.mr.write(50_000, &[0xEE; 2000]).unwrap();
    assert!(be.lose_a_to_b(0));
    let sw = [a.mr.sge(16384, 2000)];
    a.qp.post_send(&[
        SendWr {
            wr_id: 7,
            sg_list: &sw,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SIG,
            rdma: at(50_000),
            ..Default::default()
        },
        SendWr {
            wr_id: 8,
            sg_list: &s3,
            opcode: WrOpcode::RdmaWriteWithImm,
            send_flags: SIG,
            imm_data: 8,
            rdma: at(60_000),
            ..Default::default()
        },
    ])
    .unwrap();
    assert_eq!(
        be.wait(&a.cq, 2).iter().map(|w| w.status).collect::<Vec<_>>(),
        [WcStatus::Success; 2]
    );
    assert_eq!(
        be.wait(&b.cq, 1),
        vec![received(201, WcOpcode::RecvRdmaWithImm, 10, Some(8), path)]
    );
    assert_eq!(read(&b.mr, 50_000, 2000), vec![0xEE; 2000], "[{}] the lost WRITE", be.name());
    assert_eq!(read(&b.mr, 60_000, 10), block[..10]);
    be.settle();
    assert_no_completion(be, &b.cq, "each lost message is gone");
}

// ---------------- UD ----------------

/// Checks the 40 bytes a UD receive starts with: on RoCEv2 over IPv4, 20 zero bytes and the
/// datagram's IPv4 header (from A to B, UDP, its total length, a valid checksum).
fn check_grh(be: &dyn Backend, grh: &[u8], from: [u8; 4], to: [u8; 4], payload: usize, imm: bool) {
    assert_eq!(grh.len(), 40);
    assert_eq!(grh[..20], [0; 20], "[{}] the GRH's first 20 bytes", be.name());
    let ip = &grh[20..];
    assert_eq!(ip[0], 0x45, "[{}] IPv4, 20-byte header: {ip:02x?}", be.name());
    let pad = (4 - payload % 4) % 4;
    // IPv4 + UDP + BTH + DETH (+ ImmDt) + payload + pad + ICRC
    let total = 20 + 8 + 12 + 8 + if imm { 4 } else { 0 } + payload + pad + 4;
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, total, "[{}] total length", be.name());
    assert_eq!(ip[9], 17, "[{}] protocol UDP", be.name());
    assert_eq!((&ip[12..16], &ip[16..20]), (&from[..], &to[..]), "[{}] addresses", be.name());
    let sum = ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum::<u32>();
    let folded = (sum & 0xffff) + (sum >> 16);
    assert_eq!(folded, 0xffff, "[{}] the IPv4 header checksum is valid", be.name());
}

/// UD: SENDs through address handles made from a LID and from a GID, with and without
/// immediate data, up to exactly the MTU; the 40-byte GRH before each payload; `src_qp`, `slid`
/// and the GRH flag; a datagram with the wrong Q_Key dropped; too long, wrong opcode or no
/// address handle refused at post.
pub fn ud_datagrams(be: &dyn Backend) {
    let (qkey_a, qkey_b) = (0x0A0A_0A0A, 0x1111_2222);
    let a = ud_endpoint(be.a(), qkey_a, 64 << 10);
    let b = ud_endpoint(be.b(), qkey_b, 64 << 10);
    let (aq, bq) = (a.qp.qp_num(), b.qp.qp_num());
    let path = (bq, aq, lid(be.a()));
    let mtu = be.a().query_port(1).unwrap().active_mtu.bytes() as usize;
    let a_ip = be.a().query_gid(1, 1).unwrap().to_ipv4().expect("an IPv4-mapped GID");
    let b_gid = be.b().query_gid(1, 1).unwrap();
    let b_ip = b_gid.to_ipv4().expect("an IPv4-mapped GID");
    // A RoCE port refuses a LID-only address handle, as hardware does.
    let e = a.pd.create_ah(&AhAttr { dlid: 1, port_num: 1, ..Default::default() }).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "[{}] {e}", be.name());
    assert!(
        e.message.contains(
            "port 1 is RoCE (Ethernet link layer): an address vector needs a GRH with a GID"
        ),
        "[{}] {e}",
        be.name()
    );
    let by_port = a.pd.create_ah(&av(be.b())).unwrap();
    let by_gid =
        a.pd.create_ah(&AhAttr {
            is_global: true,
            dgid: b_gid,
            sgid_index: 1,
            hop_limit: 64,
            port_num: 1,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(by_gid.attr().dgid, b_gid);
    const STRIDE: usize = 8192;
    let rsges: Vec<[Sge; 1]> = (0..4).map(|i| [b.mr.sge(i * STRIDE, (40 + mtu) as u32)]).collect();
    let recvs: Vec<RecvWr<'_>> = rsges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr { wr_id: 300 + i as u64, sg_list: s })
        .collect();
    b.qp.post_recv(&recvs).unwrap();
    let short = b"by GID, no imm";
    let odd = pattern(0x0D01, 0, 1001);
    let full = pattern(0x0D02, 0, mtu);
    a.mr.write(0, &odd).unwrap();
    a.mr.write(4096, &full).unwrap();
    let to = |ah: &AddressHandle, qkey| {
        Some(UdTarget { ah: ah.clone(), remote_qpn: bq, remote_qkey: qkey })
    };
    let (s_odd, s_full) = ([a.mr.sge(0, 1001)], [a.mr.sge(4096, mtu as u32)]);
    a.qp.post_send(&[
        SendWr {
            wr_id: 1,
            send_flags: SIG | SendFlags::INLINE,
            inline_data: Some(short),
            ud: to(&by_port, qkey_b),
            ..Default::default()
        },
        SendWr {
            wr_id: 2,
            sg_list: &s_odd,
            opcode: WrOpcode::SendWithImm,
            send_flags: SIG,
            imm_data: 0xFEED_FACE,
            ud: to(&by_gid, qkey_b),
            ..Default::default()
        },
        SendWr {
            wr_id: 3,
            sg_list: &s_odd,
            send_flags: SIG,
            ud: to(&by_port, qkey_b ^ 1),
            ..Default::default()
        },
        SendWr {
            wr_id: 4,
            sg_list: &s_full,
            send_flags: SIG,
            ud: to(&by_gid, qkey_b),
            ..Default::default()
        },
    ])
    .unwrap();
    assert_eq!(
        be.wait(&a.cq, 4),
        vec![
            sent(1, WcOpcode::Send, short.len(), aq),
            sent(2, WcOpcode::Send, 1001, aq),
            sent(3, WcOpcode::Send, 1001, aq),
            sent(4, WcOpcode::Send, mtu, aq),
        ],
        "[{}] UD send completions (a sender never learns what was dropped)",
        be.name()
    );
    assert_eq!(
        be.wait(&b.cq, 3),
        vec![
            received_ud(300, short.len(), None, path),
            received_ud(301, 1001, Some(0xFEED_FACE), path),
            received_ud(302, mtu, None, path),
        ],
        "[{}] UD receive completions: the datagram with the wrong Q_Key was dropped",
        be.name()
    );
    be.settle();
    assert_no_completion(be, &b.cq, "the datagram with the wrong Q_Key was dropped");
    for (i, (payload, imm)) in
        [(&short[..], false), (&odd[..], true), (&full[..], false)].iter().enumerate()
    {
        let got = read(&b.mr, i * STRIDE, 40 + payload.len());
        check_grh(be, &got[..40], a_ip, b_ip, payload.len(), *imm);
        assert_eq!(&got[40..], *payload, "[{}] datagram {i} after its GRH", be.name());
    }

    // Loss is loss: a lost datagram is never sent again, and the next one takes the receive.
    if be.lose_a_to_b(0) {
        let lost = b"lost on the wire";
        let next = b"the next datagram";
        for (wr_id, m) in [(10, &lost[..]), (11, &next[..])] {
            a.qp.post_send(&[SendWr {
                wr_id,
                send_flags: SIG | SendFlags::INLINE,
                inline_data: Some(m),
                ud: to(&by_port, qkey_b),
                ..Default::default()
            }])
            .unwrap();
        }
        assert_eq!(
            be.wait(&a.cq, 2),
            vec![
                sent(10, WcOpcode::Send, lost.len(), aq),
                sent(11, WcOpcode::Send, next.len(), aq)
            ]
        );
        assert_eq!(be.wait(&b.cq, 1), vec![received_ud(303, next.len(), None, path)]);
        assert_eq!(read(&b.mr, 3 * STRIDE + 40, next.len()), next);
        be.settle();
        assert_no_completion(be, &b.cq, "the lost datagram is not retransmitted");
    }

    // Refused at post, each naming what was wrong.
    let over = [a.mr.sge(0, mtu as u32 + 1)];
    let e = a.qp.post_send(&[SendWr {
        wr_id: 5,
        sg_list: &over,
        ud: to(&by_port, qkey_b),
        ..Default::default()
    }]);
    let e = e.unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(
        e.message
            .contains(&format!("a UD message of {} bytes exceeds the path MTU {mtu}", mtu + 1)),
        "[{}] {e}",
        be.name()
    );
    let e =
        a.qp.post_send(&[SendWr {
            wr_id: 6,
            sg_list: &s_odd,
            opcode: WrOpcode::RdmaWrite,
            ud: to(&by_port, qkey_b),
            ..Default::default()
        }])
        .unwrap_err();
    assert!(
        e.message.contains("IBV_WR_RDMA_WRITE is not valid on an IBV_QPT_UD QP"),
        "[{}] {e}",
        be.name()
    );
    let e =
        a.qp.post_send(&[SendWr { wr_id: 7, sg_list: &s_odd, ..Default::default() }]).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains("needs wr.ud"), "[{}] {e}", be.name());
    // Address handles that name no port are refused by ibv_create_ah.
    let mut not_ipv4 = Gid::default();
    not_ipv4.0[0] = 0xfe;
    let bad_ahs = [
        (AhAttr { dlid: 0, port_num: 1, ..Default::default() }, "needs a GRH with a GID"),
        (
            AhAttr { dgid: not_ipv4, ..av(be.b()) },
            "is not the IPv4 GID (::ffff:a.b.c.d) of a softverbs port",
        ),
        (AhAttr { sgid_index: 7, ..av(be.b()) }, "sgid_index 7 is an empty entry"),
        (AhAttr { port_num: 2, ..av(be.b()) }, "port_num 2"),
    ];
    for (attr, what) in bad_ahs {
        let e = a.pd.create_ah(&attr).unwrap_err();
        assert_eq!(e.errno, Errno::Inval, "[{}] {attr:?}: {e}", be.name());
        assert!(e.message.contains(what), "[{}] {attr:?}: {e}", be.name());
    }
    assert_no_completion(be, &a.cq, "refused WRs never reach the send queue");
}

// ---------------- SRQ ----------------

/// One SRQ on B feeds an RC, a UC and a UD QP: `ibv_post_recv` on them is refused, each type
/// consumes the SRQ's WQEs in order, the limit event fires once when the count falls below the
/// limit and disarms, modify and query behave, a QP on the SRQ that enters the error state
/// reports "last WQE reached" while the others go on, and the SRQ is `EBUSY` until its last QP
/// is destroyed.
pub fn srq_shared_by_rc_uc_and_ud(be: &dyn Backend) {
    let (ac, bc) = (be.a(), be.b());
    expect_port_active(be, bc);
    let pd = bc.alloc_pd().unwrap();
    let mr = pd.reg_mr(64 << 10, AccessFlags::LOCAL_WRITE).unwrap();
    let cq = bc.create_cq(64, None, 0).unwrap();
    let srq = pd.create_srq(&SrqInitAttr { max_wr: 16, max_sge: 1, srq_limit: 0 }).unwrap();
    let q = srq.query().unwrap();
    assert!(q.max_wr >= 16 && q.max_sge >= 1 && q.srq_limit == 0, "[{}] {q:?}", be.name());
    let on_srq = |qp_type| {
        pd.create_qp(&QpInitAttr {
            qp_type,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: Some(srq.clone()),
            cap: cap(8, 1, 64),
            sq_sig_all: false,
        })
        .unwrap_or_else(|e| panic!("[{}] a {qp_type:?} QP on an SRQ: {e}", be.name()))
    };
    let (b_rc, b_uc, b_ud) = (on_srq(QpType::Rc), on_srq(QpType::Uc), on_srq(QpType::Ud));
    let a_rc = Endpoint::new(ac, QpType::Rc, cap(8, 1, 64), 16, 4096).unwrap();
    let a_uc = Endpoint::new(ac, QpType::Uc, cap(8, 1, 64), 16, 4096).unwrap();
    let a_ud = ud_endpoint(ac, 0x77, 4096);
    let opts = ConnOpts::default();
    conn::connect(&a_rc.qp, 1, &info(bc, &b_rc, 2), &opts).unwrap();
    conn::connect(&b_rc, 2, &info(ac, &a_rc.qp, 1), &opts).unwrap();
    let uc_opts = ConnOpts { access: AccessFlags::REMOTE_WRITE, ..opts };
    conn::connect(&a_uc.qp, 3, &info(bc, &b_uc, 4), &uc_opts).unwrap();
    conn::connect(&b_uc, 4, &info(ac, &a_uc.qp, 3), &uc_opts).unwrap();
    ud_up(&b_ud, 0x5151);
    let ah = a_ud.pd.create_ah(&av(bc)).unwrap();

    let one = [mr.sge(0, 64)];
    for qp in [&b_rc, &b_uc, &b_ud] {
        let e = qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &one }]).unwrap_err();
        assert_eq!(e.errno, Errno::Inval);
        assert!(e.message.contains("use ibv_post_srq_recv"), "[{}] {e}", be.name());
    }
    const SLOT: usize = 512;
    let sges: Vec<[Sge; 1]> = (0..20).map(|i| [mr.sge(i * SLOT, SLOT as u32)]).collect();
    let wrs = |range: std::ops::Range<usize>| -> Vec<RecvWr<'_>> {
        range.map(|i| RecvWr { wr_id: 500 + i as u64, sg_list: &sges[i] }).collect()
    };
    srq.post_recv(&wrs(0..6)).unwrap();
    srq.modify(&SrqAttr { srq_limit: 4, ..Default::default() }, SrqAttrMask::LIMIT).unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 4);

    let msgs: [&[u8]; 3] = [b"over RC", b"over UC", b"over UD"];
    let send = |qp: &QueuePair, wr_id: u64, msg: &[u8], ud: Option<UdTarget>| {
        let flags = SendFlags::INLINE;
        qp.post_send(&[SendWr {
            wr_id,
            send_flags: flags,
            inline_data: Some(msg),
            ud,
            ..Default::default()
        }])
        .unwrap()
    };
    send(&a_rc.qp, 1, msgs[0], None);
    send(&a_uc.qp, 2, msgs[1], None);
    send(
        &a_ud.qp,
        3,
        msgs[2],
        Some(UdTarget { ah: ah.clone(), remote_qpn: b_ud.qp_num(), remote_qkey: 0x5151 }),
    );
    let a_lid = lid(ac);
    let mut wcs = be.wait(&cq, 3);
    // Which QP took which WQE depends on arrival order; together they took the first three.
    let mut ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [500, 501, 502], "[{}] {wcs:?}", be.name());
    wcs.sort_by_key(|w| {
        [b_rc.qp_num(), b_uc.qp_num(), b_ud.qp_num()].iter().position(|&q| q == w.qp_num)
    });
    let senders = [(&b_rc, &a_rc.qp), (&b_uc, &a_uc.qp), (&b_ud, &a_ud.qp)];
    for (i, (w, (bq, aq))) in wcs.iter().zip(senders).enumerate() {
        let path = (bq.qp_num(), aq.qp_num(), a_lid);
        let want = if i == 2 {
            received_ud(w.wr_id, msgs[i].len(), None, path)
        } else {
            received(w.wr_id, WcOpcode::Recv, msgs[i].len(), None, path)
        };
        assert_eq!(*w, want, "[{}] the {:?} QP's receive", be.name(), bq.qp_type());
        let at = (w.wr_id - 500) as usize * SLOT + if i == 2 { 40 } else { 0 };
        assert_eq!(read(&mr, at, msgs[i].len()), msgs[i], "[{}]", be.name());
    }
    // 6 -> 3 WQEs, below the limit of 4: the event fires once, and the limit disarms.
    assert_eq!(
        next_event(be, bc),
        AsyncEvent {
            event_type: AsyncEventType::SrqLimitReached,
            element: AsyncElement::Srq(srq.id())
        },
        "[{}]",
        be.name()
    );
    assert_eq!(srq.query().unwrap().srq_limit, 0, "[{}] the limit disarms", be.name());

    // Modify and post: every bad value named, nothing half-done.
    let e =
        srq.modify(&SrqAttr { max_wr: 2, ..Default::default() }, SrqAttrMask::MAX_WR).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains("hold the 3 queued"), "[{}] {e}", be.name());
    let e = srq
        .modify(&SrqAttr { srq_limit: 17, ..Default::default() }, SrqAttrMask::LIMIT)
        .unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains("srq_limit 17 exceeds max_wr 16"), "[{}] {e}", be.name());
    // 3 queued: 13 more fill the 16, the 14th is refused (the 13 before it stay posted).
    let e = srq.post_recv(&wrs(6..20)).unwrap_err();
    assert_eq!(e.errno, Errno::NoMem, "[{}] {e}", be.name());
    assert!(
        e.message.contains("wr[13] (wr_id 519)") && e.message.contains("full"),
        "[{}] {e}",
        be.name()
    );
    srq.modify(&SrqAttr { max_wr: 32, ..Default::default() }, SrqAttrMask::MAX_WR).unwrap();
    assert!(srq.query().unwrap().max_wr >= 32);
    assert_eq!(
        srq.clone().destroy().unwrap_err().errno,
        Errno::Busy,
        "[{}] 3 QPs use it",
        be.name()
    );

    // A QP on the SRQ in error: "last WQE reached"; the SRQ's WQEs stay for the others.
    to_error(&b_uc);
    assert_eq!(
        next_event(be, bc),
        AsyncEvent {
            event_type: AsyncEventType::QpLastWqeReached,
            element: AsyncElement::Qp(b_uc.qp_num())
        },
        "[{}]",
        be.name()
    );
    assert_no_completion(be, &cq, "an SRQ's WQEs are not flushed when one of its QPs fails");
    send(&a_rc.qp, 4, b"still here", None);
    assert_eq!(
        be.wait(&cq, 1),
        vec![received(503, WcOpcode::Recv, 10, None, (b_rc.qp_num(), a_rc.qp.qp_num(), a_lid))],
        "[{}] the next WQE in the SRQ",
        be.name()
    );
    assert_eq!(read(&mr, 3 * SLOT, 10), b"still here");
    b_uc.destroy().unwrap();
    assert_eq!(srq.clone().destroy().unwrap_err().errno, Errno::Busy);
    b_rc.destroy().unwrap();
    b_ud.destroy().unwrap();
    srq.destroy().unwrap();
}

// ---------------- async events ----------------

/// The port comes up first; a remote access error moves both RC QPs to ERR; the responder's
/// device reports `QP_ACCESS_ERR` for its QP (the IBA's affiliated event, as mlx5 raises it)
/// and the requester's nothing, its completion saying it all; what is posted afterwards is
/// flushed.
pub fn async_events_name_their_element(be: &dyn Backend) {
    expect_port_active(be, be.a());
    expect_port_active(be, be.b());
    let (a, b) = connected(be, QpType::Rc, &ConnOpts::default());
    let (aq, bq) = (a.qp.qp_num(), b.qp.qp_num());
    let sg = [a.mr.sge(0, 8)];
    let bad = RdmaTarget { remote_addr: b.mr.addr(), rkey: b.mr.rkey() ^ 0x5a5a_0000 };
    a.qp.post_send(&[
        SendWr {
            wr_id: 1,
            sg_list: &sg,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SIG,
            rdma: bad,
            ..Default::default()
        },
        SendWr { wr_id: 2, sg_list: &sg, send_flags: SIG, ..Default::default() },
    ])
    .unwrap();
    let ws = be.wait(&a.cq, 2);
    assert_eq!(
        ws.iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect::<Vec<_>>(),
        [(1, WcStatus::RemAccessErr, aq), (2, WcStatus::WrFlushErr, aq)],
        "[{}]",
        be.name()
    );
    let access =
        AsyncEvent { event_type: AsyncEventType::QpAccessErr, element: AsyncElement::Qp(bq) };
    assert_eq!(next_event(be, be.b()), access, "[{}] on B, the responder", be.name());
    let none = be.a().get_async_event(Some(std::time::Duration::from_millis(100)));
    assert!(none.is_err(), "[{}] no event on A, the requester: {none:?}", be.name());
    assert_eq!((state(&a.qp), state(&b.qp)), (QpState::Err, QpState::Err));
    b.qp.post_recv(&[RecvWr { wr_id: 7, sg_list: &[b.mr.sge(0, 8)] }]).unwrap();
    let w = be.wait(&b.cq, 1)[0];
    assert_eq!((w.wr_id, w.status, w.qp_num), (7, WcStatus::WrFlushErr, bq), "[{}]", be.name());
}

/// A CQ too small for what completes into it: a `CQ_ERR` event names the CQ by the id its
/// handle has, and `ibv_poll_cq` fails with `EIO` saying that completions were lost.
pub fn cq_overrun_is_an_error_and_an_event(be: &dyn Backend) {
    expect_port_active(be, be.a());
    let a = Endpoint::new(be.a(), QpType::Rc, cap(8, 1, 0), 2, 4096).unwrap();
    let b = Endpoint::new(be.b(), QpType::Rc, cap(8, 1, 0), 8, 4096).unwrap();
    let opts = ConnOpts::default();
    conn::connect(&a.qp, 0x30, &b.info(0x40).unwrap(), &opts).unwrap();
    conn::connect(&b.qp, 0x40, &a.info(0x30).unwrap(), &opts).unwrap();
    let sg = [a.mr.sge(0, 8)];
    let wrs: Vec<SendWr<'_>> = (0..3)
        .map(|i| SendWr {
            wr_id: i,
            sg_list: &sg,
            opcode: WrOpcode::RdmaWrite,
            send_flags: SIG,
            rdma: RdmaTarget { remote_addr: b.mr.addr() + 8 * i, rkey: b.mr.rkey() },
            ..Default::default()
        })
        .collect();
    a.mr.write(0, b"overrun!").unwrap();
    a.qp.post_send(&wrs).unwrap();
    // Nobody polls: the third completion finds the CQ of two full.
    assert_eq!(
        next_event(be, be.a()),
        AsyncEvent {
            event_type: AsyncEventType::CqErr,
            element: AsyncElement::Cq(a.cq.ops().id())
        },
        "[{}]",
        be.name()
    );
    let mut wc = [WorkCompletion::default(); 4];
    let e = a.cq.poll(&mut wc).unwrap_err();
    assert_eq!(e.errno, Errno::Io, "[{}] {e}", be.name());
    assert!(
        e.message.contains("overrun") && e.message.contains("1 completion(s) were lost"),
        "[{}] {e}",
        be.name()
    );
    assert_eq!(read(&b.mr, 16, 8), b"overrun!", "[{}] the WRITEs themselves landed", be.name());
}

// ---------------- limits and EBUSY ----------------

/// Creates objects until the device's limit and one more: `ENOMEM` naming the limit.
fn fill<T>(be: &dyn Backend, what: &str, limit: u32, mut make: impl FnMut() -> Result<T>) {
    let mut made = Vec::with_capacity(limit as usize);
    for i in 0..limit {
        made.push(make().unwrap_or_else(|e| panic!("[{}] {what} {i} of {limit}: {e}", be.name())));
    }
    let e =
        make().err().unwrap_or_else(|| panic!("[{}] {what} beyond {limit} succeeded", be.name()));
    assert_eq!(e.errno, Errno::NoMem, "[{}] {e}", be.name());
    assert!(e.message.contains(&format!("{what} {limit}")), "[{}] {e}", be.name());
}

/// What `ibv_query_device` states is what B enforces: counts (`ENOMEM` one beyond), sizes
/// (`EINVAL` one beyond, accepted at the limit), READ/atomic depths; and what is in use cannot
/// be destroyed (`EBUSY`) until its users are.
pub fn limits_are_enforced_and_in_use_is_ebusy(be: &dyn Backend) {
    let ctx = be.b();
    let d = ctx.query_device().unwrap();
    assert!(d.max_qp >= 1 && d.max_cq >= 1 && d.max_mr >= 1 && d.max_pd >= 1 && d.max_srq >= 1);
    fill(be, "max_pd", d.max_pd, || ctx.alloc_pd());
    fill(be, "max_cq", d.max_cq, || ctx.create_cq(1, None, 0));
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4, None, 0).unwrap();
    let qp_with = |qp_type, c: QpCap| {
        pd.create_qp(&QpInitAttr {
            qp_type,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: None,
            cap: c,
            sq_sig_all: false,
        })
    };
    fill(be, "max_qp", d.max_qp, || qp_with(QpType::Rc, cap(1, 1, 0)));
    fill(be, "max_srq", d.max_srq, || {
        pd.create_srq(&SrqInitAttr { max_wr: 1, max_sge: 1, srq_limit: 0 })
    });
    fill(be, "max_mr", d.max_mr, || pd.reg_mr(8, AccessFlags::LOCAL_WRITE));

    // Sizes: one beyond is EINVAL naming the field; the limit itself is granted.
    let e = ctx.create_cq(d.max_cqe + 1, None, 0).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains(&format!("cqe {}", d.max_cqe + 1)), "[{}] {e}", be.name());
    assert_eq!(ctx.create_cq(0, None, 0).unwrap_err().errno, Errno::Inval);
    assert!(ctx.create_cq(d.max_cqe, None, 0).unwrap().cqe() >= d.max_cqe);
    let full = QpCap {
        max_send_wr: d.max_qp_wr,
        max_recv_wr: d.max_qp_wr,
        max_send_sge: d.max_sge,
        max_recv_sge: d.max_sge,
        max_inline_data: d.max_inline_data,
    };
    let over: [(&str, QpCap); 5] = [
        ("max_send_wr", QpCap { max_send_wr: d.max_qp_wr + 1, ..full }),
        ("max_recv_wr", QpCap { max_recv_wr: d.max_qp_wr + 1, ..full }),
        ("max_send_sge", QpCap { max_send_sge: d.max_sge + 1, ..full }),
        ("max_recv_sge", QpCap { max_recv_sge: d.max_sge + 1, ..full }),
        ("max_inline_data", QpCap { max_inline_data: d.max_inline_data + 1, ..full }),
    ];
    for (field, c) in over {
        for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
            let e = qp_with(qp_type, c).unwrap_err();
            assert_eq!(e.errno, Errno::Inval, "[{}] {field} on {qp_type:?}: {e}", be.name());
            assert!(e.message.contains(field), "[{}] {e}", be.name());
        }
    }
    let qp = qp_with(QpType::Rc, full).unwrap();
    let (_, granted) = qp.query().unwrap();
    assert!(
        granted.max_send_wr >= full.max_send_wr
            && granted.max_recv_wr >= full.max_recv_wr
            && granted.max_send_sge >= full.max_send_sge
            && granted.max_recv_sge >= full.max_recv_sge
            && granted.max_inline_data >= full.max_inline_data,
        "[{}] granted {granted:?} for {full:?}",
        be.name()
    );
    let srq_over = [
        SrqInitAttr { max_wr: d.max_srq_wr + 1, max_sge: 1, srq_limit: 0 },
        SrqInitAttr { max_wr: 1, max_sge: d.max_srq_sge + 1, srq_limit: 0 },
        SrqInitAttr { max_wr: 4, max_sge: 1, srq_limit: 5 },
    ];
    for init in srq_over {
        assert_eq!(
            pd.create_srq(&init).unwrap_err().errno,
            Errno::Inval,
            "[{}] {init:?}",
            be.name()
        );
    }
    // READ/atomic depths: beyond the device's is refused by ibv_modify_qp.
    let other = qp_with(QpType::Rc, cap(1, 1, 0)).unwrap();
    let remote = info(ctx, &other, 0);
    let deep = |n: u32| ConnOpts {
        max_rd_atomic: u8::try_from(n).unwrap_or(u8::MAX),
        ..ConnOpts::default()
    };
    conn::to_init(&qp, &ConnOpts::default()).unwrap();
    let e = conn::to_rtr(&qp, &remote, &deep(d.max_qp_rd_atom + 1)).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "[{}] {e}", be.name());
    assert!(e.message.contains("max_qp_rd_atom"), "[{}] {e}", be.name());
    conn::to_rtr(&qp, &remote, &deep(d.max_qp_rd_atom)).unwrap();
    let e = conn::to_rts(&qp, 0, &deep(d.max_qp_init_rd_atom + 1)).unwrap_err();
    assert_eq!(e.errno, Errno::Inval, "[{}] {e}", be.name());
    assert!(e.message.contains("max_qp_init_rd_atom"), "[{}] {e}", be.name());
    conn::to_rts(&qp, 0, &deep(d.max_qp_init_rd_atom)).unwrap();

    // EBUSY while in use, each freed once its users are.
    let srq = pd.create_srq(&SrqInitAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }).unwrap();
    let mr = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let on_srq = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Ud,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: Some(srq.clone()),
            // Ignored on an SRQ (ibv_create_qp), even beyond the device's limits.
            cap: QpCap {
                max_recv_wr: d.max_qp_wr + 1,
                max_recv_sge: d.max_sge + 1,
                ..cap(1, 1, 0)
            },
            sq_sig_all: false,
        })
        .unwrap();
    let (_, granted) = on_srq.query().unwrap();
    assert_eq!(
        (granted.max_recv_wr, granted.max_recv_sge),
        (0, 0),
        "[{}] a QP on an SRQ has no receive queue of its own: {granted:?}",
        be.name()
    );
    let ah = pd.create_ah(&av(ctx)).unwrap();
    let busy = |r: Result<()>, what: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.errno, Errno::Busy, "[{}] {what}: {e}", be.name());
    };
    busy(cq.clone().destroy(), "a CQ with QPs");
    busy(srq.clone().destroy(), "an SRQ with a QP");
    busy(pd.clone().dealloc(), "a PD with QPs, an SRQ and an MR");
    for q in [qp, other, on_srq] {
        q.destroy().unwrap();
    }
    cq.destroy().unwrap();
    busy(pd.clone().dealloc(), "a PD with an SRQ and an MR");
    srq.destroy().unwrap();
    busy(pd.clone().dealloc(), "a PD with an MR and an AH");
    mr.dereg().unwrap();
    busy(pd.clone().dealloc(), "a PD with an AH");
    drop(ah); // ibv_destroy_ah
    pd.dealloc().unwrap();
}

// ---------------- CQ resize and completion channels ----------------

/// A CQ grows with `ibv_resize_cq` (more completions fit than it was created for), refuses to
/// shrink below what it holds or to zero or beyond `max_cqe`, keeps its completions in order,
/// and still notifies its completion channel.
pub fn cq_resize_and_completion_channel(be: &dyn Backend) {
    let (ac, bc) = (be.a(), be.b());
    let max_cqe = bc.query_device().unwrap().max_cqe;
    let ch = bc.create_comp_channel().unwrap();
    let cq = bc.create_cq(2, Some(&ch), 0).unwrap();
    assert!(cq.cqe() >= 2);
    cq.resize(8).unwrap();
    assert!(cq.cqe() >= 8, "[{}] cqe {} after resizing to 8", be.name(), cq.cqe());
    let pd = bc.alloc_pd().unwrap();
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let b_qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: None,
            cap: cap(8, 1, 64),
            sq_sig_all: false,
        })
        .unwrap();
    let a = Endpoint::new(ac, QpType::Rc, cap(8, 1, 64), 16, 4096).unwrap();
    conn::connect(&a.qp, 5, &info(bc, &b_qp, 6), &ConnOpts::default()).unwrap();
    conn::connect(&b_qp, 6, &info(ac, &a.qp, 5), &ConnOpts::default()).unwrap();
    let sges: Vec<[Sge; 1]> = (0..7).map(|i| [mr.sge(i * 64, 64)]).collect();
    let recvs: Vec<RecvWr<'_>> =
        (0..7).map(|i| RecvWr { wr_id: 40 + i as u64, sg_list: &sges[i] }).collect();
    b_qp.post_recv(&recvs).unwrap();
    let msgs: Vec<Vec<u8>> = (0..7u8).map(|i| vec![i + 1; 10 + i as usize]).collect();
    let wrs: Vec<SendWr<'_>> = msgs[..6]
        .iter()
        .enumerate()
        .map(|(i, m)| SendWr {
            wr_id: i as u64,
            send_flags: SIG | SendFlags::INLINE,
            inline_data: Some(m),
            ..Default::default()
        })
        .collect();
    a.qp.post_send(&wrs).unwrap();
    // Acknowledged means received: B's CQ now holds six completions, more than it began with.
    let acked = be.wait(&a.cq, 6);
    assert!(acked.iter().all(|w| w.status == WcStatus::Success), "[{}] {acked:?}", be.name());
    for (n, what) in [(5, "cannot hold the 6"), (0, "cqe 0"), (max_cqe + 1, "is not in")] {
        let e = cq.resize(n).unwrap_err();
        assert_eq!(e.errno, Errno::Inval, "[{}] resize to {n}: {e}", be.name());
        assert!(e.message.contains(what), "[{}] resize to {n}: {e}", be.name());
    }
    cq.resize(6).unwrap();
    assert!(cq.cqe() >= 6);
    let path = (b_qp.qp_num(), a.qp.qp_num(), lid(ac));
    let want: Vec<WorkCompletion> = (0..6)
        .map(|i| received(40 + i as u64, WcOpcode::Recv, msgs[i].len(), None, path))
        .collect();
    assert_eq!(be.wait(&cq, 6), want, "[{}] in order, none lost", be.name());
    for (i, m) in msgs[..6].iter().enumerate() {
        assert_eq!(read(&mr, i * 64, m.len()), *m);
    }
    // The channel: armed, one more message, one event naming this CQ.
    cq.req_notify(false).unwrap();
    a.qp.post_send(&[SendWr {
        wr_id: 6,
        send_flags: SIG | SendFlags::INLINE,
        inline_data: Some(&msgs[6]),
        ..Default::default()
    }])
    .unwrap();
    let got = ch.get_cq_event(Some(super::WAIT)).unwrap_or_else(|e| panic!("[{}] {e}", be.name()));
    assert!(got == cq, "[{}] the event names the CQ", be.name());
    ch.ack_cq_events(&got, 1);
    assert_eq!(be.wait(&cq, 1), vec![received(46, WcOpcode::Recv, msgs[6].len(), None, path)]);
    assert_eq!(be.wait(&a.cq, 1)[0].wr_id, 6);
}

// ---------------- RC, UC and UD at once ----------------

/// One device runs RC, UC and UD QPs at once, all completing into one CQ per side: every
/// message lands whole, each QP's completions come in its own post order, and an RC READ
/// fetches back what the RC WRITEs put.
pub fn rc_uc_and_ud_at_once(be: &dyn Backend) {
    const ROUNDS: usize = 8;
    const SLOT: usize = 4096;
    let (ac, bc) = (be.a(), be.b());
    let side = |ctx: &Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256, None, 0).unwrap();
        let mr = pd.reg_mr(256 << 10, AccessFlags::all()).unwrap();
        let mk = |qp_type| {
            pd.create_qp(&QpInitAttr {
                qp_type,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                srq: None,
                cap: cap(64, 1, 0),
                sq_sig_all: true,
            })
            .unwrap()
        };
        let qps = [mk(QpType::Rc), mk(QpType::Uc), mk(QpType::Ud)];
        (pd, cq, mr, qps)
    };
    let (a_pd, a_cq, a_mr, [a_rc, a_uc, a_ud]) = side(ac);
    let (_b_pd, b_cq, b_mr, [b_rc, b_uc, b_ud]) = side(bc);
    let opts = ConnOpts::default();
    conn::connect(&a_rc, 1, &info(bc, &b_rc, 2), &opts).unwrap();
    conn::connect(&b_rc, 2, &info(ac, &a_rc, 1), &opts).unwrap();
    let uc_opts = ConnOpts { access: AccessFlags::REMOTE_WRITE, ..opts };
    conn::connect(&a_uc, 3, &info(bc, &b_uc, 4), &uc_opts).unwrap();
    conn::connect(&b_uc, 4, &info(ac, &a_uc, 3), &uc_opts).unwrap();
    ud_up(&a_ud, 0x11);
    ud_up(&b_ud, 0x22);
    let ah = a_pd.create_ah(&av(bc)).unwrap();
    // B's receive buffers: RC in slots 0.., UC in 16.., UD in 32.. (the UD ones with room for the GRH).
    let rsge: Vec<[Sge; 1]> = (0..48).map(|i| [b_mr.sge(i * SLOT, SLOT as u32)]).collect();
    for (k, qp) in [&b_rc, &b_uc, &b_ud].iter().enumerate() {
        let wrs: Vec<RecvWr<'_>> = (0..ROUNDS)
            .map(|r| RecvWr { wr_id: (k * 100 + r) as u64, sg_list: &rsge[k * 16 + r] })
            .collect();
        qp.post_recv(&wrs).unwrap();
    }
    // Lengths: RC messages of three packets, UC of two, UD of one.
    let msg =
        |k: usize, r: usize| pattern(0x3000 + (k * 100 + r) as u64, 0, [2500, 1500, 500][k] + r);
    let msgs: Vec<Vec<Vec<u8>>> =
        (0..3).map(|k| (0..ROUNDS).map(|r| msg(k, r)).collect()).collect();
    let wblock = pattern(0x3999, 0, 3000);
    a_mr.write(200_000, &wblock).unwrap();
    for (k, per_type) in msgs.iter().enumerate() {
        for (r, m) in per_type.iter().enumerate() {
            a_mr.write((k * 16 + r) * SLOT, m).unwrap();
        }
    }
    let ssge: Vec<Vec<[Sge; 1]>> = (0..3)
        .map(|k| {
            (0..ROUNDS).map(|r| [a_mr.sge((k * 16 + r) * SLOT, msgs[k][r].len() as u32)]).collect()
        })
        .collect();
    let wsge = [a_mr.sge(200_000, 3000)];
    for (r, ((rc, uc), ud_sge)) in ssge[0].iter().zip(&ssge[1]).zip(&ssge[2]).enumerate() {
        let write = SendWr {
            wr_id: 1000 + r as u64,
            sg_list: &wsge,
            opcode: WrOpcode::RdmaWrite,
            rdma: RdmaTarget {
                remote_addr: b_mr.addr() + 200_000 + (r * 4096) as u64,
                rkey: b_mr.rkey(),
            },
            ..Default::default()
        };
        a_rc.post_send(&[SendWr { wr_id: r as u64, sg_list: rc, ..Default::default() }, write])
            .unwrap();
        a_uc.post_send(&[SendWr { wr_id: 100 + r as u64, sg_list: uc, ..Default::default() }])
            .unwrap();
        let ud = UdTarget { ah: ah.clone(), remote_qpn: b_ud.qp_num(), remote_qkey: 0x22 };
        a_ud.post_send(&[SendWr {
            wr_id: 200 + r as u64,
            sg_list: ud_sge,
            ud: Some(ud),
            ..Default::default()
        }])
        .unwrap();
    }
    let a_lid = lid(ac);
    let got = be.wait(&b_cq, 3 * ROUNDS);
    for (k, (bq, aq)) in [(&b_rc, &a_rc), (&b_uc, &a_uc), (&b_ud, &a_ud)].into_iter().enumerate() {
        let mine: Vec<WorkCompletion> =
            got.iter().filter(|w| w.qp_num == bq.qp_num()).copied().collect();
        let path = (bq.qp_num(), aq.qp_num(), a_lid);
        let want: Vec<WorkCompletion> = (0..ROUNDS)
            .map(|r| {
                let id = (k * 100 + r) as u64;
                let len = msgs[k][r].len();
                if k == 2 {
                    received_ud(id, len, None, path)
                } else {
                    received(id, WcOpcode::Recv, len, None, path)
                }
            })
            .collect();
        assert_eq!(mine, want, "[{}] the {:?} QP's receives, in order", be.name(), bq.qp_type());
        for (r, m) in msgs[k].iter().enumerate() {
            let off = (k * 16 + r) * SLOT + if k == 2 { 40 } else { 0 };
            assert_eq!(read(&b_mr, off, m.len()), *m, "[{}] message {k}/{r}", be.name());
        }
    }
    let sends = be.wait(&a_cq, 4 * ROUNDS);
    for (k, qp) in [&a_rc, &a_uc, &a_ud].into_iter().enumerate() {
        let mine: Vec<(u64, WcStatus, WcOpcode)> = sends
            .iter()
            .filter(|w| w.qp_num == qp.qp_num())
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
        let want: Vec<(u64, WcStatus, WcOpcode)> = (0..ROUNDS)
            .flat_map(|r| {
                let send = ((k * 100 + r) as u64, WcStatus::Success, WcOpcode::Send);
                let write = (1000 + r as u64, WcStatus::Success, WcOpcode::RdmaWrite);
                if k == 0 {
                    vec![send, write]
                } else {
                    vec![send]
                }
            })
            .collect();
        assert_eq!(mine, want, "[{}] the {:?} QP's send completions", be.name(), qp.qp_type());
    }
    for r in 0..ROUNDS {
        assert_eq!(read(&b_mr, 200_000 + r * 4096, 3000), wblock);
    }
    // READ back the last WRITE into fresh memory.
    let rsg = [a_mr.sge(240_000, 3000)];
    a_rc.post_send(&[SendWr {
        wr_id: 77,
        sg_list: &rsg,
        opcode: WrOpcode::RdmaRead,
        rdma: RdmaTarget {
            remote_addr: b_mr.addr() + 200_000 + ((ROUNDS - 1) * 4096) as u64,
            rkey: b_mr.rkey(),
        },
        ..Default::default()
    }])
    .unwrap();
    assert_eq!(be.wait(&a_cq, 1), vec![sent(77, WcOpcode::RdmaRead, 3000, a_rc.qp_num())]);
    assert_eq!(read(&a_mr, 240_000, 3000), wblock);
}
