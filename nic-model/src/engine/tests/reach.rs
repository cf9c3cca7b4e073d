//! Direct reach against packets, as a property: an RDMA WRITE, READ or atomic that a requester
//! does in the responder's memory (`engine::reach`, through an egress that reaches as a soft
//! device's does, over the facts the responder publishes) ends as the same WR sent as packets
//! ends: the post's result, every completion, both QPs' states and the bytes in both sides'
//! memory, whatever the responder's access flags and resources, the key, the range and the MR,
//! and whether the two ends agree on PSNs and path MTUs.

use std::sync::atomic::AtomicU32;
use std::sync::Mutex;

use super::*;
use crate::wire::reach::Reached;

/// What the responder published: its QPs' facts, and its MRs' with their memory's address.
type Published = (Vec<QpFacts>, Vec<(MrRights, u64)>);

/// An egress that reaches the responder's memory from what it published, checked by
/// [`ReachAsk::check`] as `wire::reach` does, and does the operation there with the soft
/// backend's own `soft::reach::place`; it refuses every datagram (`Full`), so packets queue
/// for the [`Pair`] to carry.
#[derive(Clone, Default)]
struct ReachEgress {
    published: Arc<Mutex<Published>>,
    users: Arc<AtomicU32>,
}

impl ReachEgress {
    /// Publishes what `nic` (the responder) would: its QPs and the MRs `keys` name.
    fn publish(&self, nic: &Nic, keys: &[u32]) {
        let mut g = self.published.lock().unwrap();
        nic.qp_facts(&mut g.0);
        g.1 = keys
            .iter()
            .filter_map(|&k| nic.hca.mrs.get(k))
            .map(|mr| (MrRights::of(mr), mr.memory.addr()))
            .collect();
    }
}

impl Egress for ReachEgress {
    fn send(&mut self, _dst: [u8; 4], _datagram: &[u8]) -> SendOutcome {
        SendOutcome::Full
    }

    fn reach(&mut self, _dst: [u8; 4], ask: &ReachAsk, op: &ReachOp<'_>) -> Option<u64> {
        let g = self.published.lock().unwrap();
        let qp = g.0.iter().find(|f| f.qpn == ask.dest_qpn)?;
        let mr = g.1.iter().find(|(m, _)| m.key == ask.request.rkey).copied();
        self.users.fetch_add(2, std::sync::atomic::Ordering::SeqCst);
        let mut r = Reached::new(&self.users);
        r.len = ask.request.len as usize;
        r.ptr = match ask.check(qp, mr.as_ref().map(|(m, _)| m))? {
            Grant::Nothing => std::ptr::NonNull::dangling().as_ptr(),
            Grant::At(at) => (mr?.1 + at) as *mut u8,
        };
        Some(crate::soft::reach::place(&r, op))
    }

    fn reaches(&self) -> bool {
        true
    }
}

/// One generated WR.
#[derive(Clone, Debug)]
struct GenOp {
    /// 0: WRITE; 1: READ; 2: compare-and-swap; 3: fetch-and-add.
    op: u8,
    len: u32,
    /// 0 and 1: inside the MR; 2: over its end; 3: before its start; 4: 4 bytes off (an
    /// atomic's alignment).
    at: u8,
    /// 0 and 1: the MR; 2: a bad key; 3: an MR without REMOTE_WRITE and REMOTE_ATOMIC; 4: an
    /// MR of another PD.
    key: u8,
    seed: u8,
}

fn gen_op() -> impl proptest::strategy::Strategy<Value = GenOp> {
    use proptest::prelude::*;
    let len = prop_oneof![3 => 1u32..=64, 1 => Just(0u32), 1 => 65u32..=600];
    (0u8..4, len, 0u8..5, 0u8..5, any::<u8>()).prop_map(|(op, len, at, key, seed)| GenOp {
        op,
        len,
        at,
        key,
        seed,
    })
}

/// Where the responder's MRs start (the same in both pairs, so that messages naming addresses
/// are the same): its main one, a read-only one, one of another PD.
const MAIN: u64 = 0x30_0000;
const READ_ONLY: u64 = 0x10_0000;
const OTHER_PD: u64 = 0x20_0000;

