//! The CPU cost of the soft backend's data path, free of waiting: two devices on one
//! shared-memory fabric, driven from ONE thread, bounce an 8-byte RC SEND back and forth. Every
//! packet is already in the peer's inbox when the peer polls, so the time per round trip is
//! pure software (post, packet build, ICRC, ring copy, parse, completion, repost), the part of
//! the cross-process half round trip that is not the hardware's cache-line transfer.
//! `cargo run --release -p softverbs-sim --example hop_cost [ITERS]`.

use std::time::Instant;

use nic_model::soft::Soft;
use softverbs_sim::conn::{connect, ConnOpts, Endpoint};
use verbs_api::{QpCap, QpType, RecvWr, SendFlags, SendWr, WorkCompletion, WrOpcode};

/// Polls after which a hop counts as lost (each finds the packet already there normally).
const MAX_POLLS: u32 = 1_000_000;

fn main() {
    let iters: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let dir = std::env::temp_dir().join(format!("softverbs-hop-{}", std::process::id()));
    // A fabric directory must be private (mode 0700): `DirBuilder` with the mode, not the
    // umask's default.
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&dir)
        .expect("creating the fabric directory");
    let result = run(&dir, iters);
    let _ = std::fs::remove_dir_all(&dir);
    result.expect("hop_cost");
}

fn run(dir: &std::path::Path, iters: u64) -> Result<(), String> {
    let soft = Soft::shared_memory(Some(dir)).map_err(|e| e.to_string())?;
    let (ca, cb) = (
        soft.open("softverbs0").map_err(|e| e.to_string())?,
        soft.open("softverbs1").map_err(|e| e.to_string())?,
    );
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let a = Endpoint::new(&ca, QpType::Rc, cap, 64, 4096).map_err(|e| e.to_string())?;
    let b = Endpoint::new(&cb, QpType::Rc, cap, 64, 4096).map_err(|e| e.to_string())?;
    connect(&a.qp, 1, &b.info(2).map_err(|e| e.to_string())?, &ConnOpts::default())
        .map_err(|e| e.to_string())?;
    connect(&b.qp, 2, &a.info(1).map_err(|e| e.to_string())?, &ConnOpts::default())
        .map_err(|e| e.to_string())?;
    for ep in [&a, &b] {
        for i in 0..32 {
            let sge = [ep.mr.sge(2048, 8)];
            ep.qp.post_recv(&[RecvWr { wr_id: i, sg_list: &sge }]).map_err(|e| e.to_string())?;
        }
    }
    let mut wcs = [WorkCompletion::default(); 16];
    let mut hop = |from: &Endpoint, to: &Endpoint, n: u64| -> Result<(), String> {
        let sge = [from.mr.sge(0, 8)];
        // Selective signaling, as latency benchmarks do: one send completion in 32.
        let flags = if n.is_multiple_of(32) {
            SendFlags::INLINE | SendFlags::SIGNALED
        } else {
            SendFlags::INLINE
        };
        let wr = SendWr {
            wr_id: n,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            send_flags: flags,
            ..Default::default()
        };
        from.qp.post_send(&[wr]).map_err(|e| e.to_string())?;
        // The packet is in the inbox before the first poll; many polls mean something broke.
        for _ in 0..MAX_POLLS {
            let k = to.cq.poll(&mut wcs).map_err(|e| e.to_string())?;
            let recvs = wcs[..k].iter().filter(|w| w.opcode == verbs_api::WcOpcode::Recv).count();
            if recvs > 0 {
                let rsge = [to.mr.sge(2048, 8)];
                to.qp
                    .post_recv(&[RecvWr { wr_id: 0, sg_list: &rsge }])
                    .map_err(|e| e.to_string())?;
                return Ok(());
            }
        }
        Err(format!("no receive completion after {MAX_POLLS} polls"))
    };
    for n in 0..10_000 {
        hop(&a, &b, n)?;
        hop(&b, &a, n)?;
    }
    let mut best = f64::MAX;
    let mut all = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        for n in 0..iters {
            hop(&a, &b, n)?;
            hop(&b, &a, n)?;
        }
        let ns = t0.elapsed().as_nanos() as f64 / iters as f64 / 2.0;
        best = best.min(ns);
        all.push(ns);
    }
    all.sort_by(f64::total_cmp);
    println!("software cost per hop (post, transmit, receive, complete, repost): median {:.0} ns, best {:.0} ns ({iters} round trips x 5)", all[2], best);
    Ok(())
}
