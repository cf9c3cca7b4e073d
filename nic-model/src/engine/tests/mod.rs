//! Engine tests in the quinn-proto `Pair` style: two NICs, a virtual clock, and a wire that can
//! drop, duplicate, delay and record chosen packets.

use std::collections::VecDeque;
use std::sync::Arc;

use verbs_api::*;

use super::mr::MrMemory;
use super::*;
use crate::packet::{self, Opcode};

/// Which way a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    AtoB,
    BtoA,
}

/// What the harness does with one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Deliver,
    Drop,
    Duplicate,
    Delay(u64),
}

/// A packet seen on the wire.
#[derive(Clone, Debug)]
struct Seen {
    dir: Dir,
    opcode: Opcode,
    psn: u32,
    aeth: Option<u8>,
    ack_req: bool,
    #[allow(dead_code)]
    fate: Fate,
}

type Filter = Box<dyn FnMut(Dir, &packet::Packet<'_>, usize) -> Fate>;

struct Pair {
    a: Nic,
    b: Nic,
    now: u64,
    latency_ns: u64,
    in_flight: VecDeque<(u64, Dir, Vec<u8>)>,
    log: Vec<Seen>,
    filter: Filter,
    counter: usize,
}

impl Pair {
    fn new() -> Pair {
        Pair {
            a: Nic::new(NicConfig::new("a", 1)),
            b: Nic::new(NicConfig::new("b", 2)),
            now: 1_000_000,
            latency_ns: 1_000,
            in_flight: VecDeque::new(),
            log: Vec::new(),
            filter: Box::new(|_, _, _| Fate::Deliver),
            counter: 0,
        }
    }

    fn nic(&mut self, d: Dir) -> &mut Nic {
        match d {
            Dir::AtoB => &mut self.b,
            Dir::BtoA => &mut self.a,
        }
    }

    /// Collect transmits, deliver what is due, fire timers; false when nothing happened.
    fn step(&mut self) -> bool {
        let mut any = false;
        for dir in [Dir::AtoB, Dir::BtoA] {
            loop {
                let t = match dir {
                    Dir::AtoB => self.a.poll_transmit(),
                    Dir::BtoA => self.b.poll_transmit(),
                };
                let Some(t) = t else { break };
                any = true;
                let (_, p) = packet::parse_datagram(&t.data).expect("engines emit valid datagrams");
                let fate = (self.filter)(dir, &p, self.counter);
                self.counter += 1;
                self.log.push(Seen {
                    dir,
                    opcode: p.bth.opcode,
                    psn: p.bth.psn.value(),
                    aeth: p.aeth.map(|a| a.syndrome),
                    ack_req: p.bth.ack_req,
                    fate,
                });
                let at = self.now + self.latency_ns;
                match fate {
                    Fate::Deliver => self.in_flight.push_back((at, dir, t.data)),
                    Fate::Drop => {}
                    Fate::Duplicate => {
                        self.in_flight.push_back((at, dir, t.data.clone()));
                        self.in_flight.push_back((at, dir, t.data));
                    }
                    Fate::Delay(d) => self.in_flight.push_back((at + d, dir, t.data)),
                }
            }
        }
        if any {
            return true;
        }
        let next_delivery = self.in_flight.iter().map(|x| x.0).min();
        let next_timer = [self.a.next_timeout(), self.b.next_timeout()].into_iter().flatten().min();
        let Some(next) = [next_delivery, next_timer].into_iter().flatten().min() else {
            return false;
        };
        self.now = self.now.max(next);
        let now = self.now;
        let mut due = Vec::new();
        let mut keep = VecDeque::new();
        for x in self.in_flight.drain(..) {
            if x.0 <= now {
                due.push(x)
            } else {
                keep.push_back(x)
            }
        }
        self.in_flight = keep;
        due.sort_by_key(|x| x.0);
        for (_, dir, data) in due {
            self.nic(dir).handle_packet(now, &data);
            // Back to its sender, as the simulator does: every test also runs on reused buffers.
            match dir {
                Dir::AtoB => self.a.recycle(data),
                Dir::BtoA => self.b.recycle(data),
            }
        }
        self.a.handle_timeout(now);
        self.b.handle_timeout(now);
        true
    }

    /// Run until idle (bounded).
    fn drive(&mut self) {
        for _ in 0..1_000_000 {
            if !self.step() {
                return;
            }
        }
        panic!("pair did not become idle");
    }

    /// Run until virtual time passes `until` or idle.
    fn drive_until(&mut self, until: u64) {
        for _ in 0..1_000_000 {
            if self.now >= until || !self.step() {
                return;
            }
        }
    }

    fn opcodes(&self, dir: Dir) -> Vec<Opcode> {
        self.log.iter().filter(|s| s.dir == dir).map(|s| s.opcode).collect()
    }
}

/// One side's resources.
struct Side {
    pd: PdId,
    cq: cq::CqId,
    qpn: u32,
    mem: Arc<MrMemory>,
    key: u32,
}

const MR_LEN: usize = 1 << 16;
const ALL: AccessFlags = AccessFlags::all();

fn side(nic: &mut Nic, access: AccessFlags) -> Side {
    side_with_inline(nic, access, 64)
}

fn side_with_inline(nic: &mut Nic, access: AccessFlags, max_inline_data: u32) -> Side {
    side_on_memory(nic, access, max_inline_data, MrMemory::allocate(MR_LEN).unwrap())
}

/// A side whose MR is `mem`, which another NIC's MR may share (so both see one address).
fn side_on_memory(
    nic: &mut Nic,
    access: AccessFlags,
    max_inline_data: u32,
    mem: Arc<MrMemory>,
) -> Side {
    let pd = nic.alloc_pd().unwrap();
    let cq = nic.create_cq(256).unwrap();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data,
    };
    let (qpn, _) = nic.create_qp(pd, QpType::Rc, cq, cq, cap, false).unwrap();
    let key = nic.reg_mr(pd, mem.clone(), access).unwrap();
    Side { pd, cq, qpn, mem, key }
}

#[derive(Clone, Copy)]
struct ConnOpts {
    mtu: Mtu,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    max_rd_atomic: u8,
    access: AccessFlags,
    /// Address by GRH (`is_global`) with this (hop_limit, traffic_class), instead of by LID.
    grh: Option<(u8, u8)>,
}

impl Default for ConnOpts {
    fn default() -> Self {
        ConnOpts {
            mtu: Mtu::Mtu256,
            timeout: 10,
            retry_cnt: 3,
            rnr_retry: 3,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            grh: None,
        }
    }
}

fn connect(nic: &mut Nic, qpn: u32, dlid: u16, dqpn: u32, o: ConnOpts) {
    let m =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    let a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: o.access,
        ..Default::default()
    };
    nic.modify_qp(0, qpn, &a, m).unwrap();
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    let a = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: match o.grh {
            None => AhAttr { dlid, port_num: 1, ..Default::default() },
            Some((hop_limit, traffic_class)) => AhAttr {
                is_global: true,
                dgid: Gid::from_ipv4(ip_of_lid(dlid)),
                hop_limit,
                traffic_class,
                port_num: 1,
                ..Default::default()
            },
        },
        path_mtu: o.mtu,
        dest_qp_num: dqpn,
        rq_psn: 0xFFFFF0, // near the wrap, so every test crosses it
        max_dest_rd_atomic: o.max_rd_atomic,
        min_rnr_timer: o.min_rnr_timer,
        ..Default::default()
    };
    nic.modify_qp(0, qpn, &a, m).unwrap();
    let m = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    let a = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0xFFFFF0,
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        max_rd_atomic: o.max_rd_atomic,
        ..Default::default()
    };
    nic.modify_qp(0, qpn, &a, m).unwrap();
}

fn setup(o: ConnOpts) -> (Pair, Side, Side) {
    setup_on(Pair::new(), o)
}

fn setup_on(mut p: Pair, o: ConnOpts) -> (Pair, Side, Side) {
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    connect(&mut p.a, a.qpn, 2, b.qpn, o);
    connect(&mut p.b, b.qpn, 1, a.qpn, o);
    (p, a, b)
}

fn sge(s: &Side, off: u64, len: u32) -> Sge {
    Sge { addr: s.mem.addr() + off, length: len, lkey: s.key }
}

fn poll_all(nic: &mut Nic, cq: cq::CqId) -> Vec<WorkCompletion> {
    let mut out = [WorkCompletion::default(); 64];
    let n = nic.poll_cq(cq, &mut out).unwrap();
    out[..n].to_vec()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn read_mem(s: &Side, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    s.mem.read(off, &mut v).unwrap();
    v
}

fn post_send(p: &mut Pair, s: &Side, wr: SendWr<'_>) {
    let now = p.now;
    p.a.post_send(now, s.qpn, &[wr]).unwrap();
}

fn signaled() -> SendFlags {
    SendFlags::SIGNALED
}

// ---------------- the verbs, end to end ----------------

#[test]
fn send_gathers_segments_and_scatters() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let data = pattern(1000, 1);
    a.mem.write(0, &data[..300]).unwrap();
    a.mem.write(4096, &data[300..]).unwrap();
    // Receive into two SGEs: 100 bytes, then the rest.
    let rsg = [sge(&b, 8192, 100), sge(&b, 16384, 2000)];
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 77, sg_list: &rsg }]).unwrap();
    let ssg = [sge(&a, 0, 300), sge(&a, 4096, 700)];
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 5,
            sg_list: &ssg,
            opcode: WrOpcode::Send,
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    // 1000 bytes at MTU 256: FIRST, MIDDLE, MIDDLE, LAST, with PSNs across the 24-bit wrap.
    let sent: Vec<_> =
        p.log.iter().filter(|s| s.dir == Dir::AtoB).map(|s| (s.opcode, s.psn)).collect();
    assert_eq!(
        sent,
        vec![
            (Opcode::RC_SEND_FIRST, 0xFFFFF0),
            (Opcode::RC_SEND_MIDDLE, 0xFFFFF1),
            (Opcode::RC_SEND_MIDDLE, 0xFFFFF2),
            (Opcode::RC_SEND_LAST, 0xFFFFF3)
        ]
    );
    assert_eq!(p.opcodes(Dir::BtoA), vec![Opcode::RC_ACKNOWLEDGE]);
    let mut got = read_mem(&b, 8192, 100);
    got.extend(read_mem(&b, 16384, 900));
    assert_eq!(got, data);
    assert_eq!(read_mem(&b, 16384 + 900, 8), vec![0; 8], "nothing beyond the message");
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        rwc,
        vec![WorkCompletion {
            wr_id: 77,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 1000,
            qp_num: b.qpn,
            src_qp: a.qpn,
            slid: 1,
            ..Default::default()
        }]
    );
    let swc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        swc,
        vec![WorkCompletion {
            wr_id: 5,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 1000,
            qp_num: a.qpn,
            ..Default::default()
        }]
    );
}

#[test]
fn send_with_imm_and_solicited_event() {
    let (mut p, a, b) = setup(ConnOpts::default());
    a.mem.write(0, b"ping").unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.req_notify_cq(b.cq, true).unwrap();
    let wr = SendWr {
        wr_id: 9,
        sg_list: &[sge(&a, 0, 4)],
        opcode: WrOpcode::SendWithImm,
        send_flags: signaled() | SendFlags::SOLICITED,
        imm_data: 0xdeadbeef,
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_SEND_ONLY_WITH_IMMEDIATE]);
    assert_eq!(p.b.poll_event(), Some(NicEvent::CqNotify(b.cq)), "solicited event fired");
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].imm_data, 0xdeadbeef);
    assert_eq!(wc[0].wc_flags, WcFlags::WITH_IMM);
    assert_eq!(wc[0].byte_len, 4);
    assert_eq!(read_mem(&b, 0, 4), b"ping");
}

#[test]
fn unsolicited_send_does_not_fire_a_solicited_only_arm() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.req_notify_cq(b.cq, true).unwrap();
    post_send(&mut p, &a, SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 4)], ..Default::default() });
    p.drive();
    assert_eq!(p.b.poll_event(), None);
    assert_eq!(poll_all(&mut p.b, b.cq).len(), 1);
    // Arming for the next completion fires on any completion.
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 2, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.req_notify_cq(b.cq, false).unwrap();
    post_send(&mut p, &a, SendWr { wr_id: 2, sg_list: &[sge(&a, 0, 4)], ..Default::default() });
    p.drive();
    assert_eq!(p.b.poll_event(), Some(NicEvent::CqNotify(b.cq)));
}

#[test]
fn rdma_write_lands_without_a_receive() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let data = pattern(600, 3);
    a.mem.write(100, &data).unwrap();
    let wr = SendWr {
        wr_id: 3,
        sg_list: &[sge(&a, 100, 600)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 1000, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::RC_RDMA_WRITE_LAST]
    );
    assert_eq!(read_mem(&b, 1000, 600), data);
    assert_eq!(read_mem(&b, 999, 1), vec![0]);
    assert_eq!(read_mem(&b, 1600, 1), vec![0]);
    assert!(poll_all(&mut p.b, b.cq).is_empty(), "a plain WRITE completes nothing at the target");
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (3, WcStatus::Success, WcOpcode::RdmaWrite, 600)
    );
}