/// A pair whose responder lets its QP do `access` with `rd` READ/atomic resources, and has an
/// MR at [`MAIN`] (the responder side's `mem`), a read-only one and one of another PD; the
/// requester reaches if `reach`. Returns the pair, the sides, the responder's three keys and
/// the egress.
fn reach_pair(
    access: AccessFlags,
    rd: u8,
    reach: bool,
    ends: &Ends,
) -> (Pair, Side, Side, [u32; 3], ReachEgress) {
    let mut p = Pair::new();
    let a = side(&mut p.a, ALL);
    let mut b = side(&mut p.b, ALL);
    b.key = p.b.reg_mr(b.pd, b.mem.clone(), MAIN, ALL).unwrap();
    let local = AccessFlags::LOCAL_WRITE;
    let ro = p.b.reg_mr(
        b.pd,
        MrMemory::allocate(4096).unwrap(),
        0x10_0000,
        local | AccessFlags::REMOTE_READ,
    );
    let other_pd = p.b.alloc_pd().unwrap();
    let other = p.b.reg_mr(other_pd, MrMemory::allocate(4096).unwrap(), OTHER_PD, ALL);
    let psn = ConnOpts::default().psns.0;
    let a_psns = (psn.wrapping_add(ends.psn_off as u32) & 0xFF_FFFF, psn);
    connect(
        &mut p.a,
        a.qpn,
        2,
        b.qpn,
        ConnOpts { mtu: ends.mtus.0, psns: a_psns, ..Default::default() },
    );
    connect(
        &mut p.b,
        b.qpn,
        1,
        a.qpn,
        ConnOpts { access, max_rd_atomic: rd, mtu: ends.mtus.1, ..Default::default() },
    );
    let egress = ReachEgress::default();
    if reach {
        p.a.set_egress(Some(Box::new(egress.clone())));
    }
    let keys = [b.key, ro.unwrap(), other.unwrap()];
    (p, a, b, keys, egress)
}

/// How the two ends were set up: the requester's first PSN this far from the responder's
/// expected one, and the path MTUs (requester's, responder's).
#[derive(Clone, Debug)]
struct Ends {
    psn_off: i32,
    mtus: (Mtu, Mtu),
}

fn gen_ends() -> impl proptest::strategy::Strategy<Value = Ends> {
    use proptest::prelude::*;
    let psn_off = prop_oneof![6 => Just(0), 1 => Just(0x100), 1 => Just(-3)];
    let mtu = || proptest::sample::select(vec![Mtu::Mtu256, Mtu::Mtu512]);
    let mtus = prop_oneof![4 => mtu().prop_map(|m| (m, m)), 2 => (mtu(), mtu())];
    (psn_off, mtus).prop_map(|(psn_off, mtus)| Ends { psn_off, mtus })
}

