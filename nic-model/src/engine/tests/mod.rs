//! Engine tests in the quinn-proto `Pair` style: two NICs, a virtual clock, and a wire that can
//! drop, duplicate, delay, damage and record chosen packets ([`Fate`]). This file is the one
//! harness and the helpers every topic shares; each topic has its own file.

use std::collections::VecDeque;
use std::sync::Arc;

use verbs_api::*;

use super::mr::MrMemory;
use super::*;
use crate::packet::{self, Opcode};

mod batch;
mod errors;
mod fast_paths;
mod flush;
mod ipv6;
mod lazy_clock;
mod mtu;
mod rc_ops;
mod rc_recovery;
mod reach;
mod source;
mod srq;
mod transmit;
mod uc;
mod ud;
mod wqe;

/// Which way a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    AtoB,
    BtoA,
}

/// What befalls one packet on its way: the one fault vocabulary of these tests, for the
/// [`Pair`]'s wire (its `filter`) and for datagrams handed over by hand ([`befall`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// It arrives as sent.
    Deliver,
    /// It is lost.
    Drop,
    /// It arrives twice.
    Duplicate,
    /// It arrives this many ns later than it would (by hand: as `Late`).
    Delay(u64),
    /// It arrives with one byte changed (at this index modulo the length).
    Damage(usize),
    /// It is held back and arrives after the others of its batch (the `Pair`: of one step).
    Late,
    /// It arrives from a third port ([`STRANGER_LID`]) instead of its sender, as a stale
    /// connection's retransmission does: the same packet, its IPv4 source changed.
    Stranger,
}

impl Fate {
    /// For a filter: `Drop` the first time it is asked (on this test's thread), `Deliver` after:
    /// drops only the first packet that matches.
    fn drop_first() -> Fate {
        thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
        DONE.with(|d| if d.replace(true) { Fate::Deliver } else { Fate::Drop })
    }
}

/// The datagrams `sent` as they arrive, each after what the next of `fates` says befalls it
/// (delivered when `fates` runs out); late (and delayed) ones arrive after the others.
fn befall(
    sent: impl Iterator<Item = Vec<u8>>,
    fates: &mut impl Iterator<Item = Fate>,
) -> Vec<Vec<u8>> {
    let mut arriving = Vec::new();
    let mut late = Vec::new();
    for d in sent {
        match fates.next().unwrap_or(Fate::Deliver) {
            Fate::Deliver => arriving.push(d),
            Fate::Drop => {}
            Fate::Duplicate => {
                arriving.push(d.clone());
                arriving.push(d);
            }
            Fate::Damage(at) => arriving.push(damaged(d, at)),
            Fate::Stranger => arriving.push(from_stranger(&d)),
            Fate::Late | Fate::Delay(_) => late.push(d),
        }
    }
    arriving.extend(late);
    arriving
}

/// `d` with the byte at `at` (modulo its length) changed.
fn damaged(mut d: Vec<u8>, at: usize) -> Vec<u8> {
    let at = at % d.len();
    d[at] ^= 0x20;
    d
}

/// The LID of the third port that [`Fate::Stranger`] packets come from: neither side's.
const STRANGER_LID: u16 = 3;

/// The datagram `d` (as the engines emit it) as it would arrive from [`STRANGER_LID`]: its
/// IPv4 source changed, checksum and ICRC made right, so that only the address is wrong.
fn from_stranger(d: &[u8]) -> Vec<u8> {
    let (mut ip, pkt) = packet::parse_datagram(d).expect("engines emit valid datagrams");
    ip.src = ip_of_slot(STRANGER_LID);
    let mut out = Vec::new();
    packet::emit_datagram(&ip, &pkt, &mut out).expect("a parsed datagram emits again");
    out
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
        let mut late = Vec::new();
        for dir in [Dir::AtoB, Dir::BtoA] {
            loop {
                let t = match dir {
                    Dir::AtoB => self.a.poll_transmit(),
                    Dir::BtoA => self.b.poll_transmit(),
                };
                let Some(t) = t else { break };
                any = true;
                let (_, _, p) =
                    packet::parse_any_datagram(&t.data).expect("engines emit valid datagrams");
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
                    Fate::Damage(i) => self.in_flight.push_back((at, dir, damaged(t.data, i))),
                    Fate::Stranger => self.in_flight.push_back((at, dir, from_stranger(&t.data))),
                    Fate::Late => late.push((at, dir, t.data)),
                }
            }
        }
        // Delivery is in time order, stable: these arrive after the others due with them.
        self.in_flight.extend(late);
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
    let key = nic.reg_mr(pd, mem.clone(), mem.addr(), access).unwrap();
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
    /// Send from the link-local GID (index 0) to the peer's: RoCE v2 over IPv6.
    ipv6: bool,
    /// The first PSN this side sends (`sq_psn`) and the one it expects (`rq_psn`).
    psns: (u32, u32),
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
            ipv6: false,
            // Near the wrap, so every test crosses it.
            psns: (0xFFFFF0, 0xFFFFF0),
        }
    }
}