#[test]
fn rdma_write_with_imm_consumes_a_receive() {
    let (mut p, a, b) = setup(ConnOpts::default());
    a.mem.write(0, &pattern(300, 9)).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 44, sg_list: &[] }]).unwrap();
    let wr = SendWr {
        wr_id: 4,
        sg_list: &[sge(&a, 0, 300)],
        opcode: WrOpcode::RdmaWriteWithImm,
        send_flags: signaled(),
        imm_data: 0x1234,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 512, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE]
    );
    assert_eq!(read_mem(&b, 512, 300), pattern(300, 9));
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc,
        vec![WorkCompletion {
            wr_id: 44,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 300,
            imm_data: 0x1234,
            wc_flags: WcFlags::WITH_IMM,
            qp_num: b.qpn,
            src_qp: a.qpn,
            slid: 1,
            ..Default::default()
        }]
    );
}

#[test]
fn rdma_read_multi_packet() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let data = pattern(700, 5);
    b.mem.write(2000, &data).unwrap();
    let wr = SendWr {
        wr_id: 6,
        sg_list: &[sge(&a, 0, 200), sge(&a, 1000, 500)],
        opcode: WrOpcode::RdmaRead,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 2000, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_RDMA_READ_REQUEST]);
    assert_eq!(
        p.opcodes(Dir::BtoA),
        vec![
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::RC_RDMA_READ_RESPONSE_LAST
        ]
    );
    let mut got = read_mem(&a, 0, 200);
    got.extend(read_mem(&a, 1000, 500));
    assert_eq!(got, data);
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (6, WcStatus::Success, WcOpcode::RdmaRead, 700)
    );
    // The next request uses the PSN after the three the READ reserved.
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 7,
            sg_list: &[sge(&a, 0, 8)],
            opcode: WrOpcode::RdmaWrite,
            rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
            ..Default::default()
        },
    );
    p.drive();
    let last = p.log.iter().rev().find(|s| s.dir == Dir::AtoB).unwrap();
    assert_eq!(last.psn, 0xFFFFF3);
}

#[test]
fn atomics_compare_swap_and_fetch_add() {
    let (mut p, a, b) = setup(ConnOpts::default());
    b.mem.write(64, &10u64.to_ne_bytes()).unwrap();
    let cas = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::AtomicCmpAndSwp,
        send_flags: signaled(),
        atomic: AtomicTarget {
            remote_addr: b.mem.addr() + 64,
            rkey: b.key,
            compare_add: 10,
            swap: 99,
        },
        ..Default::default()
    };
    let fadd = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 8, 8)],
        opcode: WrOpcode::AtomicFetchAndAdd,
        send_flags: signaled(),
        atomic: AtomicTarget {
            remote_addr: b.mem.addr() + 64,
            rkey: b.key,
            compare_add: 5,
            swap: 0,
        },
        ..Default::default()
    };
    let failed_cas = SendWr { wr_id: 3, sg_list: &[sge(&a, 16, 8)], ..cas.clone() };
    let now = p.now;
    p.a.post_send(now, a.qpn, &[cas, fadd, failed_cas]).unwrap();
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::RC_COMPARE_SWAP, Opcode::RC_FETCH_ADD, Opcode::RC_COMPARE_SWAP]
    );
    assert_eq!(
        u64::from_ne_bytes(read_mem(&a, 0, 8).try_into().unwrap()),
        10,
        "CAS returns the original"
    );
    assert_eq!(
        u64::from_ne_bytes(read_mem(&a, 8, 8).try_into().unwrap()),
        99,
        "fetch-add returns the value before the add"
    );
    assert_eq!(
        u64::from_ne_bytes(read_mem(&a, 16, 8).try_into().unwrap()),
        104,
        "a failed CAS returns the current value"
    );
    assert_eq!(u64::from_ne_bytes(read_mem(&b, 64, 8).try_into().unwrap()), 104);
    let wc = poll_all(&mut p.a, a.cq);
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success, WcOpcode::CompSwap, 8),
            (2, WcStatus::Success, WcOpcode::FetchAdd, 8),
            (3, WcStatus::Success, WcOpcode::CompSwap, 8)
        ]
    );
}

#[test]
fn inline_send_copies_at_post_time() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let data = *b"inline!";
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            inline_data: Some(&data),
            send_flags: SendFlags::INLINE | signaled(),
            ..Default::default()
        },
    );
    p.drive();
    assert_eq!(read_mem(&b, 0, 7), b"inline!");
    // Inline from SGEs: the bytes are taken at post time, so a later change is not sent.
    a.mem.write(0, b"before").unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 2, sg_list: &[sge(&b, 100, 64)] }]).unwrap();
    let now = p.now;
    p.a.post_send(
        now,
        a.qpn,
        &[SendWr {
            wr_id: 2,
            sg_list: &[sge(&a, 0, 6)],
            send_flags: SendFlags::INLINE,
            ..Default::default()
        }],
    )
    .unwrap();
    a.mem.write(0, b"after!").unwrap();
    p.drive();
    assert_eq!(read_mem(&b, 100, 6), b"before");
    // Too much inline data is refused at post time.
    let big = [0u8; 65];
    let err =
        p.a.post_send(
            now,
            a.qpn,
            &[SendWr {
                inline_data: Some(&big),
                send_flags: SendFlags::INLINE,
                ..Default::default()
            }],
        )
        .unwrap_err();
    assert_eq!(err.errno, Errno::Inval);
    assert!(err.message.contains("max_inline_data 64"), "{}", err.message);
}

#[test]
fn unsignaled_wrs_complete_silently_in_order() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let w = |id, flags| SendWr {
        wr_id: id,
        sg_list: &[],
        opcode: WrOpcode::RdmaWrite,
        send_flags: flags,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    let now = p.now;
    p.a.post_send(
        now,
        a.qpn,
        &[w(1, SendFlags::empty()), w(2, signaled()), w(3, SendFlags::empty()), w(4, signaled())],
    )
    .unwrap();
    p.drive();
    let ids: Vec<u64> = poll_all(&mut p.a, a.cq).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![2, 4]);
    let _ = b;
}

#[test]
fn sq_sig_all_signals_everything() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (qa, _) = p.a.create_qp(a.pd, QpType::Rc, a.cq, a.cq, cap, true).unwrap();
    connect(&mut p.a, qa, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, qa, ConnOpts::default());
    let now = p.now;
    let wr = SendWr {
        wr_id: 8,
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, qa, &[wr]).unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq).iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![8]);
}

#[test]
fn mtu_4096_segments_a_large_write() {
    let (mut p, a, b) = setup(ConnOpts { mtu: Mtu::Mtu4096, ..Default::default() });
    let data = pattern(10000, 2);
    a.mem.write(0, &data).unwrap();
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 10000)],
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 20000, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB).len(), 3);
    assert_eq!(read_mem(&b, 20000, 10000), data);
}

/// Regression (found by the simulator's bounded RC suite with a 1-packet window): a window
/// narrower than `ack_every` stalled with no ACK asked for, so every window's worth of packets
/// waited for the local ACK timeout and was sent again. The packet that fills the window asks.
#[test]
fn a_window_narrower_than_ack_every_asks_for_an_ack_when_it_fills() {
    let mut p = Pair::new();
    p.a = Nic::new(NicConfig { window: 4, ..NicConfig::new("a", 1) });
    let (mut p, a, b) = setup_on(p, ConnOpts::default());
    let data = pattern(2000, 6);
    a.mem.write(0, &data).unwrap();
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 2000)],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 100, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    let asks: Vec<bool> = p.log.iter().filter(|s| s.dir == Dir::AtoB).map(|s| s.ack_req).collect();
    assert_eq!(asks, [false, false, false, true, false, false, false, true], "8 packets, window 4");
    assert_eq!((p.a.stats().timeouts, p.a.stats().retransmits), (0, 0));
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(read_mem(&b, 100, 2000), data);
}

// ---------------- loss, duplication, retransmission ----------------

#[test]
fn lost_middle_packet_is_recovered_by_psn_nak() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let data = pattern(1024, 7);
    a.mem.write(0, &data).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 2048)] }]).unwrap();
    p.filter = Box::new(|d, pkt, _| {
        if d == Dir::AtoB
            && pkt.bth.psn.value() == 0xFFFFF1
            && pkt.bth.opcode == Opcode::RC_SEND_MIDDLE
        {
            FateOnce::drop_first()
        } else {
            Fate::Deliver
        }
    });
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 1024)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    // The responder NAKs the gap once; the requester goes back to the lost PSN.
    let naks = p.log.iter().filter(|s| s.dir == Dir::BtoA && s.aeth == Some(0x60)).count();
    assert_eq!(naks, 1);
    assert_eq!(read_mem(&b, 0, 1024), data);
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(rwc.len(), 1, "delivered exactly once");
    assert_eq!(rwc[0].byte_len, 1024);
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::Success);
    assert!(p.a.stats().retransmits >= 1);
}

/// A filter helper: drop only the first packet that matches.
struct FateOnce;
impl FateOnce {
    fn drop_first() -> Fate {
        thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
        DONE.with(|d| if d.replace(true) { Fate::Deliver } else { Fate::Drop })
    }
}

#[test]
fn lost_ack_is_recovered_by_timeout_and_duplicate_is_not_redelivered() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 2, sg_list: &[sge(&b, 64, 64)] }]).unwrap();
    let mut dropped = false;
    p.filter = Box::new(move |d, pkt, _| {
        if d == Dir::BtoA && pkt.bth.opcode == Opcode::RC_ACKNOWLEDGE && !dropped {
            dropped = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    a.mem.write(0, b"once").unwrap();
    let start = p.now;
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 4)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    // timeout 10 = 4.096 us * 1024 = 4.19 ms before the retransmission.
    assert!(p.now - start >= 4096 << 10, "the retransmission waited for the ACK timeout");
    assert_eq!(p.a.stats().timeouts, 1);
    assert_eq!(p.b.stats().rx_duplicates, 1);
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(rwc.len(), 1, "the duplicate SEND consumed no second receive");
    assert_eq!(read_mem(&b, 64, 4), vec![0; 4]);
    assert_eq!(poll_all(&mut p.a, a.cq).len(), 1);
}

#[test]
fn duplicated_and_reordered_packets_deliver_exactly_once_in_order() {
    let (mut p, a, b) = setup(ConnOpts::default());
    for i in 0..4 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: i, sg_list: &[sge(&b, i * 1024, 1024)] }]).unwrap();
    }
    p.filter = Box::new(|d, _, n| match (d, n % 5) {
        (Dir::AtoB, 1) => Fate::Duplicate,
        (Dir::AtoB, 3) => Fate::Delay(3_000),
        _ => Fate::Deliver,
    });
    for i in 0..4u64 {
        a.mem.write(i as usize * 1024, &pattern(700, i as u8)).unwrap();
        post_send(
            &mut p,
            &a,
            SendWr {
                wr_id: i,
                sg_list: &[sge(&a, i * 1024, 700)],
                send_flags: signaled(),
                ..Default::default()
            },
        );
    }
    p.drive();
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(rwc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert!(rwc.iter().all(|w| w.status == WcStatus::Success && w.byte_len == 700));
    for i in 0..4 {
        assert_eq!(read_mem(&b, i * 1024, 700), pattern(700, i as u8));
    }
    let swc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        swc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (0..4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
}

#[test]
fn duplicate_read_is_re_executed() {
    let (mut p, a, b) = setup(ConnOpts::default());
    b.mem.write(0, b"version1").unwrap();
    let mut dropped = false;
    p.filter = Box::new(move |d, pkt, _| {
        if d == Dir::BtoA && pkt.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY && !dropped {
            dropped = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 8)],
            opcode: WrOpcode::RdmaRead,
            send_flags: signaled(),
            rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
            ..Default::default()
        },
    );
    // Let the first response be lost, then change the target before the retry.
    p.drive_until(p.now + 10_000);
    b.mem.write(0, b"version2").unwrap();
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::RC_RDMA_READ_REQUEST, Opcode::RC_RDMA_READ_REQUEST]
    );
    assert_eq!(p.b.stats().rx_duplicates, 1);
    assert_eq!(read_mem(&a, 0, 8), b"version2", "the duplicate READ read memory again");
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::Success);
}

#[test]
fn duplicate_atomic_is_answered_from_the_saved_result() {
    let (mut p, a, b) = setup(ConnOpts::default());
    b.mem.write(0, &100u64.to_ne_bytes()).unwrap();
    let mut dropped = false;
    p.filter = Box::new(move |d, pkt, _| {
        if d == Dir::BtoA && pkt.bth.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE && !dropped {
            dropped = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::AtomicFetchAndAdd,
        send_flags: signaled(),
        atomic: AtomicTarget { remote_addr: b.mem.addr(), rkey: b.key, compare_add: 1, swap: 0 },
        ..Default::default()
    };
    post_send(&mut p, &a, wr);
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_FETCH_ADD, Opcode::RC_FETCH_ADD]);
    assert_eq!(u64::from_ne_bytes(read_mem(&b, 0, 8).try_into().unwrap()), 101, "executed once");
    assert_eq!(
        u64::from_ne_bytes(read_mem(&a, 0, 8).try_into().unwrap()),
        100,
        "the replayed original value"
    );
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::Success);
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let (mut p, a, b) = setup(ConnOpts { max_rd_atomic: 1, ..Default::default() });
    let rd = |id: u64| SendWr {
        wr_id: id,
        sg_list: &[],
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    let now = p.now;
    p.a.post_send(now, a.qpn, &[rd(1), rd(2), rd(3)]).unwrap();
    // Only one READ request leaves before its response returns.
    assert!(p.a.poll_transmit().is_some());
    assert!(p.a.poll_transmit().is_none(), "the second READ waits for the first response");
    p.log.clear();
    // Deliver by hand: re-post to restart cleanly.
    let (mut p, a, b) = setup(ConnOpts { max_rd_atomic: 1, ..Default::default() });
    let rd = |id: u64| SendWr {
        wr_id: id,
        sg_list: &[],
        opcode: WrOpcode::RdmaRead,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    let now = p.now;
    p.a.post_send(now, a.qpn, &[rd(1), rd(2), rd(3)]).unwrap();
    p.drive();
    // Requests and responses alternate.
    let seq: Vec<_> = p.log.iter().map(|s| s.dir).collect();
    assert_eq!(seq, vec![Dir::AtoB, Dir::BtoA, Dir::AtoB, Dir::BtoA, Dir::AtoB, Dir::BtoA]);
    assert_eq!(poll_all(&mut p.a, a.cq).len(), 3);
}

// ---------------- RNR ----------------

#[test]
fn rnr_nak_then_delivery_once_a_receive_is_posted() {
    let (mut p, a, b) = setup(ConnOpts { rnr_retry: 7, min_rnr_timer: 14, ..Default::default() });
    a.mem.write(0, b"late").unwrap();
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 4)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    // Several RNR NAKs (timer 14 = 1.28 ms each) while no receive is posted.
    let t0 = p.now;
    p.drive_until(t0 + 5_000_000);
    let rnrs = p.log.iter().filter(|s| s.dir == Dir::BtoA && s.aeth == Some(0x20 | 14)).count();
    assert!(rnrs >= 3, "rnr_retry 7 retries forever: {rnrs} RNR NAKs");
    assert!(poll_all(&mut p.a, a.cq).is_empty());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 5, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.drive();
    assert_eq!(read_mem(&b, 0, 4), b"late");
    assert_eq!(poll_all(&mut p.b, b.cq).len(), 1);
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::Success);
    // The gaps between retries honour the advertised timer.
    assert!(p.now - t0 >= 3 * 1_280_000);
}