/// Posts `g` on the pair's requester and runs the pair until idle; the post's result.
fn run_op(p: &mut Pair, a: &Side, keys: &[u32; 3], g: &GenOp, id: u64) -> String {
    let atomic = g.op >= 2;
    let len = if atomic { 8 } else { g.len };
    a.mem.write(4096, &pattern(len as usize, g.seed)).unwrap();
    let (base, mr_len) = match g.key {
        3 => (READ_ONLY, 4096),
        4 => (OTHER_PD, 4096),
        _ => (MAIN, MR_LEN as u64),
    };
    let va = match g.at {
        0 | 1 => base + 8 * u64::from(g.seed),
        2 => base + mr_len - u64::from(len / 2) / 8 * 8,
        3 => base - 8,
        _ => base + 4,
    };
    let rkey = match g.key {
        0 | 1 => keys[0],
        2 => keys[0] ^ 0x100,
        3 => keys[1],
        _ => keys[2],
    };
    let sg = [sge(a, 4096, len)];
    let wr = SendWr {
        wr_id: id,
        sg_list: &sg,
        opcode: match g.op {
            0 => WrOpcode::RdmaWrite,
            1 => WrOpcode::RdmaRead,
            2 => WrOpcode::AtomicCmpAndSwp,
            _ => WrOpcode::AtomicFetchAndAdd,
        },
        send_flags: signaled(),
        rdma: RdmaTarget { remote_addr: va, rkey },
        atomic: AtomicTarget { remote_addr: va, rkey, compare_add: u64::from(g.seed), swap: id },
        ..Default::default()
    };
    let now = p.now;
    let result = format!("{:?}", p.a.post_send(now, a.qpn, &[wr]));
    p.drive();
    result
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Direct reach and packets end every WR alike; and a WR every rule allows is reached.
    #[test]
    fn direct_reach_does_what_packets_do(
        access in 0u32..8,
        rd in proptest::sample::select(vec![0u8, 4]),
        ops in proptest::collection::vec(gen_op(), 1..8),
        ends in gen_ends(),
    ) {
        let access = AccessFlags::from_bits_truncate(access << 1); // REMOTE_WRITE, _READ, _ATOMIC
        let (mut fast, fa, fb, fkeys, egress) = reach_pair(access, rd, true, &ends);
        let (mut slow, sa, sb, skeys, _) = reach_pair(access, rd, false, &ends);
        for (i, g) in ops.iter().enumerate() {
            let id = i as u64 + 1;
            egress.publish(&fast.b, &fkeys);
            let reached = fast.a.stats().reached;
            let idle = fast.a.qps[&fa.qpn].state == QpState::Rts && fast.a.qps[&fa.qpn].sq.is_empty();
            let got = run_op(&mut fast, &fa, &fkeys, g, id);
            let want = run_op(&mut slow, &sa, &skeys, g, id);
            proptest::prop_assert_eq!(&got, &want, "post result of {:?}", g);
            let key = |w: &WorkCompletion| (w.wr_id, w.status, w.opcode, w.byte_len);
            let fw: Vec<_> = poll_all(&mut fast.a, fa.cq).iter().map(key).collect();
            let sw: Vec<_> = poll_all(&mut slow.a, sa.cq).iter().map(key).collect();
            proptest::prop_assert_eq!(&fw, &sw, "completions of {:?}", g);
            proptest::prop_assert_eq!(fast.a.qps[&fa.qpn].state, slow.a.qps[&sa.qpn].state);
            proptest::prop_assert_eq!(fast.b.qps[&fb.qpn].state, slow.b.qps[&sb.qpn].state);
            proptest::prop_assert_eq!(read_mem(&fa, 0, MR_LEN), read_mem(&sa, 0, MR_LEN));
            proptest::prop_assert_eq!(read_mem(&fb, 0, MR_LEN), read_mem(&sb, 0, MR_LEN));
            let len = if g.op >= 2 { 8 } else { g.len };
            let (m0, m1) = (ends.mtus.0.bytes(), ends.mtus.1.bytes());
            let allowed = ends.psn_off == 0
                && (m0 == m1 || g.op >= 2 || len <= m0.min(m1))
                && g.key < 2
                && g.at < 2
                && (g.op == 0 || rd > 0)
                && access.contains(match g.op {
                    0 => AccessFlags::REMOTE_WRITE,
                    1 => AccessFlags::REMOTE_READ,
                    _ => AccessFlags::REMOTE_ATOMIC,
                });
            if idle && allowed {
                proptest::prop_assert_eq!(fast.a.stats().reached, reached + 1, "{:?} reached", g);
            }
        }
    }
}

