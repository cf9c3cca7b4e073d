//! How fast the simulator runs: simulated packets per wall-clock second for a two-node RDMA
//! WRITE stream and a 16-node incast through a switch. Run in release:
//! `cargo run -p softverbs-sim --release --example sim_speed`.

use std::time::Instant;

use softverbs_sim::conn::{ConnOpts, Endpoint};
use softverbs_sim::world::{connect_rc, LinkParams, SimWorld, World};
use verbs_api::{Mtu, QpCap, RdmaTarget, SendFlags, SendWr, WorkCompletion, WrOpcode};

const CAP: QpCap = QpCap {
    max_send_wr: 1024,
    max_recv_wr: 1,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 0,
};

/// Keep `depth` WRITEs of `len` bytes outstanding on each pair until `total` have completed.
fn stream(world: &SimWorld, pairs: &[(Endpoint, Endpoint)], len: u32, total: u64) -> (u64, f64) {
    let depth = 512u64;
    let mut posted = vec![0u64; pairs.len()];
    let mut done = vec![0u64; pairs.len()];
    let mut wc = [WorkCompletion::default(); 64];
    let t0 = Instant::now();
    let p0 = world.lock().total_stats().delivered;
    loop {
        let mut all = true;
        for (i, (a, b)) in pairs.iter().enumerate() {
            while let Ok(n @ 1..) = a.cq.poll(&mut wc) {
                done[i] += n as u64 * 64;
            }
            while posted[i] < total && posted[i] - done[i].min(posted[i]) < depth {
                let sge = [a.mr.sge(0, len)];
                let batch: Vec<SendWr> = (0..64)
                    .map(|k| SendWr {
                        wr_id: posted[i] + k,
                        sg_list: &sge,
                        opcode: WrOpcode::RdmaWrite,
                        // One completion per 64 WRITEs, as streaming programs do.
                        send_flags: if k == 63 { SendFlags::SIGNALED } else { SendFlags::empty() },
                        rdma: RdmaTarget { remote_addr: b.mr.addr(), rkey: b.mr.rkey() },
                        ..Default::default()
                    })
                    .collect();
                a.qp.post_send(&batch).expect("post_send");
                posted[i] += 64;
            }
            all &= done[i] >= total;
        }
        if all {
            break;
        }
        // Run a slice of events with the world locked once.
        let mut w = world.lock();
        for _ in 0..4096 {
            if !w.step() {
                break;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let packets = world.lock().total_stats().delivered - p0;
    (packets, secs)
}

fn report(what: &str, world: &SimWorld, packets: u64, secs: f64) {
    let w = world.lock();
    println!(
        "{what}: {packets} packets in {secs:.3} s wall = {:.2} M packets/s ({} events)",
        packets as f64 / secs / 1e6,
        w.events_run()
    );
    if std::env::var_os("SIM_SPEED_STATS").is_some() {
        for n in 0..w.nodes().len() {
            if let Some(nic) = w.nic(n) {
                println!("  {}: {:?}", w.nodes()[n].name, nic.stats());
            }
        }
    }
}

fn main() {
    let opts = ConnOpts { mtu: Mtu::Mtu4096, ..ConnOpts::default() };

    // Two nodes, one WRITE stream of 64-byte messages (the packet rate the world sustains).
    let world = SimWorld::mesh(1, 2, LinkParams { queue_limit: 0, ..LinkParams::default() });
    world.lock().trace_mut().set_keep(false);
    let pair = connect_rc(&world, 0, 1, CAP, 4096, 1 << 16, &opts, (1, 2)).expect("connect");
    let (p, s) = stream(&world, &[pair], 64, 1_000_000);
    report("2-node WRITE stream, 64 B", &world, p, s);

    // Two nodes, 4 KiB WRITEs (one full-MTU packet each: ICRC over 4 KiB per packet).
    let world = SimWorld::mesh(1, 2, LinkParams { queue_limit: 0, ..LinkParams::default() });
    let pair = connect_rc(&world, 0, 1, CAP, 4096, 1 << 16, &opts, (1, 2)).expect("connect");
    let (p, s) = stream(&world, &[pair], 4096, 200_000);
    report("2-node WRITE stream, 4 KiB", &world, p, s);

    // 16 senders through one switch into one receiver.
    let mut w = World::new(2);
    let senders: Vec<usize> = (0..16).map(|i| w.add_node(format!("s{i}"))).collect();
    let rx = w.add_node("rx");
    let sw = w.add_switch("sw");
    for &s in &senders {
        w.add_duplex(s, sw, LinkParams { queue_limit: 0, ..LinkParams::default() });
    }
    w.add_duplex(
        sw,
        rx,
        LinkParams { queue_limit: 0, bandwidth_gbps: 400.0, ..LinkParams::default() },
    );
    let world = SimWorld::new(w);
    let pairs: Vec<_> = senders
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            connect_rc(&world, s, rx, CAP, 4096, 1 << 16, &opts, (i as u32, 7)).expect("connect")
        })
        .collect();
    let (p, s) = stream(&world, &pairs, 1024, 40_000);
    report("16-node incast, 1 KiB WRITEs", &world, p, s);
}