#[test]
fn rnr_retry_exhausted_then_flush() {
    let (mut p, a, b) = setup(ConnOpts { rnr_retry: 2, ..Default::default() });
    let now = p.now;
    let sg = [sge(&a, 0, 4)];
    let wr = |id| SendWr {
        wr_id: id,
        sg_list: &sg,
        send_flags: SendFlags::empty(),
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[wr(1), wr(2), wr(3)]).unwrap();
    p.drive();
    // One first try plus two retries, each refused.
    let rnrs = p
        .log
        .iter()
        .filter(|s| s.dir == Dir::BtoA && s.aeth.is_some_and(|x| x & 0x60 == 0x20))
        .count();
    assert_eq!(rnrs, 3);
    let wc = poll_all(&mut p.a, a.cq);
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr), (3, WcStatus::WrFlushErr)],
        "errors complete even unsignaled"
    );
    assert_eq!(p.a.qp_state(a.qpn), Some(QpState::Err));
    let _ = b;
}

// ---------------- retry exhaustion ----------------

#[test]
fn retry_exhausted_gives_retry_exc_err_then_flush() {
    let (mut p, a, b) = setup(ConnOpts { retry_cnt: 2, timeout: 8, ..Default::default() });
    p.filter = Box::new(|d, _, _| if d == Dir::AtoB { Fate::Drop } else { Fate::Deliver });
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let now = p.now;
    let sg = [sge(&a, 0, 4)];
    let wr = |id| SendWr { wr_id: id, sg_list: &sg, send_flags: signaled(), ..Default::default() };
    p.a.post_send(now, a.qpn, &[wr(1), wr(2)]).unwrap();
    let t0 = p.now;
    p.drive();
    let tries = p.log.iter().filter(|s| s.dir == Dir::AtoB && s.psn == 0xFFFFF0).count();
    assert_eq!(tries, 3, "one first try and retry_cnt = 2 retries");
    let timeout = 4096u64 << 8;
    assert!(p.now - t0 >= 3 * timeout && p.now - t0 < 4 * timeout + 10_000);
    let wc = poll_all(&mut p.a, a.cq);
    let got: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect();
    assert_eq!(got, vec![(1, WcStatus::RetryExcErr, a.qpn), (2, WcStatus::WrFlushErr, a.qpn)]);
    assert_eq!(p.a.qp_state(a.qpn), Some(QpState::Err));
    assert_eq!(
        p.a.poll_event(),
        Some(NicEvent::Async(AsyncEvent {
            event_type: AsyncEventType::QpFatal,
            element: AsyncElement::Qp(a.qpn)
        }))
    );
    assert!(poll_all(&mut p.b, b.cq).is_empty(), "nothing was delivered");
    // Posting to a QP in the error state completes with a flush.
    p.a.post_send(p.now, a.qpn, &[wr(3)]).unwrap();
    assert_eq!(
        poll_all(&mut p.a, a.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(3, WcStatus::WrFlushErr)]
    );
}

/// A post through a lazy clock (a real-time host's) arms the ACK timer without reading the
/// clock; the timer is due "at once" until the host stamps it, and then fires only a full
/// timeout after the stamp: late is allowed, early is not.
#[test]
fn post_with_lazy_clock_arms_an_unstamped_timer_that_the_host_stamps() {
    let (mut p, a, _b) = setup(ConnOpts { retry_cnt: 2, timeout: 8, ..Default::default() });
    let timeout = 4096u64 << 8;
    let sg = [sge(&a, 0, 4)];
    let wr = SendWr { wr_id: 1, sg_list: &sg, send_flags: signaled(), ..Default::default() };
    let mut clock = || -> Nanos { panic!("a post that arms the ACK timer reads no clock") };
    p.a.post_send_at(&mut Now::Lazy(&mut clock), a.qpn, &[wr]).unwrap();
    let sent = p.a.stats().tx_packets;
    assert_eq!(sent, 1, "the SEND went out");
    assert_eq!(p.a.next_timeout(), Some(0), "an unstamped timer is due at once");

    // The host's next look at the clock: stamping gives the deadline, firing nothing.
    let t0 = 5_000_000;
    p.a.handle_timeout(t0);
    assert_eq!(p.a.next_timeout(), Some(t0 + timeout));
    assert_eq!(p.a.stats().timeouts, 0, "stamping is not a timeout");
    p.a.handle_timeout(t0 + timeout - 1);
    assert_eq!(p.a.stats().timeouts, 0, "not before a full timeout after the stamp");
    assert_eq!(p.a.stats().tx_packets, sent, "no retransmission yet");

    // A full timeout after the stamp the requester retries: the SEND goes again.
    p.a.handle_timeout(t0 + timeout);
    assert_eq!(p.a.stats().timeouts, 1);
    assert_eq!(p.a.stats().retransmits, 1);
    assert_eq!(p.a.next_timeout(), Some(t0 + 2 * timeout), "re-armed from the retry");

    // stamp_timers alone leaves stamped timers as they are.
    p.a.stamp_timers(t0 + timeout + 77);
    assert_eq!(p.a.next_timeout(), Some(t0 + 2 * timeout));
}

// ---------------- remote and local errors ----------------

#[test]
fn bad_rkey_is_rem_access_err_and_both_qps_error() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 9, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let now = p.now;
    let bad = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key ^ 0x100 },
        ..Default::default()
    };
    let next = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 0, 8)],
        send_flags: signaled(),
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[bad, next]).unwrap();
    p.drive();
    assert!(
        p.log.iter().any(|s| s.dir == Dir::BtoA && s.aeth == Some(0x62)),
        "NAK remote access error"
    );
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.b.qp_state(b.qpn), Some(QpState::Err));
    assert_eq!(
        poll_all(&mut p.b, b.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(9, WcStatus::WrFlushErr)]
    );
}

#[test]
fn write_outside_mr_or_without_access_is_rem_access_err() {
    for (access, off) in [
        (AccessFlags::all(), MR_LEN as u64 - 4),
        (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ, 0),
    ] {
        let mut p = Pair::new();
        let a = side(&mut p.a, ALL);
        let b = side(&mut p.b, access);
        connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
        connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
        let now = p.now;
        let wr = SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 8)],
            opcode: WrOpcode::RdmaWrite,
            rdma: RdmaTarget { remote_addr: b.mem.addr() + off, rkey: b.key },
            ..Default::default()
        };
        p.a.post_send(now, a.qpn, &[wr]).unwrap();
        p.drive();
        assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::RemAccessErr);
        assert_eq!(read_mem(&b, 0, 8), vec![0; 8]);
    }
}

#[test]
fn qp_access_flags_gate_remote_operations() {
    let (mut p, a, b) = setup(ConnOpts { access: AccessFlags::REMOTE_WRITE, ..Default::default() });
    let now = p.now;
    let rd = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaRead,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[rd]).unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn send_larger_than_receive_is_loc_len_err_and_rem_inv_req_err() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 100)] }]).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 2, sg_list: &[sge(&b, 100, 100)] }]).unwrap();
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 7,
            sg_list: &[sge(&a, 0, 200)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    let rwc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        rwc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        poll_all(&mut p.a, a.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(7, WcStatus::RemInvReqErr)]
    );
}

#[test]
fn receive_mr_deregistered_is_loc_prot_err_and_rem_op_err() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 100)] }]).unwrap();
    p.b.dereg_mr(b.key).unwrap();
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 7,
            sg_list: &[sge(&a, 0, 10)],
            send_flags: signaled(),
            ..Default::default()
        },
    );
    p.drive();
    assert_eq!(poll_all(&mut p.b, b.cq)[0].status, WcStatus::LocProtErr);
    assert!(
        p.log.iter().any(|s| s.dir == Dir::BtoA && s.aeth == Some(0x63)),
        "NAK remote operational error"
    );
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::RemOpErr);
}

#[test]
fn read_into_mr_without_local_write_is_loc_prot_err() {
    let mut p = Pair::new();
    let a = side(&mut p.a, AccessFlags::empty());
    let b = side(&mut p.b, ALL);
    connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
    let now = p.now;
    let rd = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaRead,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    let after = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaWrite,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[rd, after]).unwrap();
    p.drive();
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn send_mr_deregistered_after_post_is_loc_prot_err() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let now = p.now;
    // Hold the first WR back with a full window of nothing: post two, deregister, then drive.
    p.a.modify_qp(
        now,
        a.qpn,
        &QpAttr { qp_state: QpState::Sqd, ..Default::default() },
        QpAttrMask::STATE,
    )
    .unwrap();
    p.a.post_send(
        now,
        a.qpn,
        &[SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, 8)],
            send_flags: signaled(),
            ..Default::default()
        }],
    )
    .unwrap();
    p.a.dereg_mr(a.key).unwrap();
    p.a.modify_qp(
        now,
        a.qpn,
        &QpAttr { qp_state: QpState::Rts, ..Default::default() },
        QpAttrMask::STATE,
    )
    .unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::LocProtErr);
    let _ = b;
}

#[test]
fn message_over_max_msg_sz_is_loc_len_err() {
    let mut p = Pair::new();
    p.a = Nic::new(NicConfig {
        limits: Limits { max_msg_sz: 512, ..Limits::default() },
        ..NicConfig::new("a", 1)
    });
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
    let now = p.now;
    p.a.post_send(
        now,
        a.qpn,
        &[SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 513)], ..Default::default() }],
    )
    .unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::LocLenErr);
    assert!(p.log.is_empty(), "nothing went on the wire");
}

#[test]
fn read_with_max_rd_atomic_zero_is_loc_qp_op_err() {
    let (mut p, a, b) = setup(ConnOpts { max_rd_atomic: 0, ..Default::default() });
    let now = p.now;
    let rd = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::RdmaRead,
        rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, a.qpn, &[rd]).unwrap();
    p.drive();
    assert_eq!(poll_all(&mut p.a, a.cq)[0].status, WcStatus::LocQpOpErr);
}

#[test]
fn misaligned_atomic_is_refused_at_post() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let now = p.now;
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 8)],
        opcode: WrOpcode::AtomicFetchAndAdd,
        atomic: AtomicTarget {
            remote_addr: b.mem.addr() + 4,
            rkey: b.key,
            compare_add: 1,
            swap: 0,
        },
        ..Default::default()
    };
    let err = p.a.post_send(now, a.qpn, &[wr]).unwrap_err();
    assert!(err.message.contains("not 8-byte aligned"), "{}", err.message);
}

// ---------------- post-time errors ----------------

#[test]
fn post_time_errors_name_what_was_wrong() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let now = p.now;
    let cases: Vec<(SendWr<'static>, &str)> = vec![
        (
            SendWr {
                sg_list: Box::leak(Box::new([Sge {
                    addr: a.mem.addr(),
                    length: 8,
                    lkey: 0xdead00,
                }])),
                ..Default::default()
            },
            "names no registered MR",
        ),
        (
            SendWr {
                sg_list: Box::leak(Box::new([Sge {
                    addr: a.mem.addr() + MR_LEN as u64 - 4,
                    length: 8,
                    lkey: a.key,
                }])),
                ..Default::default()
            },
            "outside its MR",
        ),
        (
            SendWr { sg_list: Box::leak(Box::new([sge(&a, 0, 1); 5])), ..Default::default() },
            "exceed max_send_sge 4",
        ),
        (
            SendWr {
                opcode: WrOpcode::RdmaRead,
                send_flags: SendFlags::INLINE,
                ..Default::default()
            },
            "IBV_SEND_INLINE is not valid",
        ),
    ];
    for (wr, want) in cases {
        let err = p.a.post_send(now, a.qpn, &[wr]).unwrap_err();
        assert_eq!(err.errno, Errno::Inval);
        assert!(err.message.contains(want), "{} does not say {want}", err.message);
        assert!(err.message.contains("wr[0]"), "{}", err.message);
    }
    // Wrong state: a QP in INIT cannot send.
    let cq = p.a.create_cq(4).unwrap();
    let (q, _) = p.a.create_qp(a.pd, QpType::Rc, cq, cq, QpCap::default(), false).unwrap();
    let err = p.a.post_send(now, q, &[SendWr::default()]).unwrap_err();
    assert!(err.message.contains("is in RESET; ibv_post_send needs RTS"), "{}", err.message);
    let err = p.a.post_recv(q, &[RecvWr::default()]).unwrap_err();
    assert!(err.message.contains("RESET"), "{}", err.message);
    // Queue full.
    let wrs: Vec<_> = (0..65)
        .map(|i| SendWr {
            wr_id: i,
            opcode: WrOpcode::RdmaWrite,
            rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
            ..Default::default()
        })
        .collect();
    p.a.modify_qp(
        now,
        a.qpn,
        &QpAttr { qp_state: QpState::Sqd, ..Default::default() },
        QpAttrMask::STATE,
    )
    .unwrap();
    let err = p.a.post_send(now, a.qpn, &wrs).unwrap_err();
    assert_eq!(err.errno, Errno::NoMem);
    assert!(err.message.contains("wr[64]"), "{}", err.message);
}