/// A RoCE address vector to the port in fabric slot `slot`: its IPv4 GID, from this port's
/// IPv4 GID (index 1), TTL 64.
pub(super) fn roce_av(slot: u16) -> AhAttr {
    AhAttr {
        is_global: true,
        dgid: Gid::from_ipv4(ip_of_slot(slot)),
        sgid_index: GID_INDEX_IPV4 as u8,
        hop_limit: 64,
        port_num: 1,
        ..Default::default()
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
        ah_attr: {
            // Without a chosen GRH, the TTL and TOS most stacks send (64, 0).
            let (hop_limit, traffic_class) = o.grh.unwrap_or((64, 0));
            let av = AhAttr { hop_limit, traffic_class, ..roce_av(dlid) };
            match o.ipv6 {
                false => av,
                true => AhAttr {
                    sgid_index: GID_INDEX_LINK_LOCAL as u8,
                    dgid: gid_entry(ip_of_slot(dlid), GID_INDEX_LINK_LOCAL).expect("entry 0").0,
                    ..av
                },
            }
        },
        path_mtu: o.mtu,
        dest_qp_num: dqpn,
        rq_psn: o.psns.1,
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
        sq_psn: o.psns.0,
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
            ah_attr: roce_av(dlid),
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

// ---------------- what the wire sees ----------------

/// Parse a datagram the engine emitted.
fn parsed(t: &Transmit) -> (Opcode, u32, Option<packet::Aeth>) {
    let (_, _, p) = packet::parse_any_datagram(&t.data).expect("engines emit valid datagrams");
    (p.bth.opcode, p.bth.psn.value(), p.aeth)
}

/// An egress to one port (by LID) that records what it takes, or refuses everything while
/// `full` is set; with `unset_icrc`, it takes datagrams without their ICRC, and records
/// those apart; `busy` is its answer to `peer_busy`.
#[derive(Clone, Default)]
struct FakeEgress {
    to: u16,
    sent: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    full: Arc<std::sync::atomic::AtomicBool>,
    unset_icrc: bool,
    sent_unset: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    /// What [`Egress::peer_busy`] answers: the other side has not read its inbox yet.
    busy: Arc<std::sync::atomic::AtomicBool>,
}

impl Egress for FakeEgress {
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        assert_eq!(slot_of_ip(dst), self.to, "every datagram here goes to the other side");
        if self.full.load(std::sync::atomic::Ordering::Relaxed) {
            return SendOutcome::Full;
        }
        self.sent.lock().unwrap().push(datagram.to_vec());
        SendOutcome::Sent
    }

    fn takes_unset_icrc(&self) -> bool {
        self.unset_icrc
    }

    fn send_without_icrc(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        assert!(self.unset_icrc, "only a wire that takes them gets datagrams without an ICRC");
        assert_eq!(slot_of_ip(dst), self.to, "every datagram here goes to the other side");
        if self.full.load(std::sync::atomic::Ordering::Relaxed) {
            return SendOutcome::Full;
        }
        self.sent_unset.lock().unwrap().push(datagram.to_vec());
        SendOutcome::Sent
    }

    fn peer_busy(&self, dst: [u8; 4]) -> bool {
        assert_eq!(slot_of_ip(dst), self.to, "asked about the QP's own peer");
        self.busy.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl FakeEgress {
    fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }

    fn take_unset(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.sent_unset.lock().unwrap())
    }
}
