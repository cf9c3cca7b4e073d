//! Memory keys as rxe makes them (issue 29, item 10): `index << 8 | key byte`, with a key byte
//! drawn for each registration and indices that start at a random point for each device, so
//! that a program that sends its peer its *own* rkey instead of the peer's fails with
//! `REM_ACCESS_ERR` as on rxe — with direct reach on and off — and no two processes' (or two
//! runs') first MRs share a key. (The simulator draws its keys from the seed: see
//! `sim/tests/sim_backend.rs`.)

use std::collections::BTreeSet;
use std::time::Duration;

use nic_model::soft::Soft;
use softverbs_sim::conn::{ConnOpts, Endpoint};
use softverbs_tests::{FabricDir, Peer, RcPair};
use verbs_api::*;

const PEER: &str = env!("CARGO_BIN_EXE_sv-peer");
const WAIT: Duration = Duration::from_secs(20);

fn cap() -> QpCap {
    QpCap { max_send_wr: 16, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
}

/// A on softverbs0 posts `opcode` of 64 bytes at the start of b's MR, naming it by `rkey`;
/// its completion.
fn one_sided(p: &RcPair, opcode: WrOpcode, rkey: u32) -> WorkCompletion {
    let sges = [p.a.mr.sge(0, 64)];
    let wr = SendWr {
        wr_id: 7,
        sg_list: &sges,
        opcode,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: p.b.mr.addr(), rkey },
        ..Default::default()
    };
    p.a.qp.post_send(&[wr]).expect("post_send");
    p.a.cq.poll_n(1, WAIT).expect("a completion")[0]
}

#[test]
fn a_program_that_sends_its_own_rkey_fails_with_rem_access_err_reach_on_and_off() {
    for reach in [true, false] {
        for opcode in [WrOpcode::RdmaWrite, WrOpcode::RdmaRead] {
            let name = format!("own_rkey_{reach}_{opcode:?}");
            let opts = ConnOpts { retry_cnt: 2, timeout: 12, ..ConnOpts::default() };
            let p = RcPair::new(&name, cap(), 4096, &opts, |soft| soft.set_reach(reach));
            let own = p.a.mr.rkey();
            assert_eq!(p.a.mr.lkey(), own, "lkey = rkey, as rxe makes them");
            p.b.mr.write(0, &[0x11; 64]).unwrap();
            p.a.mr.write(0, &[0x22; 64]).unwrap();
            // The bug: the requester's own rkey with the peer's address.
            let wc = one_sided(&p, opcode, own);
            assert_eq!(
                (wc.wr_id, wc.status, wc.qp_num),
                (7, WcStatus::RemAccessErr, p.a.qp.qp_num()),
                "{name}: {wc:?}"
            );
            assert_eq!(p.b.mr.read_vec(0, 64).unwrap(), vec![0x11; 64], "{name}: nothing landed");
            assert_eq!(p.a.mr.read_vec(0, 64).unwrap(), vec![0x22; 64], "{name}: nothing read");
            assert_eq!(p.a.qp.state().unwrap(), QpState::Err, "{name}");

            // The fix: the peer's rkey.
            let p = RcPair::new(&name, cap(), 4096, &opts, |soft| soft.set_reach(reach));
            p.b.mr.write(0, &[0x11; 64]).unwrap();
            p.a.mr.write(0, &[0x22; 64]).unwrap();
            let wc = one_sided(&p, opcode, p.b.mr.rkey());
            assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success), "{name}: {wc:?}");
            let (landed, at) = match opcode {
                WrOpcode::RdmaWrite => (p.b.mr.read_vec(0, 64).unwrap(), "b"),
                _ => (p.a.mr.read_vec(0, 64).unwrap(), "a"),
            };
            let want = if at == "b" { 0x22 } else { 0x11 };
            assert_eq!(landed, vec![want; 64], "{name}");
        }
    }
}

/// The first MR's key of a device opened from a new soft backend.
fn first_key(soft: &Soft, device: &str) -> (u32, u32) {
    let ctx = soft.open(device).expect("open");
    let pd = ctx.alloc_pd().expect("pd");
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).expect("mr");
    (mr.lkey(), mr.rkey())
}

#[test]
fn first_keys_differ_between_devices_and_runs_of_the_soft_backend() {
    let mut keys = BTreeSet::new();
    for _ in 0..8 {
        let soft = Soft::loopback();
        for device in ["softverbs0", "softverbs1"] {
            let (lkey, rkey) = first_key(&soft, device);
            assert_eq!(lkey, rkey);
            assert_ne!(rkey >> 8, 0, "index 0 is never used");
            keys.insert(rkey);
        }
    }
    assert_eq!(keys.len(), 16, "every run's and device's first key differs: {keys:x?}");
    let bytes: BTreeSet<u32> = keys.iter().map(|k| k & 0xff).collect();
    assert!(bytes.len() > 4, "the key byte varies: {keys:x?}");
}

#[test]
fn first_keys_differ_between_processes() {
    let dir = FabricDir::new("keys_processes");
    let spawn = |name: &str| {
        let args = ["target".to_string(), dir.path().display().to_string()];
        Peer::spawn(name, PEER.as_ref(), &args)
    };
    let mut peers = [spawn("target1"), spawn("target2")];
    let mut keys = BTreeSet::new();
    {
        let soft = Soft::shared_memory(Some(dir.path())).expect("fabric");
        let ctx = soft.open("softverbs0").expect("open");
        let me = Endpoint::new(&ctx, QpType::Rc, cap(), 16, 4096).expect("endpoint");
        keys.insert(me.mr.rkey());
        for (i, peer) in peers.iter_mut().enumerate() {
            let (_, mr) = peer.swap_info(&me.info(0x100 + i as u32).expect("info"), WAIT);
            let (_, rkey) = mr.expect("the target's INFO names its MR");
            keys.insert(rkey);
            peer.expect_line("READY", WAIT);
            peer.send_line("DONE");
            for line in ["CHECKSUM", "COUNTERS", "BYE"] {
                peer.expect_line(line, WAIT);
            }
        }
    }
    for peer in &mut peers {
        peer.wait_success(WAIT);
    }
    assert_eq!(keys.len(), 3, "three processes' first MRs: {keys:x?}");
}