#[test]
fn uc_qp_refuses_read_at_post() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let (q, _) =
        p.a.create_qp(
            a.pd,
            QpType::Uc,
            a.cq,
            a.cq,
            QpCap { max_send_wr: 4, ..Default::default() },
            false,
        )
        .unwrap();
    let m =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    p.a.modify_qp(0, q, &QpAttr { qp_state: QpState::Init, port_num: 1, ..Default::default() }, m)
        .unwrap();
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    p.a.modify_qp(
        0,
        q,
        &QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: AhAttr { dlid: 2, ..Default::default() },
            ..Default::default()
        },
        m,
    )
    .unwrap();
    p.a.modify_qp(
        0,
        q,
        &QpAttr { qp_state: QpState::Rts, ..Default::default() },
        QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    )
    .unwrap();
    let err =
        p.a.post_send(0, q, &[SendWr { opcode: WrOpcode::RdmaRead, ..Default::default() }])
            .unwrap_err();
    assert!(err.message.contains("IBV_WR_RDMA_READ is not valid on a Uc QP"), "{}", err.message);
}

#[test]
fn cq_overrun_is_an_error_and_an_async_event() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    let small = p.a.create_cq(2).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (q, _) = p.a.create_qp(a.pd, QpType::Rc, small, small, cap, true).unwrap();
    connect(&mut p.a, q, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, q, ConnOpts::default());
    let wrs: Vec<_> = (0..3)
        .map(|i| SendWr {
            wr_id: i,
            opcode: WrOpcode::RdmaWrite,
            rdma: RdmaTarget { remote_addr: b.mem.addr(), rkey: b.key },
            ..Default::default()
        })
        .collect();
    let now = p.now;
    p.a.post_send(now, q, &wrs).unwrap();
    p.drive();
    let err = p.a.poll_cq(small, &mut [WorkCompletion::default(); 4]).unwrap_err();
    assert!(err.message.contains("overrun"), "{}", err.message);
    assert_eq!(
        p.a.poll_event(),
        Some(NicEvent::Async(AsyncEvent {
            event_type: AsyncEventType::CqErr,
            element: AsyncElement::Cq(small as u64)
        }))
    );
}

#[test]
fn destroy_in_use_is_ebusy() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    assert_eq!(p.a.destroy_cq(a.cq).unwrap_err().errno, Errno::Busy);
    assert_eq!(p.a.dealloc_pd(a.pd).unwrap_err().errno, Errno::Busy);
    p.a.destroy_qp(a.qpn).unwrap();
    p.a.destroy_cq(a.cq).unwrap();
    assert_eq!(p.a.dealloc_pd(a.pd).unwrap_err().errno, Errno::Busy, "the MR is still registered");
    p.a.dereg_mr(a.key).unwrap();
    p.a.dealloc_pd(a.pd).unwrap();
}

#[test]
fn malformed_and_corrupted_packets_are_dropped() {
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    let now = p.now;
    p.a.post_send(
        now,
        a.qpn,
        &[SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 8)], ..Default::default() }],
    )
    .unwrap();
    let mut t = p.a.poll_transmit().unwrap();
    let n = t.data.len();
    t.data[n - 10] ^= 1; // a payload bit flip: the ICRC catches it
    p.b.handle_packet(now, &t.data);
    p.b.handle_packet(now, &t.data[..20]);
    p.b.handle_packet(now, &[]);
    assert_eq!(p.b.stats().rx_bad_icrc, 1);
    assert_eq!(p.b.stats().rx_malformed, 3);
    assert!(p.b.poll_transmit().is_none());
    assert!(poll_all(&mut p.b, b.cq).is_empty());
}

// ---------------- UC and UD ----------------

fn uc_pair() -> (Pair, Side, Side, u32, u32) {
    let (p, a, b, qa, qb, _) = uc_pair_with(false);
    (p, a, b, qa, qb)
}

/// Two connected UC QPs; with `srq_b`, B's QP takes its receives from a new SRQ (returned).
fn uc_pair_with(srq_b: bool) -> (Pair, Side, Side, u32, u32, Option<u32>) {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
    };
    let (qa, _) = p.a.create_qp(a.pd, QpType::Uc, a.cq, a.cq, cap, true).unwrap();
    let (qb, _) = p.b.create_qp(b.pd, QpType::Uc, b.cq, b.cq, cap, true).unwrap();
    let srq = srq_b.then(|| {
        let srq = p.b.create_srq(b.pd, 8, 2, 0).unwrap();
        p.b.attach_srq(qb, srq).unwrap();
        srq
    });
    for (nic, q, dlid, dq) in [(&mut p.a, qa, 2, qb), (&mut p.b, qb, 1, qa)] {
        let m = QpAttrMask::STATE
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT
            | QpAttrMask::ACCESS_FLAGS;
        nic.modify_qp(
            0,
            q,
            &QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qp_access_flags: AccessFlags::REMOTE_WRITE,
                ..Default::default()
            },
            m,
        )
        .unwrap();
        let m = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN;
        let a = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: AhAttr { dlid, ..Default::default() },
            path_mtu: Mtu::Mtu256,
            dest_qp_num: dq,
            rq_psn: 5,
            ..Default::default()
        };
        nic.modify_qp(0, q, &a, m).unwrap();
        nic.modify_qp(
            0,
            q,
            &QpAttr { qp_state: QpState::Rts, sq_psn: 5, ..Default::default() },
            QpAttrMask::STATE | QpAttrMask::SQ_PSN,
        )
        .unwrap();
    }
    (p, a, b, qa, qb, srq)
}

#[test]
fn uc_send_and_write_complete_without_acks() {
    let (mut p, a, b, qa, qb) = uc_pair();
    a.mem.write(0, &pattern(600, 4)).unwrap();
    p.b.post_recv(qb, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 1024)] }]).unwrap();
    let now = p.now;
    let send = SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 600)], ..Default::default() };
    let write = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 0, 300)],
        opcode: WrOpcode::RdmaWriteWithImm,
        imm_data: 9,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 4096, rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, qa, &[send, write]).unwrap();
    // The sender completes as soon as the packets are out.
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, WcOpcode::Send), (2, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    p.b.post_recv(qb, &[RecvWr { wr_id: 2, sg_list: &[] }]).unwrap();
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![
            Opcode::UC_SEND_FIRST,
            Opcode::UC_SEND_MIDDLE,
            Opcode::UC_SEND_LAST,
            Opcode::UC_RDMA_WRITE_FIRST,
            Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE
        ]
    );
    assert!(p.opcodes(Dir::BtoA).is_empty(), "UC sends no ACKs");
    assert_eq!(read_mem(&b, 0, 600), pattern(600, 4));
    assert_eq!(read_mem(&b, 4096, 300), pattern(300, 4));
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.opcode, w.byte_len, w.src_qp)).collect::<Vec<_>>(),
        vec![(1, WcOpcode::Recv, 600, qa), (2, WcOpcode::RecvRdmaWithImm, 300, qa)]
    );
}

#[test]
fn uc_gap_loses_the_message_silently_and_the_next_one_arrives() {
    let (mut p, a, b, qa, qb) = uc_pair();
    a.mem.write(0, &pattern(600, 1)).unwrap();
    a.mem.write(1000, b"second").unwrap();
    p.b.post_recv(qb, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 1024)] }]).unwrap();
    p.filter =
        Box::new(
            |_, pkt, _| {
                if pkt.bth.opcode == Opcode::UC_SEND_MIDDLE {
                    Fate::Drop
                } else {
                    Fate::Deliver
                }
            },
        );
    let now = p.now;
    p.a.post_send(
        now,
        qa,
        &[
            SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 600)], ..Default::default() },
            SendWr { wr_id: 2, sg_list: &[sge(&a, 1000, 6)], ..Default::default() },
        ],
    )
    .unwrap();
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB).len(), 4, "nothing is retransmitted");
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(wc.len(), 1, "the first message was lost");
    assert_eq!((wc[0].wr_id, wc[0].byte_len), (1, 6), "its receive WQE took the next message");
    assert_eq!(read_mem(&b, 0, 6), b"second");
    assert_eq!(p.b.stats().dropped_messages, 1);
}

#[test]
fn uc_qp_takes_its_receives_from_an_srq() {
    let (mut p, a, b, qa, qb, srq) = uc_pair_with(true);
    let srq = srq.expect("B's QP has an SRQ");
    let e = p.b.post_recv(qb, &[RecvWr { wr_id: 9, sg_list: &[sge(&b, 0, 64)] }]).unwrap_err();
    assert!(e.message.contains("use ibv_post_srq_recv"), "{}", e.message);
    p.b.post_srq_recv(
        srq,
        &[
            RecvWr { wr_id: 11, sg_list: &[sge(&b, 0, 1024)] },
            RecvWr { wr_id: 12, sg_list: &[sge(&b, 1024, 1024)] },
            RecvWr { wr_id: 13, sg_list: &[sge(&b, 2048, 1024)] },
        ],
    )
    .unwrap();
    p.b.modify_srq(srq, None, Some(2)).unwrap();
    a.mem.write(0, &pattern(600, 7)).unwrap();
    a.mem.write(1000, b"after the gap").unwrap();
    // The first SEND (3 packets at MTU 256) loses its middle packet: the message is lost and
    // the SRQ WQE it had started to fill goes back to the head of the SRQ.
    p.filter = Box::new(|_, pkt, _| match pkt.bth.opcode {
        Opcode::UC_SEND_MIDDLE => Fate::Drop,
        _ => Fate::Deliver,
    });
    let now = p.now;
    let lost = SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 600)], ..Default::default() };
    let send = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 1000, 13)],
        opcode: WrOpcode::SendWithImm,
        imm_data: 0x51,
        ..Default::default()
    };
    let write = SendWr {
        wr_id: 3,
        sg_list: &[sge(&a, 0, 300)],
        opcode: WrOpcode::RdmaWriteWithImm,
        imm_data: 0x52,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 8192, rkey: b.key },
        ..Default::default()
    };
    p.a.post_send(now, qa, &[lost, send, write]).unwrap();
    p.drive();
    let wc = poll_all(&mut p.b, b.cq);
    let recv = |wr_id, opcode, byte_len, imm_data| WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode,
        byte_len,
        imm_data,
        qp_num: qb,
        src_qp: qa,
        wc_flags: WcFlags::WITH_IMM,
        slid: 1,
        ..Default::default()
    };
    assert_eq!(
        wc,
        vec![recv(11, WcOpcode::Recv, 13, 0x51), recv(12, WcOpcode::RecvRdmaWithImm, 300, 0x52)]
    );
    assert_eq!(read_mem(&b, 0, 13), b"after the gap");
    assert_eq!(read_mem(&b, 8192, 300), pattern(300, 7));
    assert_eq!(p.b.stats().dropped_messages, 1);
    // Two of three WQEs consumed: one is left, below the limit of 2.
    assert_eq!(
        p.b.poll_event(),
        Some(NicEvent::Async(AsyncEvent {
            event_type: AsyncEventType::SrqLimitReached,
            element: AsyncElement::Srq(srq as u64)
        }))
    );
    assert_eq!(p.b.query_srq(srq).unwrap(), (8, 2, 0), "the limit disarmed after firing");
    assert_eq!(p.b.destroy_srq(srq).unwrap_err().errno, Errno::Busy);
    p.b.destroy_qp(qb).unwrap();
    p.b.destroy_qp(b.qpn).unwrap();
    p.b.dereg_mr(b.key).unwrap();
    let e = p.b.dealloc_pd(b.pd).unwrap_err();
    assert_eq!(e.errno, Errno::Busy, "the SRQ is still in the PD");
    assert!(e.message.contains("1 SRQs"), "{}", e.message);
    p.b.destroy_srq(srq).unwrap();
    p.b.dealloc_pd(b.pd).unwrap();
}

#[test]
fn srq_and_qp_must_share_a_pd() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let other_pd = p.a.alloc_pd().unwrap();
    let srq = p.a.create_srq(other_pd, 4, 1, 0).unwrap();
    let e = p.a.attach_srq(a.qpn, srq).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains("must be the same"), "{}", e.message);
}

