//! A target that waits by polling its memory, as `ib_write_lat` and one-sided protocols do,
//! calls a verb only to post its own WRITE and poll that WRITE's completion: it calls in, but
//! never takes the datagrams that bring the peer's WRITEs. Its NIC thread must serve them at
//! once, not stand by for its program (docs/decisions.md, "A target polling memory"); with
//! direct reach on, the same ping-pong goes without packets. On a shared-memory fabric with
//! reach on and off, and on the in-process one.
//!
//! Its own test binary: the standby interval is made long (`SOFTVERBS_STANDBY_US`, read when
//! the provider is made), so that a WRITE left to the end of a standby is unmistakable.

use std::time::{Duration, Instant};

use softverbs_sim::conn::{connect, ConnOpts, Endpoint};
use softverbs_tests::RcPair;
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(20);
/// The standby interval of this binary's devices: long, so that a WRITE held for a standby
/// cannot pass for a slow wake-up.
const STANDBY: Duration = Duration::from_millis(100);
/// Round trips of the ping-pong, each way.
const ITERS: u64 = 100;
/// The median half round trip a target polling memory must see: far below [`STANDBY`], and
/// above a scheduler tick (4 ms at HZ 250, 10 ms at HZ 100), which on a two-core machine whose
/// cores two busy-polling threads hold can bound a woken NIC thread's wait for a core in a
/// debug build (docs/decisions.md, "A target polling memory"). Typical here: 30–80 µs.
const BOUND: Duration = Duration::from_millis(20);
/// Where each side's peer WRITEs (the word it polls) and where its own WRITE's bytes come from.
const POLLED: usize = 0;
const SOURCE: usize = 64;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Busy-reads `me`'s polled word, calling no verb, until it is `want`; panics after [`WAIT`].
fn poll_memory(me: &Endpoint, want: u64, what: &str) {
    let deadline = Instant::now() + WAIT;
    let mut spins = 0u32;
    while me.mr.read_u64(POLLED).expect("reading the MR") != want {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) {
            assert!(Instant::now() < deadline, "{what}: WRITE {want} never landed");
        }
        std::hint::spin_loop();
    }
}

/// `me` WRITEs `i` (8 bytes) into `peer`'s polled word and polls its CQ for the completion,
/// which must be the WR's, successful, with every field as a WRITE's.
fn write(me: &Endpoint, peer: &Endpoint, i: u64, what: &str) {
    me.mr.write_u64(SOURCE, i).expect("writing the source");
    let sges = [me.mr.sge(SOURCE, 8)];
    let wr = SendWr {
        wr_id: i,
        sg_list: &sges,
        opcode: WrOpcode::RdmaWrite,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: peer.mr.addr() + POLLED as u64, rkey: peer.mr.rkey() },
        ..Default::default()
    };
    me.qp.post_send(&[wr]).expect("post_send");
    let wc = me.cq.poll_n(1, WAIT).expect("the WRITE's completion");
    let want = WorkCompletion {
        wr_id: i,
        status: WcStatus::Success,
        opcode: WcOpcode::RdmaWrite,
        byte_len: 8,
        qp_num: me.qp.qp_num(),
        ..Default::default()
    };
    assert_eq!(wc, vec![want], "{what}: WRITE {i}");
}

/// The ping-pong of `ib_write_lat`: a WRITEs i and polls its memory for b's i; b polls its
/// memory for a's i and WRITEs i back. Returns a's half round trips.
fn ping_pong(a: &Endpoint, b: &Endpoint, what: &str) -> Vec<Duration> {
    std::thread::scope(|s| {
        let b_side = s.spawn(|| {
            for i in 1..=ITERS {
                poll_memory(b, i, what);
                write(b, a, i, what);
            }
        });
        let mut halves = Vec::with_capacity(ITERS as usize);
        for i in 1..=ITERS {
            let start = Instant::now();
            write(a, b, i, what);
            poll_memory(a, i, what);
            halves.push(start.elapsed() / 2);
        }
        b_side.join().expect("b's side");
        halves
    })
}

/// Runs the ping-pong and checks the bytes and the median half round trip.
fn run(a: &Endpoint, b: &Endpoint, what: &str) {
    let mut halves = ping_pong(a, b, what);
    // Both words hold the last WRITE's 8 bytes.
    assert_eq!(a.mr.read_u64(POLLED).unwrap(), ITERS, "{what}");
    assert_eq!(b.mr.read_u64(POLLED).unwrap(), ITERS, "{what}");
    halves.sort();
    let median = halves[halves.len() / 2];
    eprintln!("{what} half round trip: median {median:?}, max {:?}", halves.last().unwrap());
    assert!(
        median < BOUND,
        "{what} a target polling memory: median half round trip {median:?} (standby {STANDBY:?})"
    );
}

#[test]
fn a_target_polling_memory_gets_each_write_without_waiting_for_a_standby() {
    std::env::set_var("SOFTVERBS_STANDBY_US", STANDBY.as_micros().to_string());
    for reach in [true, false] {
        let what = format!("[reach {reach}]");
        let opts = ConnOpts::default();
        let p =
            RcPair::new(&format!("polling_{reach}"), cap(), 4096, &opts, |s| s.set_reach(reach));
        run(&p.a, &p.b, &what);
        // Every WRITE went as the mode says.
        let reached = p.soft.stats("softverbs0").unwrap().nic.reached;
        assert_eq!(reached, if reach { ITERS } else { 0 }, "{what} WRITEs done by reach");
    }
    // Two devices of one process on the in-process fabric: packets only.
    let soft = nic_model::soft::Soft::loopback();
    let (c0, c1) = (soft.open("softverbs0").unwrap(), soft.open("softverbs1").unwrap());
    let a = Endpoint::new(&c0, QpType::Rc, cap(), 64, 4096).unwrap();
    let b = Endpoint::new(&c1, QpType::Rc, cap(), 64, 4096).unwrap();
    let (ia, ib) = (a.info(0x100).unwrap(), b.info(0x200).unwrap());
    let opts = ConnOpts::default();
    connect(&a.qp, 0x100, &ib, &opts).unwrap();
    connect(&b.qp, 0x200, &ia, &opts).unwrap();
    run(&a, &b, "[loopback]");
    assert_eq!(soft.stats("softverbs0").unwrap().nic.reached, 0, "[loopback] no reach");
}