/// The ends that disagree, each with WRs that every other rule allows: a requester ahead of
/// or behind the responder's expected PSN, path MTUs that differ (messages of one packet under
/// both, and longer). Reach must end each as packets do, and take only what fits.
#[test]
fn ends_that_disagree_end_as_their_packets_do() {
    let all = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let op = |op, len| GenOp { op, len, at: 0, key: 0, seed: 7 };
    let cases = [
        (0x100, (Mtu::Mtu256, Mtu::Mtu256)),
        (-3, (Mtu::Mtu256, Mtu::Mtu256)),
        (0, (Mtu::Mtu256, Mtu::Mtu512)),
        (0, (Mtu::Mtu512, Mtu::Mtu256)),
    ];
    for (psn_off, mtus) in cases {
        for g in [op(0, 600), op(1, 600), op(0, 300), op(1, 300), op(0, 100), op(1, 100), op(3, 8)]
        {
            let ends = Ends { psn_off, mtus };
            let (mut fast, fa, fb, fkeys, egress) = reach_pair(all, 4, true, &ends);
            let (mut slow, sa, sb, skeys, _) = reach_pair(all, 4, false, &ends);
            egress.publish(&fast.b, &fkeys);
            let got = run_op(&mut fast, &fa, &fkeys, &g, 1);
            let want = run_op(&mut slow, &sa, &skeys, &g, 1);
            let what = format!("{ends:?}, {g:?}");
            assert_eq!(got, want, "post result: {what}");
            let key = |w: &WorkCompletion| (w.wr_id, w.status, w.opcode, w.byte_len);
            let fw: Vec<_> = poll_all(&mut fast.a, fa.cq).iter().map(key).collect();
            let sw: Vec<_> = poll_all(&mut slow.a, sa.cq).iter().map(key).collect();
            assert_eq!(fw, sw, "completions: {what}");
            assert_eq!(fast.b.qps[&fb.qpn].state, slow.b.qps[&sb.qpn].state, "{what}");
            assert_eq!(read_mem(&fb, 0, MR_LEN), read_mem(&sb, 0, MR_LEN), "{what}");
            let len = if g.op >= 2 { 8 } else { g.len };
            let fits = psn_off == 0 && (g.op >= 2 || len <= mtus.0.bytes().min(mtus.1.bytes()));
            assert_eq!(fast.a.stats().reached, u64::from(fits), "reached only if it fits: {what}");
        }
    }
}

/// What a reached operation is counted as ([`Traffic::of`]) is what it is on the wire when it
/// goes as packets alone: the packets each way and their datagrams' bytes.
#[test]
fn the_traffic_a_reach_stands_for_is_its_packets() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let all = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let ends = Ends { psn_off: 0, mtus: (Mtu::Mtu256, Mtu::Mtu256) };
    // (Not a WRITE of more than `ack_every` packets: this pair queues every datagram, so the
    // ACK asked for at the 64th packet is replaced by the last one's, which a soft device
    // sends straight out, uncoalesced, as `Traffic::of` counts.)
    let ops = [(0, 0), (0, 1), (0, 64), (0, 256), (0, 257), (0, 3001), (0, 64 * 256)];
    let more = [(1, 0), (1, 3), (1, 256), (1, 3001), (2, 8), (3, 8)];
    for (op, len) in ops.into_iter().chain(more) {
        let (mut p, a, _, keys, _) = reach_pair(all, 4, false, &ends);
        let seen: Arc<[AtomicU64; 4]> = Arc::default();
        let s = seen.clone();
        p.filter = Box::new(move |d, pkt, _| {
            let i = if d == Dir::AtoB { 0 } else { 2 };
            s[i].fetch_add(1, Relaxed);
            s[i + 1].fetch_add(crate::packet::datagram_len(pkt) as u64, Relaxed);
            Fate::Deliver
        });
        let g = GenOp { op, len, at: 0, key: 0, seed: 1 };
        run_op(&mut p, &a, &keys, &g, 1);
        let wc = poll_all(&mut p.a, a.cq);
        assert_eq!(wc[0].status, WcStatus::Success, "{g:?}");
        let get = |i: usize| seen[i].load(Relaxed);
        let wire = Traffic {
            sent_packets: get(0),
            sent_bytes: get(1),
            received_packets: get(2),
            received_bytes: get(3),
        };
        let remote = [RemoteOp::Write, RemoteOp::Read, RemoteOp::Atomic, RemoteOp::Atomic];
        let len = if op >= 2 { 8 } else { len };
        let ack_every = NicConfig::new("a", 1).ack_every;
        assert_eq!(Traffic::of(remote[op as usize], len, 256, ack_every), wire, "{g:?}");
    }
}