struct TestAh(AhAttr);
impl verbs_api::provider::AhOps for TestAh {
    fn attr(&self) -> AhAttr {
        self.0
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

fn ud_qp(nic: &mut Nic, s: &Side, qkey: u32) -> u32 {
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (q, _) = nic.create_qp(s.pd, QpType::Ud, s.cq, s.cq, cap, true).unwrap();
    let m = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    nic.modify_qp(
        0,
        q,
        &QpAttr { qp_state: QpState::Init, port_num: 1, qkey, ..Default::default() },
        m,
    )
    .unwrap();
    nic.modify_qp(
        0,
        q,
        &QpAttr { qp_state: QpState::Rtr, ..Default::default() },
        QpAttrMask::STATE,
    )
    .unwrap();
    nic.modify_qp(
        0,
        q,
        &QpAttr { qp_state: QpState::Rts, sq_psn: 1, ..Default::default() },
        QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    )
    .unwrap();
    q
}

/// Two NICs with one UD QP each (Q_Keys 0x1111 and 0x2222): (pair, a, b, a's QPN, b's QPN).
fn ud_pair() -> (Pair, Side, Side, u32, u32) {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    let qa = ud_qp(&mut p.a, &a, 0x1111);
    let qb = ud_qp(&mut p.b, &b, 0x2222);
    (p, a, b, qa, qb)
}

#[test]
fn ud_datagrams_carry_deth_and_land_after_a_grh() {
    let (mut p, a, b, qa, qb) = ud_pair();
    let ah = verbs_api::AddressHandle::from_ops(Arc::new(TestAh(AhAttr {
        dlid: 2,
        ..Default::default()
    })));
    p.b.post_recv(
        qb,
        &[
            RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 2048)] },
            RecvWr { wr_id: 2, sg_list: &[sge(&b, 4096, 2048)] },
        ],
    )
    .unwrap();
    a.mem.write(0, b"datagram").unwrap();
    let wr = |id, qkey| SendWr {
        wr_id: id,
        sg_list: &[],
        opcode: WrOpcode::SendWithImm,
        imm_data: 3,
        ud: Some(UdTarget { ah: ah.clone(), remote_qpn: qb, remote_qkey: qkey }),
        ..Default::default()
    };
    let sg = [sge(&a, 0, 8)];
    let now = p.now;
    p.a.post_send(
        now,
        qa,
        &[SendWr { sg_list: &sg, ..wr(1, 0x2222) }, SendWr { sg_list: &sg, ..wr(2, 0x9999) }],
    )
    .unwrap();
    p.drive();
    assert_eq!(
        p.opcodes(Dir::AtoB),
        vec![Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE]
    );
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc,
        vec![WorkCompletion {
            wr_id: 1,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 48,
            imm_data: 3,
            qp_num: qb,
            src_qp: qa,
            wc_flags: WcFlags::GRH | WcFlags::WITH_IMM,
            slid: 1,
            ..Default::default()
        }],
        "the datagram with the wrong Q_Key was dropped"
    );
    assert_eq!(read_mem(&b, 40, 8), b"datagram");
    let grh = read_mem(&b, 0, 40);
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!(grh[20] >> 4, 4, "an IPv4 header follows");
    assert_eq!(&grh[32..40], &[10, 0, 0, 1, 10, 0, 0, 2], "source and destination addresses");
    assert_eq!(p.b.stats().dropped_messages, 1);
    // Larger than the MTU is refused at post time.
    let big = [sge(&a, 0, 5000)];
    let err = p.a.post_send(now, qa, &[SendWr { sg_list: &big, ..wr(3, 0x2222) }]).unwrap_err();
    assert!(err.message.contains("exceeds the path MTU"), "{}", err.message);
    // Without an address handle is refused too.
    let err = p.a.post_send(now, qa, &[SendWr { sg_list: &sg, ..Default::default() }]).unwrap_err();
    assert!(err.message.contains("needs wr.ud"), "{}", err.message);
}

// ---------------- regressions the simulator's UC properties found ----------------

/// Regression (found by the simulator's UC property suite): a UC packet the network duplicated
/// was taken for a new message, so the message was delivered twice. A PSN behind the expected
/// one is dropped.
#[test]
fn uc_duplicated_packets_are_delivered_once() {
    let (mut p, a, b, qa, qb) = uc_pair();
    a.mem.write(0, &pattern(600, 7)).unwrap();
    for id in 1..=3 {
        p.b.post_recv(qb, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 1024 * id, 1024)] }]).unwrap();
    }
    p.filter = Box::new(|_, _, _| Fate::Duplicate);
    let now = p.now;
    let wrs = [
        SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 3)], ..Default::default() },
        SendWr { wr_id: 2, sg_list: &[sge(&a, 0, 600)], ..Default::default() },
    ];
    p.a.post_send(now, qa, &wrs).unwrap();
    p.drive();
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, 3), (2, WcStatus::Success, 600)],
        "each message once"
    );
    assert_eq!(read_mem(&b, 2048, 600), pattern(600, 7));
    assert_eq!(p.b.stats().rx_duplicates, 4, "the copy of every packet was dropped");
}

/// Regression (same origin): a UC message's packet that arrives after a later message has
/// started is a straggler; it is dropped rather than delivered out of order (or taken as a gap
/// that loses the later message).
#[test]
fn uc_late_packet_of_an_earlier_message_is_dropped() {
    let (mut p, a, b, qa, qb) = uc_pair();
    a.mem.write(0, b"firstsecond").unwrap();
    for id in 1..=2 {
        p.b.post_recv(qb, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 1024 * id, 64)] }]).unwrap();
    }
    // The first message (its one packet) is overtaken by the second.
    p.filter = Box::new(|_, _, i| if i == 0 { Fate::Delay(10_000) } else { Fate::Deliver });
    let now = p.now;
    let wrs = [
        SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 5)], ..Default::default() },
        SendWr { wr_id: 2, sg_list: &[sge(&a, 5, 6)], ..Default::default() },
    ];
    p.a.post_send(now, qa, &wrs).unwrap();
    p.drive();
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, 6)],
        "the second message only, in the first receive"
    );
    assert_eq!(read_mem(&b, 1024, 6), b"second");
    assert_eq!(p.b.stats().rx_duplicates, 1);
}

// ---------------- transmit buffers ----------------

#[test]
fn a_recycled_buffer_carries_the_next_datagram_and_nothing_stale() {
    let (mut p, a, b) = setup(ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() });
    let write = |wr_id: u64, off: u64| SendWr {
        wr_id,
        sg_list: &[],
        opcode: WrOpcode::RdmaWrite,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + off, rkey: b.key },
        ..Default::default()
    };
    let long = pattern(900, 1);
    a.mem.write(0, &long).unwrap();
    let sg = [sge(&a, 0, 900)];
    p.a.post_send(p.now, a.qpn, &[SendWr { sg_list: &sg, ..write(1, 0) }]).unwrap();
    let first = p.a.poll_transmit().expect("the WRITE is sent at once");
    let reused = first.data.as_ptr();
    p.b.handle_packet(p.now, &first.data);
    p.a.recycle(first.data);

    // A shorter datagram in the same buffer: its own length, a valid ICRC, its own bytes.
    let short = pattern(20, 2);
    a.mem.write(1000, &short).unwrap();
    let sg = [sge(&a, 1000, 20)];
    p.a.post_send(p.now, a.qpn, &[SendWr { sg_list: &sg, ..write(2, 2000) }]).unwrap();
    let second = p.a.poll_transmit().expect("the second WRITE is sent at once");
    assert_eq!(second.data.as_ptr(), reused, "the transmit reused the recycled buffer");
    let (_, pkt) = packet::parse_datagram(&second.data).expect("a whole, valid datagram");
    assert_eq!(pkt.payload, &short[..]);
    assert_eq!(second.data.len(), packet::datagram_len(&pkt));
    p.b.handle_packet(p.now, &second.data);
    assert_eq!(read_mem(&b, 0, 900), long);
    assert_eq!(read_mem(&b, 2000, 20), short);

    // Buffers larger than any datagram are not kept.
    let huge = Vec::with_capacity(1 << 20);
    let huge_ptr = huge.as_ptr();
    p.a.recycle(huge);
    p.a.post_send(p.now, a.qpn, &[SendWr { sg_list: &sg, ..write(3, 3000) }]).unwrap();
    let third = p.a.poll_transmit().expect("the third WRITE is sent at once");
    assert_ne!(third.data.as_ptr(), huge_ptr);
    p.b.handle_packet(p.now, &third.data);
    p.drive();
    let wc = poll_all(&mut p.a, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(read_mem(&b, 3000, 20), short);
}

#[test]
fn an_sg_list_reads_back_as_posted_whatever_its_length() {
    let s = |i: u64| Sge { addr: 0x1000 * i, length: i as u32, lkey: 7 };
    for n in 0..4u64 {
        let posted: Vec<Sge> = (1..=n).map(s).collect();
        let list = qp::SgList::from(&posted[..]);
        assert_eq!(&list[..], &posted[..], "{n} SGEs");
        assert_eq!(matches!(list, qp::SgList::One(_)), n == 1, "one SGE is kept inline");
    }
    assert!(qp::SgList::default().is_empty());
}

// ---------------- payload length against the path MTU ----------------

/// A requester on a larger path MTU than its responder sends packets the responder must not
/// take: an RC responder NAKs them (invalid request) and enters ERR, so the requester's WR
/// fails with REM_INV_REQ_ERR and nothing is written past what the MTU allows.
#[test]
fn rc_packets_longer_than_the_responders_mtu_are_invalid_requests() {
    for (len, what) in [(600u32, "an ONLY packet over the MTU"), (1500, "a FIRST packet")] {
        let mut p = Pair::new();
        let a = side(&mut p.a, ALL);
        let b = side(&mut p.b, ALL);
        connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() });
        connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts { mtu: Mtu::Mtu256, ..ConnOpts::default() });
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: 9, sg_list: &[sge(&b, 0, 4096)] }]).unwrap();
        a.mem.write(0, &pattern(len as usize, 3)).unwrap();
        let wr = SendWr {
            wr_id: 1,
            sg_list: &[sge(&a, 0, len)],
            send_flags: signaled(),
            ..Default::default()
        };
        post_send(&mut p, &a, wr);
        p.drive();
        assert!(
            p.log.iter().any(|s| s.dir == Dir::BtoA && s.aeth == Some(0x61)),
            "{what}: NAK invalid request"
        );
        let wc = poll_all(&mut p.a, a.cq);
        assert_eq!(
            wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(1, WcStatus::RemInvReqErr)],
            "{what}"
        );
        assert_eq!(p.b.stats().rx_bad_length, 1, "{what}");
        assert_eq!(p.b.qp_state(b.qpn), Some(QpState::Err), "{what}");
        assert_eq!(
            poll_all(&mut p.b, b.cq).iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(9, WcStatus::WrFlushErr)],
            "{what}: the receive is flushed, not filled"
        );
        assert_eq!(read_mem(&b, 0, 16), vec![0; 16], "{what}: nothing landed");
    }
}

/// A UC packet whose payload breaks the MTU rules is dropped with its message (UC has no
/// NAK); the next message arrives normally.
#[test]
fn uc_packets_that_break_the_mtu_lose_their_message() {
    let (mut p, _, b, _, qb) = uc_pair();
    for id in 1..=2 {
        p.b.post_recv(qb, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 1024 * id, 1024)] }]).unwrap();
    }
    // Forged by hand: UC SEND ONLY packets from A at B's expected PSNs, on a 256-byte path.
    let forge = |psn: u32, payload: &[u8]| {
        let bth = packet::Bth {
            opcode: Opcode::UC_SEND_ONLY,
            pkey: 0xFFFF,
            dest_qp: qb,
            psn: packet::Psn::new(psn),
            ..Default::default()
        };
        let ip = packet::IpUdp { src: ip_of_lid(1), dst: ip_of_lid(2), ..Default::default() };
        let mut bytes = Vec::new();
        packet::emit_datagram(&ip, &packet::Packet::new(bth, payload), &mut bytes).unwrap();
        bytes
    };
    let now = p.now;
    p.b.handle_packet(now, &forge(5, &pattern(300, 1)));
    assert_eq!(p.b.stats().rx_bad_length, 1);
    assert!(poll_all(&mut p.b, b.cq).is_empty(), "nothing delivered");
    // The next message arrives whole, in the receive the dropped one did not take.
    p.b.handle_packet(now, &forge(6, b"after"));
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.byte_len, w.qp_num)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success, 5, qb)]
    );
    assert_eq!(read_mem(&b, 1024, 5), b"after");
}

#[test]
fn inline_data_reads_back_as_posted_whatever_its_length() {
    for len in [0, 1, 8, qp::INLINE_IN_WQE - 1, qp::INLINE_IN_WQE, qp::INLINE_IN_WQE + 1, 256] {
        let posted = pattern(len, 3);
        let copied = qp::InlineData::from(&posted[..]);
        assert_eq!(&copied[..], &posted[..], "{len} bytes");
        let in_wqe = matches!(copied, qp::InlineData::InWqe { .. });
        assert_eq!(in_wqe, len <= qp::INLINE_IN_WQE, "{len} bytes: kept in the WQE or not");
        let filled = qp::InlineData::filled(len, |buf| -> Result<()> {
            assert_eq!(buf.len(), len, "the buffer to fill is exactly the length asked for");
            assert!(buf.iter().all(|&b| b == 0), "and starts zeroed");
            buf.copy_from_slice(&posted);
            Ok(())
        })
        .unwrap();
        assert_eq!(&filled[..], &posted[..], "{len} bytes, filled");
        let failed = qp::InlineData::filled(len, |_| Err(Error::inval("no")));
        assert_eq!(failed.map(|_| ()).unwrap_err().message, "no", "a failed fill is an error");
    }
}

#[test]
fn inline_sends_of_every_size_arrive_whole() {
    let mut p = Pair::new();
    let a = side_with_inline(&mut p.a, ALL, 200);
    let b = side_with_inline(&mut p.b, ALL, 200);
    connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
    connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
    let sizes = [8, qp::INLINE_IN_WQE, qp::INLINE_IN_WQE + 1, 200];
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, i as u8);
        let at = 1000 * i;
        // From `inline_data`, and gathered from two SGEs; both copied at post time.
        a.mem.write(at, &data).unwrap();
        let half = (len / 2) as u32;
        let sges =
            [sge(&a, at as u64, half), sge(&a, (at as u64) + u64::from(half), len as u32 - half)];
        let rsge = |off: u64| [sge(&b, off, 256)];
        p.b.post_recv(
            b.qpn,
            &[RecvWr { wr_id: 2 * i as u64, sg_list: &rsge(20_000 + 512 * 2 * i as u64) }],
        )
        .unwrap();
        p.b.post_recv(
            b.qpn,
            &[RecvWr {
                wr_id: 2 * i as u64 + 1,
                sg_list: &rsge(20_000 + 512 * (2 * i as u64 + 1)),
            }],
        )
        .unwrap();
        let wrs = [
            SendWr {
                wr_id: 2 * i as u64,
                inline_data: Some(&data),
                send_flags: SendFlags::INLINE | signaled(),
                ..Default::default()
            },
            SendWr {
                wr_id: 2 * i as u64 + 1,
                sg_list: &sges,
                send_flags: SendFlags::INLINE | signaled(),
                ..Default::default()
            },
        ];
        p.a.post_send(p.now, a.qpn, &wrs).unwrap();
        a.mem.write(at, &vec![0xEE; len]).unwrap();
        p.drive();
        let sent = poll_all(&mut p.a, a.cq);
        let received = poll_all(&mut p.b, b.cq);
        for k in 0..2u64 {
            let wr_id = 2 * i as u64 + k;
            let s = sent.iter().find(|w| w.wr_id == wr_id).expect("send completion");
            assert_eq!(
                (s.status, s.opcode, s.byte_len),
                (WcStatus::Success, WcOpcode::Send, len as u32)
            );
            let r = received.iter().find(|w| w.wr_id == wr_id).expect("receive completion");
            assert_eq!(
                (r.status, r.opcode, r.byte_len),
                (WcStatus::Success, WcOpcode::Recv, len as u32)
            );
            assert_eq!(r.qp_num, b.qpn);
            assert_eq!(
                read_mem(&b, 20_000 + 512 * wr_id as usize, len),
                data,
                "{len} bytes, wr {wr_id}"
            );
        }
    }
    // More than max_inline_data is refused at post time, whichever way it is given.
    let big = vec![1u8; 201];
    a.mem.write(0, &big).unwrap();
    let too_long = [
        SendWr { inline_data: Some(&big), send_flags: SendFlags::INLINE, ..Default::default() },
        SendWr { sg_list: &[sge(&a, 0, 201)], send_flags: SendFlags::INLINE, ..Default::default() },
    ];
    for wr in too_long {
        let err = p.a.post_send(p.now, a.qpn, &[wr]).unwrap_err();
        assert_eq!(err.errno, Errno::Inval);
        assert!(
            err.message.contains("201 bytes of inline data exceed max_inline_data 200"),
            "{}",
            err.message
        );
    }
}

#[test]
fn a_connected_qp_ignores_wr_ud() {
    // libibverbs reads wr.ud only on UD QPs; on RC it is ignored and the SEND takes the
    // connection (it used to be routed by the address handle and emitted with a DETH).
    let (mut p, a, b) = setup(ConnOpts::default());
    let elsewhere = verbs_api::AddressHandle::from_ops(Arc::new(TestAh(AhAttr {
        dlid: 7,
        ..Default::default()
    })));
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 5, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    a.mem.write(0, b"connected").unwrap();
    post_send(
        &mut p,
        &a,
        SendWr {
            wr_id: 9,
            sg_list: &[sge(&a, 0, 9)],
            send_flags: signaled(),
            ud: Some(UdTarget { ah: elsewhere, remote_qpn: 0x99, remote_qkey: 1 }),
            ..Default::default()
        },
    );
    p.drive();
    assert_eq!(p.opcodes(Dir::AtoB), vec![Opcode::RC_SEND_ONLY]);
    let sent = poll_all(&mut p.a, a.cq);
    assert_eq!((sent.len(), sent[0].wr_id, sent[0].status), (1, 9, WcStatus::Success));
    let received = poll_all(&mut p.b, b.cq);
    assert_eq!((received.len(), received[0].wr_id, received[0].byte_len), (1, 5, 9));
    assert_eq!(read_mem(&b, 0, 9), b"connected");
}

/// A lazy clock (a real-time host's) is never read on the data path: a received SEND arms
/// nothing, and an ACK that leaves packets in flight restarts the ACK timer unstamped, to be
/// stamped at the host's next look at the clock (`post_with_lazy_clock_arms_…` covers posts).
#[test]
fn a_lazy_clock_is_not_read_on_the_data_path() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let timeout_ns = req::ack_timeout_ns(ConnOpts::default().timeout).unwrap();
    for id in 1..=2 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    a.mem.write(0, b"twice").unwrap();
    let sg = [sge(&a, 0, 5)];
    let send = |id| SendWr { wr_id: id, sg_list: &sg, ..Default::default() };
    let posted_at = p.now;
    p.a.post_send(posted_at, a.qpn, &[SendWr { send_flags: signaled(), ..send(1) }]).unwrap();
    p.a.post_send(posted_at, a.qpn, &[SendWr { send_flags: signaled(), ..send(2) }]).unwrap();
    assert_eq!(p.a.next_timeout(), Some(posted_at + timeout_ns), "armed by the first send");

    // Deliver each datagram with a clock that counts how often it is read.
    let mut reads = 0;
    let mut deliver = |to: &mut Nic, t: Transmit, clock_ns: u64| {
        let mut clock = || {
            reads += 1;
            clock_ns
        };
        to.handle_packet_at(&mut Now::Lazy(&mut clock), &t.data);
    };
    let sends: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(sends.len(), 2);
    let mut acks = Vec::new();
    for t in sends {
        deliver(&mut p.b, t, 1);
        // Drained after each SEND, so that the two ACKs are not coalesced into one.
        acks.extend(std::iter::from_fn(|| p.b.poll_transmit()));
    }
    assert_eq!(acks.len(), 2, "one ACK per message");
    let mut acks = acks.into_iter();
    let first_ack_at = posted_at + 5_000;
    deliver(&mut p.a, acks.next().unwrap(), first_ack_at);
    let second_ack_at = posted_at + 9_000;
    deliver(&mut p.a, acks.next().unwrap(), second_ack_at);
    // The responder armed nothing; the first ACK left send 2 in flight and restarted the
    // timer, unstamped; the last ACK stopped it.
    assert_eq!(reads, 0, "neither the SENDs nor the ACKs read the clock");
    assert_eq!(p.a.next_timeout(), None);
    let sent = poll_all(&mut p.a, a.cq);
    assert_eq!(
        sent.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let received = poll_all(&mut p.b, b.cq);
    assert_eq!(
        received.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(),
        [(1, 5), (2, 5)]
    );

    // A timer restarted by a lazily read time is due a full timeout after that time.
    p.a.post_send(posted_at, a.qpn, &[send(3), send(4)]).unwrap();
    let sends: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 3, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 4, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    p.b.handle_packet(second_ack_at, &sends[0].data);
    let ack = p.b.poll_transmit().expect("the ACK of send 3");
    p.b.handle_packet(second_ack_at, &sends[1].data);
    let mut at_ns = || -> Nanos { panic!("restarting the timer reads no clock") };
    p.a.handle_packet_at(&mut Now::Lazy(&mut at_ns), &ack.data);
    assert_eq!(p.a.next_timeout(), Some(0), "restarted, waiting for its stamp");
    // The host's next timer check stamps it: due a full timeout after that check.
    let checked_at = second_ack_at + 20_000;
    p.a.handle_timeout(checked_at);
    assert_eq!(p.a.next_timeout(), Some(checked_at + timeout_ns));
    assert_eq!(p.a.stats().timeouts, 0);
}

// ---------------- ACK coalescing ----------------

/// Parse a datagram the engine emitted.
fn parsed(t: &Transmit) -> (Opcode, u32, Option<packet::Aeth>) {
    let (_, p) = packet::parse_datagram(&t.data).expect("engines emit valid datagrams");
    (p.bth.opcode, p.bth.psn.value(), p.aeth)
}

#[test]
fn acks_queued_back_to_back_are_coalesced_into_one() {
    let (mut p, a, b) = setup(ConnOpts::default());
    for id in 1..=3 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    a.mem.write(0, b"abc").unwrap();
    for id in 1..=3 {
        let wr = SendWr {
            wr_id: id,
            sg_list: &[sge(&a, id - 1, 1)],
            send_flags: signaled(),
            ..Default::default()
        };
        post_send(&mut p, &a, wr);
    }
    let sends: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(sends.len(), 3);
    for t in &sends {
        p.b.handle_packet(p.now, &t.data);
    }
    // The receives completed before any ACK was built.
    let received = poll_all(&mut p.b, b.cq);
    assert_eq!(
        received.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        [(1, WcStatus::Success, 1), (2, WcStatus::Success, 1), (3, WcStatus::Success, 1)]
    );
    assert_eq!(read_mem(&b, 64, 1), b"a");
    assert_eq!(read_mem(&b, 192, 1), b"c");
    let acks: Vec<Transmit> = std::iter::from_fn(|| p.b.poll_transmit()).collect();
    assert_eq!(acks.len(), 1, "one ACK for the three messages");
    let (opcode, psn, aeth) = parsed(&acks[0]);
    assert_eq!(opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(psn, 0xFFFFF2, "the PSN of the last SEND");
    assert_eq!(aeth, Some(packet::Aeth::ack(3)), "MSN 3: three messages completed");
    assert!(!p.b.has_transmit());
    // The one ACK retires all three sends.
    p.a.handle_packet(p.now, &acks[0].data);
    let sent = poll_all(&mut p.a, a.cq);
    assert_eq!(
        sent.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::Send),
            (3, WcStatus::Success, WcOpcode::Send)
        ]
    );
    assert_eq!(p.a.next_timeout(), None, "nothing left in flight");
}

#[test]
fn an_ack_is_not_coalesced_past_a_response_queued_after_it() {
    let (mut p, a, b) = setup(ConnOpts::default());
    for id in 1..=2 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    b.mem.write(512, b"read me").unwrap();
    let sg = [sge(&a, 0, 4)];
    let send = |id| SendWr { wr_id: id, sg_list: &sg, ..Default::default() };
    let read = SendWr {
        wr_id: 2,
        sg_list: &[sge(&a, 1024, 7)],
        opcode: WrOpcode::RdmaRead,
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 512, rkey: b.key },
        ..Default::default()
    };
    post_send(&mut p, &a, send(1));
    post_send(&mut p, &a, read);
    post_send(&mut p, &a, SendWr { send_flags: signaled(), ..send(3) });
    let requests: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(requests.len(), 3);
    for t in &requests {
        p.b.handle_packet(p.now, &t.data);
    }
    // The READ response stands between the two ACKs, so neither replaces the other and every
    // response leaves in PSN order.
    let out: Vec<_> = std::iter::from_fn(|| p.b.poll_transmit()).map(|t| parsed(&t)).collect();
    assert_eq!(
        out.iter().map(|(op, psn, _)| (*op, *psn)).collect::<Vec<_>>(),
        [
            (Opcode::RC_ACKNOWLEDGE, 0xFFFFF0),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 0xFFFFF1),
            (Opcode::RC_ACKNOWLEDGE, 0xFFFFF2)
        ]
    );
    assert_eq!(out[0].2, Some(packet::Aeth::ack(1)));
    assert_eq!(out[2].2, Some(packet::Aeth::ack(3)));
}

// ---------------- the GRH on the wire ----------------

/// The IPv4 TOS and TTL of a datagram.
fn tos_ttl(t: &Transmit) -> (u8, u8) {
    let (ip, _) = packet::parse_datagram(&t.data).expect("engines emit valid datagrams");
    (ip.tos, ip.ttl)
}

#[test]
fn the_grh_traffic_class_and_hop_limit_are_the_ipv4_tos_and_ttl() {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let b = side(&mut p.b, ALL);
    // Each side's address vector names the other with its own GRH values, as each program
    // would; the LID-addressed default has none.
    connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts { grh: Some((3, 0x28)), ..ConnOpts::default() });
    connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts { grh: Some((9, 0x10)), ..ConnOpts::default() });
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    post_send(&mut p, &a, SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 8)], ..Default::default() });
    let send = p.a.poll_transmit().expect("the SEND");
    assert_eq!(tos_ttl(&send), (0x28, 3), "the requester's packets carry its vector's GRH");
    p.b.handle_packet(p.now, &send.data);
    let ack = p.b.poll_transmit().expect("the ACK");
    assert_eq!(parsed(&ack).0, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(tos_ttl(&ack), (0x10, 9), "the responder's ACK carries the responder's vector's");
    p.a.handle_packet(p.now, &ack.data);
    assert_eq!(poll_all(&mut p.b, b.cq)[0].status, WcStatus::Success);

    // Without a GRH: TOS 0 and TTL 64, for requests and ACKs alike.
    let (mut p, a, b) = setup(ConnOpts::default());
    p.b.post_recv(b.qpn, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 64)] }]).unwrap();
    post_send(&mut p, &a, SendWr { wr_id: 1, sg_list: &[sge(&a, 0, 8)], ..Default::default() });
    let send = p.a.poll_transmit().expect("the SEND");
    assert_eq!(tos_ttl(&send), qp::DEFAULT_TOS_TTL);
    p.b.handle_packet(p.now, &send.data);
    assert_eq!(tos_ttl(&p.b.poll_transmit().expect("the ACK")), qp::DEFAULT_TOS_TTL);
}

#[test]
fn a_ud_datagram_carries_its_address_handles_grh_to_the_receivers_grh_area() {
    let (mut p, a, b, qa, qb) = ud_pair();
    let ah = verbs_api::AddressHandle::from_ops(Arc::new(TestAh(AhAttr {
        is_global: true,
        dgid: Gid::from_ipv4(ip_of_lid(2)),
        hop_limit: 7,
        traffic_class: 0xB8,
        port_num: 1,
        ..Default::default()
    })));
    p.b.post_recv(qb, &[RecvWr { wr_id: 1, sg_list: &[sge(&b, 0, 2048)] }]).unwrap();
    a.mem.write(0, b"tclass").unwrap();
    let now = p.now;
    let wr = SendWr {
        wr_id: 1,
        sg_list: &[sge(&a, 0, 6)],
        ud: Some(UdTarget { ah, remote_qpn: qb, remote_qkey: 0x2222 }),
        ..Default::default()
    };
    p.a.post_send(now, qa, &[wr]).unwrap();
    let t = p.a.poll_transmit().expect("the datagram");
    assert_eq!(tos_ttl(&t), (0xB8, 7));
    p.b.handle_packet(now, &t.data);
    let wc = poll_all(&mut p.b, b.cq);
    assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 46));
    // The receive buffer's 40-byte GRH area ends with the IPv4 header: TOS at byte 1 of it,
    // TTL at byte 8.
    let grh = read_mem(&b, 0, 40);
    assert_eq!((grh[21], grh[28]), (0xB8, 7));
    assert_eq!(read_mem(&b, 40, 6), b"tclass");
}

// ---------------- a host's wire ----------------

/// A wire to one port (by LID) that records what it takes, or refuses everything while
/// `full` is set.
#[derive(Clone, Default)]
struct FakeWire {
    to: u16,
    sent: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    full: Arc<std::sync::atomic::AtomicBool>,
}

impl Wire for FakeWire {
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> WireOutcome {
        assert_eq!(lid_of_ip(dst), self.to, "every datagram here goes to the other side");
        if self.full.load(std::sync::atomic::Ordering::Relaxed) {
            return WireOutcome::Full;
        }
        self.sent.lock().unwrap().push(datagram.to_vec());
        WireOutcome::Sent
    }
}

impl FakeWire {
    fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

#[test]
fn small_datagrams_go_straight_onto_a_lent_wire_and_queue_when_it_is_full() {
    let (mut p, a, b) = setup(ConnOpts::default());
    let wire = FakeWire { to: 2, ..FakeWire::default() };
    p.a.set_wire(Some(Box::new(wire.clone())));
    for id in 1..=4 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 64 * id, 64)] }]).unwrap();
    }
    a.mem.write(0, b"abcd").unwrap();
    let send =
        |id: u64| SendWr { wr_id: id, sg_list: &[], send_flags: signaled(), ..Default::default() };
    // On the wire at once, with the bytes the queue would have had; nothing queued.
    post_send(&mut p, &a, SendWr { sg_list: &[sge(&a, 0, 1)], ..send(1) });
    assert!(!p.a.has_transmit());
    let on_wire = wire.take();
    assert_eq!(on_wire.len(), 1);
    let (ip, pkt) = packet::parse_datagram(&on_wire[0]).expect("a valid datagram");
    assert_eq!(
        (pkt.bth.opcode, pkt.bth.psn.value(), pkt.payload),
        (Opcode::RC_SEND_ONLY, 0xFFFFF0, &b"a"[..])
    );
    assert_eq!((ip.src, ip.dst), (ip_of_lid(1), ip_of_lid(2)));
    assert_eq!(p.a.stats().tx_packets, 1);

    // Full: the SEND is queued, and the next one queues behind it though the wire has room.
    wire.full.store(true, std::sync::atomic::Ordering::Relaxed);
    post_send(&mut p, &a, SendWr { sg_list: &[sge(&a, 1, 1)], ..send(2) });
    wire.full.store(false, std::sync::atomic::Ordering::Relaxed);
    post_send(&mut p, &a, SendWr { sg_list: &[sge(&a, 2, 1)], ..send(3) });
    assert!(wire.take().is_empty(), "nothing overtakes a queued datagram");
    let queued: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(queued.iter().map(|t| parsed(t).1).collect::<Vec<_>>(), [0xFFFFF1, 0xFFFFF2]);
    // A paused wire (the host holds refused datagrams) queues too.
    p.a.pause_wire(true);
    post_send(&mut p, &a, SendWr { sg_list: &[sge(&a, 3, 1)], ..send(4) });
    assert!(wire.take().is_empty());
    let paused: Vec<Transmit> = std::iter::from_fn(|| p.a.poll_transmit()).collect();
    assert_eq!(paused.len(), 1);
    p.a.pause_wire(false);
    assert_eq!(p.a.stats().tx_packets, 4, "each datagram counted once, whichever way it went");

    // Every SEND arrives once, in order; the receiver completes all four.
    for d in
        on_wire.iter().chain(queued.iter().map(|t| &t.data)).chain(paused.iter().map(|t| &t.data))
    {
        p.b.handle_packet(p.now, d);
    }
    let got = poll_all(&mut p.b, b.cq);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(),
        [(1, 1), (2, 1), (3, 1), (4, 1)]
    );
    assert_eq!(read_mem(&b, 64 * 4, 1), b"d");
}

#[test]
fn acks_on_a_lent_wire_go_one_by_one_and_a_large_datagram_takes_the_queue() {
    let (mut p, a, b) = setup(ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() });
    let wire = FakeWire { to: 1, ..FakeWire::default() };
    p.b.set_wire(Some(Box::new(wire.clone())));
    for id in 1..=3 {
        p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(&b, 2048 * id, 1024)] }])
            .unwrap();
    }
    for id in 1..=2 {
        post_send(
            &mut p,
            &a,
            SendWr { wr_id: id, sg_list: &[sge(&a, 0, 8)], ..Default::default() },
        );
    }
    for t in std::iter::from_fn(|| p.a.poll_transmit()).collect::<Vec<_>>() {
        p.b.handle_packet(p.now, &t.data);
    }
    // Emitted as they were made: none is left in a queue to be replaced by the next.
    let acks = wire.take();
    assert_eq!(acks.len(), 2);
    for (ack, psn) in acks.iter().zip([0xFFFFF0, 0xFFFFF1]) {
        let (_, pkt) = packet::parse_datagram(ack).expect("a valid ACK");
        assert_eq!((pkt.bth.opcode, pkt.bth.psn.value()), (Opcode::RC_ACKNOWLEDGE, psn));
    }
    assert!(!p.b.has_transmit());
    // B's own message of 1 KiB is over the direct size: it takes the queue.
    p.a.post_recv(a.qpn, &[RecvWr { wr_id: 9, sg_list: &[sge(&a, 4096, 1024)] }]).unwrap();
    let now = p.now;
    p.b.post_send(
        now,
        b.qpn,
        &[SendWr { wr_id: 7, sg_list: &[sge(&b, 0, 1000)], ..Default::default() }],
    )
    .unwrap();
    assert!(wire.take().is_empty());
    let big = p.b.poll_transmit().expect("queued");
    assert_eq!(big.data.len(), 20 + 8 + 12 + 1000 + 4);
}

// ---------------- the post fast path ----------------

/// One generated send WR for the fast-path property test.
#[derive(Clone, Debug)]
struct GenWr {
    opcode: WrOpcode,
    len: u32,
    /// 0: gather list; 1: IBV_SEND_INLINE from the gather list; 2: `inline_data`.
    inline: u8,
    flags: SendFlags,
    imm: u32,
    /// 0: good keys; 1: a bad lkey; 2: an extra zero-length SGE with a bad lkey.
    keys: u8,
}

fn gen_wr() -> impl proptest::strategy::Strategy<Value = GenWr> {
    use proptest::prelude::*;
    let opcode = prop_oneof![
        4 => Just(WrOpcode::Send),
        2 => Just(WrOpcode::SendWithImm),
        2 => Just(WrOpcode::RdmaWrite),
        2 => Just(WrOpcode::RdmaWriteWithImm),
        1 => Just(WrOpcode::RdmaRead),
    ];
    let len = prop_oneof![4 => 0u32..=72, 1 => 0u32..=400];
    let flags = (any::<bool>(), any::<bool>(), proptest::bool::weighted(0.1)).prop_map(
        |(signaled, solicited, fence)| {
            let mut f = SendFlags::empty();
            f.set(SendFlags::SIGNALED, signaled);
            f.set(SendFlags::SOLICITED, solicited);
            f.set(SendFlags::FENCE, fence);
            f
        },
    );
    let keys = prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
    (opcode, len, 0u8..3, flags, any::<u32>(), keys).prop_map(
        |(opcode, len, inline, flags, imm, keys)| GenWr { opcode, len, inline, flags, imm, keys },
    )
}

/// Posts `w` on `p.a` and returns the outcome as text (errors are compared by message).
fn post_gen(p: &mut Pair, a: &Side, b: &Side, w: &GenWr, wr_id: u64) -> String {
    let data = pattern(w.len as usize, wr_id as u8);
    a.mem.write(4096, &data).unwrap();
    let lkey = if w.keys == 1 { a.key ^ 0x100 } else { a.key };
    let mut sges = vec![Sge { addr: a.mem.addr() + 4096, length: w.len, lkey }];
    if w.keys == 2 {
        sges.push(Sge { addr: a.mem.addr(), length: 0, lkey: a.key ^ 0x200 });
    }
    let mut flags = w.flags;
    if w.inline == 1 {
        flags |= SendFlags::INLINE;
    }
    let wr = SendWr {
        wr_id,
        sg_list: if w.inline == 2 { &[] } else { &sges },
        inline_data: (w.inline == 2).then_some(&data[..]),
        opcode: w.opcode,
        send_flags: flags,
        imm_data: w.imm,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 8192, rkey: b.key },
        ..Default::default()
    };
    let now = p.now;
    format!("{:?}", p.a.post_send(now, a.qpn, &[wr]))
}

/// The send queue of `qp` as text, with addresses relative to their MRs (two pairs' MRs lie
/// at different addresses).
fn wqes(qp: &Qp, a: &Side, b: &Side) -> String {
    let (la, lb) = (a.mem.addr(), b.mem.addr());
    let rel = |addr: u64, base: u64| addr.wrapping_sub(base);
    let list: Vec<String> = qp
        .sq
        .iter()
        .map(|w| {
            let sges: Vec<_> = w.sges.iter().map(|s| (rel(s.addr, la), s.length, s.lkey)).collect();
            let inline = w.inline.as_deref().map(<[u8]>::to_vec);
            format!(
                "{} {:?} sig={} se={} fence={} sges={sges:?} inline={inline:?} len={} \
                 rdma=({:#x}, {:#x}) imm={:#x} psn={:?} npsn={} started={}",
                w.wr_id,
                w.opcode,
                w.signaled,
                w.solicited,
                w.fence,
                w.len,
                rel(w.rdma.remote_addr, lb),
                w.rdma.rkey,
                w.imm,
                w.first_psn,
                w.npsn,
                w.started
            )
        })
        .collect();
    list.join("\n")
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]
    /// The fast path (`req::post_now`, taken when the NIC has a wire to send on) and the
    /// general path (the same NIC with no wire lent) agree on everything a WR leads to: the
    /// post's result, the datagrams to the byte, the queue and requester state, and, after the
    /// exchange, every completion on both sides and the bytes that landed.
    #[test]
    fn the_post_fast_path_does_what_the_general_path_does(
        wrs in proptest::collection::vec(gen_wr(), 1..12)
    ) {
        // The two pairs share their MRs' memory, so that addresses (in SGEs and RETHs, and so
        // in datagrams) are the same in both.
        let (mem_a, mem_b) = (MrMemory::allocate(MR_LEN).unwrap(), MrMemory::allocate(MR_LEN).unwrap());
        let pair = || {
            let mut p = Pair::new();
            let a = side_on_memory(&mut p.a, ALL, 64, mem_a.clone());
            let b = side_on_memory(&mut p.b, ALL, 64, mem_b.clone());
            connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
            connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
            (p, a, b)
        };
        let (mut fast, fa, fb) = pair();
        let (mut slow, sa, sb) = pair();
        let wire = FakeWire { to: 2, ..FakeWire::default() };
        fast.a.set_wire(Some(Box::new(wire.clone())));
        for (p, b) in [(&mut fast, &fb), (&mut slow, &sb)] {
            for id in 0..32 {
                p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(b, 16384 + 512 * id, 512)] }])
                    .unwrap();
            }
        }
        for (i, w) in wrs.iter().enumerate() {
            let id = i as u64 + 1;
            let got = post_gen(&mut fast, &fa, &fb, w, id);
            let want = post_gen(&mut slow, &sa, &sb, w, id);
            proptest::prop_assert_eq!(&got, &want, "post result of {:?}", w);
            let mut fast_out = wire.take();
            fast_out.extend(std::iter::from_fn(|| fast.a.poll_transmit()).map(|t| t.data));
            let slow_out: Vec<Vec<u8>> =
                std::iter::from_fn(|| slow.a.poll_transmit()).map(|t| t.data).collect();
            proptest::prop_assert_eq!(&fast_out, &slow_out, "datagrams of {:?}", w);
            let (fq, sq) = (&fast.a.qps[&fa.qpn], &slow.a.qps[&sa.qpn]);
            proptest::prop_assert_eq!(wqes(fq, &fa, &fb), wqes(sq, &sa, &sb));
            proptest::prop_assert_eq!(format!("{:?}", fq.req), format!("{:?}", sq.req));
            proptest::prop_assert_eq!(fast.a.next_timeout(), slow.a.next_timeout());
            // Deliver them, and the responses, on both pairs alike.
            for (p, out) in [(&mut fast, fast_out), (&mut slow, slow_out)] {
                let now = p.now;
                for d in out {
                    p.b.handle_packet(now, &d);
                }
                while let Some(t) = p.b.poll_transmit() {
                    p.a.handle_packet(now, &t.data);
                }
                p.a.set_wire(None);
                while let Some(t) = p.a.poll_transmit() {
                    p.b.handle_packet(now, &t.data);
                }
                while let Some(t) = p.b.poll_transmit() {
                    p.a.handle_packet(now, &t.data);
                }
            }
            fast.a.set_wire(Some(Box::new(wire.clone())));
            let key = |w: &WorkCompletion| (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data, w.wc_flags, w.qp_num != 0);
            let fw: Vec<_> = poll_all(&mut fast.a, fa.cq).iter().chain(poll_all(&mut fast.b, fb.cq).iter()).map(key).collect();
            let sw: Vec<_> = poll_all(&mut slow.a, sa.cq).iter().chain(poll_all(&mut slow.b, sb.cq).iter()).map(key).collect();
            // (The bytes that land follow: the same datagrams reach responders in the same
            // state; the other engine tests check what lands.)
            proptest::prop_assert_eq!(fw, sw, "completions after {:?}", w);
        }
    }
}

// ---------------- the responder's fast path ----------------

/// What happens to one of the requester's datagrams on its way to the responders.
#[derive(Clone, Copy, Debug)]
enum Way {
    Deliver,
    Drop,
    Twice,
    /// One byte changed (at this index modulo the length).
    Damage(usize),
    /// Held back and delivered after the others of its batch.
    Late,
}

/// The datagrams `sent` as they arrive, each after what the next of `ways` says befalls it
/// (delivered when `ways` runs out); late ones arrive after the others.
fn befall(
    sent: impl Iterator<Item = Vec<u8>>,
    ways: &mut impl Iterator<Item = Way>,
) -> Vec<Vec<u8>> {
    let mut arriving = Vec::new();
    let mut late = Vec::new();
    for d in sent {
        match ways.next().unwrap_or(Way::Deliver) {
            Way::Deliver => arriving.push(d),
            Way::Drop => {}
            Way::Twice => {
                arriving.push(d.clone());
                arriving.push(d);
            }
            Way::Damage(at) => {
                let mut d = d;
                let at = at % d.len();
                d[at] ^= 0x20;
                arriving.push(d);
            }
            Way::Late => late.push(d),
        }
    }
    arriving.extend(late);
    arriving
}

fn gen_way() -> impl proptest::strategy::Strategy<Value = Way> {
    use proptest::prelude::*;
    prop_oneof![
        12 => Just(Way::Deliver),
        1 => Just(Way::Drop),
        1 => Just(Way::Twice),
        1 => any::<usize>().prop_map(Way::Damage),
        1 => Just(Way::Late),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// The responder's fast path (`resp::receive_send_only`, taken by `handle_packet_at`) and
    /// the general one (`handle_packet_general`) do the same with whatever arrives: SENDs of
    /// one packet and of several, with and without immediate data, into receives big enough
    /// and too small, or none; lost, repeated, damaged and late datagrams, and the requester's
    /// retransmissions. Two responders, identical but for the path, see the same datagrams;
    /// what they send back, every completion, what lands in their memory, their counters and
    /// their responder state must be the same.
    #[test]
    fn the_receive_fast_path_does_what_the_general_path_does(
        steps in proptest::collection::vec(
            (
                0u32..600,
                proptest::option::of(proptest::prelude::any::<u32>()),
                0u8..3,
                proptest::sample::select(vec![64u32, 700, 4]),
                proptest::collection::vec(gen_way(), 0..8),
            ),
            1..10,
        )
    ) {
        let (mut p, a, fb) = setup(ConnOpts::default());
        // The general-path responder: made exactly as the pair's, so it has the same QPN.
        let mut slow = Nic::new(NicConfig::new("b", 2));
        let sb = side(&mut slow, ALL);
        proptest::prop_assert_eq!(sb.qpn, fb.qpn);
        connect(&mut slow, sb.qpn, 1, a.qpn, ConnOpts::default());
        let mut next_recv = 0u64;
        for (i, (len, imm, recvs, recv_len, ways)) in steps.iter().enumerate() {
            // Receives, the same on both responders.
            for _ in 0..*recvs {
                let off = 1024 * (next_recv % 32);
                for (nic, s) in [(&mut p.b, &fb), (&mut slow, &sb)] {
                    nic.post_recv(s.qpn, &[RecvWr { wr_id: next_recv, sg_list: &[sge(s, off, *recv_len)] }])
                        .unwrap();
                }
                next_recv += 1;
            }
            let data = pattern(*len as usize, i as u8);
            a.mem.write(0, &data).unwrap();
            let sg = [sge(&a, 0, *len)];
            let wr = SendWr {
                wr_id: i as u64,
                sg_list: &sg,
                opcode: if imm.is_some() { WrOpcode::SendWithImm } else { WrOpcode::Send },
                imm_data: imm.unwrap_or(0),
                send_flags: signaled(),
                ..Default::default()
            };
            let now = p.now;
            p.a.post_send(now, a.qpn, &[wr]).unwrap();
            // A retransmission now and then: the ACK timer, already due.
            if i % 3 == 2 {
                p.now += 1 << 30;
                p.a.handle_timeout(p.now);
            }
            let sent = std::iter::from_fn(|| p.a.poll_transmit()).map(|t| t.data);
            let arriving = befall(sent, &mut ways.iter().copied());
            let now = p.now;
            for d in &arriving {
                p.b.handle_packet_at(&mut Now::At(now), d);
                slow.handle_packet_general(&mut Now::At(now), d);
            }
            let fast_out: Vec<Vec<u8>> = std::iter::from_fn(|| p.b.poll_transmit()).map(|t| t.data).collect();
            let slow_out: Vec<Vec<u8>> = std::iter::from_fn(|| slow.poll_transmit()).map(|t| t.data).collect();
            proptest::prop_assert_eq!(&fast_out, &slow_out, "what the responders sent, step {}", i);
            let fw = poll_all(&mut p.b, fb.cq);
            let sw = poll_all(&mut slow, sb.cq);
            proptest::prop_assert_eq!(&fw, &sw, "receive completions, step {}", i);
            proptest::prop_assert_eq!(p.b.stats(), slow.stats());
            // The responder state, with addresses made relative to the MR (the two
            // responders' memories lie at different addresses).
            let resp = |r: &qp::RespState, base: u64| {
                let recv = r.recv.as_ref().map(|(w, off)| {
                    let sges: Vec<_> =
                        w.sges.iter().map(|s| (s.addr - base, s.length, s.lkey)).collect();
                    (w.wr_id, sges, w.len, *off)
                });
                (r.epsn, r.msn, r.nak_sent, recv, r.write.is_some(), r.resources.len(), r.drop_msg)
            };
            proptest::prop_assert_eq!(
                resp(&p.b.qps[&fb.qpn].resp, fb.mem.addr()),
                resp(&slow.qps[&sb.qpn].resp, sb.mem.addr())
            );
            proptest::prop_assert_eq!(p.b.qps[&fb.qpn].rq.len(), slow.qps[&sb.qpn].rq.len());
            proptest::prop_assert_eq!(read_mem(&fb, 0, 32 * 1024), read_mem(&sb, 0, 32 * 1024));
            // The requester hears the fast responder.
            for d in fast_out {
                p.a.handle_packet(now, &d);
            }
            let _ = poll_all(&mut p.a, a.cq);
        }
    }
}

// ---------------- the completer's fast path ----------------

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// The completer's fast path (`comp::handle_acknowledge`, which `handle_packet_at` takes
    /// for an RC ACKNOWLEDGE read by `packet::peek_rc_acknowledge`) and the general one
    /// (`handle_packet_general`) do the same with whatever the responder sends back: ACKs, RNR
    /// NAKs (no receive posted), NAKs (a bad rkey), READ responses among them; lost, repeated,
    /// damaged and late, with the ACK timer firing now and then. Two requesters, identical
    /// but for the path, post the same WRs and get the same responses; what they send, every
    /// completion, the bytes READs bring back, their counters, send queues, requester state
    /// and timers must be the same.
    #[test]
    fn the_acknowledge_fast_path_does_what_the_general_path_does(
        steps in proptest::collection::vec(
            (
                proptest::sample::select(vec![0u8, 0, 0, 1, 2, 2, 3, 3, 4]),
                0u32..600,
                0u8..3,
                proptest::collection::vec(gen_way(), 0..8),
            ),
            1..10,
        )
    ) {
        let opts = ConnOpts { rnr_retry: 2, retry_cnt: 3, ..Default::default() };
        let (mut p, fa, b) = setup(opts);
        // The general-path requester: made exactly as the pair's, so it has the same QPN.
        let mut slow = Nic::new(NicConfig::new("a", 1));
        let sa = side(&mut slow, ALL);
        proptest::prop_assert_eq!(sa.qpn, fa.qpn);
        connect(&mut slow, sa.qpn, 2, b.qpn, opts);
        let mut recv_id = 0u64;
        for (i, (op, len, recvs, ways)) in steps.iter().enumerate() {
            for _ in 0..*recvs {
                let off = 1024 * (recv_id % 16);
                p.b.post_recv(b.qpn, &[RecvWr { wr_id: recv_id, sg_list: &[sge(&b, off, 1024)] }])
                    .unwrap();
                recv_id += 1;
            }
            let data = pattern(*len as usize, i as u8);
            let (opcode, rkey) = match op {
                0 => (WrOpcode::Send, b.key),
                1 => (WrOpcode::SendWithImm, b.key),
                2 => (WrOpcode::RdmaWrite, b.key),
                3 => (WrOpcode::RdmaRead, b.key),
                _ => (WrOpcode::RdmaWrite, b.key ^ 0x100),
            };
            let now = p.now;
            let mut posted = Vec::new();
            for (nic, s) in [(&mut p.a, &fa), (&mut slow, &sa)] {
                s.mem.write(0, &data).unwrap();
                let local = if opcode == WrOpcode::RdmaRead { 16384 + 1024 * (i as u64 % 16) } else { 0 };
                let sg = [sge(s, local, *len)];
                let wr = SendWr {
                    wr_id: i as u64,
                    sg_list: &sg,
                    opcode,
                    imm_data: i as u32,
                    send_flags: signaled(),
                    rdma: RdmaTarget { remote_addr: b.mem.addr() + 32768, rkey },
                    ..Default::default()
                };
                posted.push(format!("{:?}", nic.post_send(now, s.qpn, &[wr])));
            }
            proptest::prop_assert_eq!(&posted[0], &posted[1], "post results, step {}", i);
            // Rounds of: what the requesters send (the same), the responder's answers to it,
            // and those answers, after what befalls them on the way, to both requesters.
            let mut way = ways.iter().copied();
            for round in 0..4 {
                if round == 2 && i % 3 == 2 {
                    // The ACK timer (or the RNR back-off), due by now.
                    p.now += 1 << 30;
                    let now = p.now;
                    p.a.handle_timeout(now);
                    slow.handle_timeout(now);
                }
                let fast_out: Vec<Vec<u8>> = std::iter::from_fn(|| p.a.poll_transmit()).map(|t| t.data).collect();
                let slow_out: Vec<Vec<u8>> = std::iter::from_fn(|| slow.poll_transmit()).map(|t| t.data).collect();
                proptest::prop_assert_eq!(&fast_out, &slow_out, "what the requesters sent, step {} round {}", i, round);
                let now = p.now;
                for d in &fast_out {
                    p.b.handle_packet(now, d);
                }
                let sent = std::iter::from_fn(|| p.b.poll_transmit()).map(|t| t.data);
                let arriving = befall(sent, &mut way);
                for d in &arriving {
                    p.a.handle_packet_at(&mut Now::At(now), d);
                    slow.handle_packet_general(&mut Now::At(now), d);
                }
                let fw = poll_all(&mut p.a, fa.cq);
                let sw = poll_all(&mut slow, sa.cq);
                proptest::prop_assert_eq!(&fw, &sw, "completions, step {} round {}", i, round);
                proptest::prop_assert_eq!(p.a.stats(), slow.stats());
                let (fq, sq) = (&p.a.qps[&fa.qpn], &slow.qps[&sa.qpn]);
                proptest::prop_assert_eq!(fq.state, sq.state);
                proptest::prop_assert_eq!(wqes(fq, &fa, &b), wqes(sq, &sa, &b));
                proptest::prop_assert_eq!(format!("{:?}", fq.req), format!("{:?}", sq.req));
                proptest::prop_assert_eq!(p.a.next_timeout(), slow.next_timeout());
                proptest::prop_assert_eq!(read_mem(&fa, 16384, 16384), read_mem(&sa, 16384, 16384));
            }
            let _ = poll_all(&mut p.b, b.cq);
        }
    }
}
