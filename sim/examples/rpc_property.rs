//! Property-testing a small user protocol written on verbs, under faults, with the sim backend.
//!
//! The protocol: a client SENDs 24-byte requests `{id, reply_len, reply_addr}`; the server
//! answers small replies (≤ 512 B) with a SEND, and large ones by RDMA WRITE WITH IMMEDIATE
//! (`imm = id`) straight into the client's buffer at `reply_addr`. The property: under random
//! loss, duplication and reordering, every request gets exactly one reply, with the right
//! bytes, and the client sees the replies in request order.
//! `cargo run -p softverbs-sim --example rpc_property [CASES]`

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use softverbs_sim::conn::{ConnOpts, Endpoint};
use softverbs_sim::world::{connect_rc, LinkParams, SimWorld};
use verbs_api::{
    Mtu, QpCap, RdmaTarget, RecvWr, SendFlags, SendWr, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};

const SMALL: u32 = 512;
const SLOT: usize = 64 * 1024; // each request's reply area in the client's MR
const REQ_AREA: usize = 0; // server: receive slots for requests
const REQ_LEN: usize = 24;

fn reply_bytes(id: u64, len: u32) -> Vec<u8> {
    (0..len).map(|i| (id as u32).wrapping_mul(31).wrapping_add(i) as u8).collect()
}

fn poll(cq: &verbs_api::CompletionQueue) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::default(); 16];
    while let Ok(n @ 1..) = cq.poll(&mut buf) {
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// The server's loop body: answer every request that has arrived.
fn serve(server: &Endpoint, scratch_off: usize, client_rkey: u32) -> Result<(), String> {
    for wc in poll(&server.cq) {
        if wc.opcode != WcOpcode::Recv {
            if wc.status != WcStatus::Success {
                return Err(format!("server send failed: {wc:?}"));
            }
            continue;
        }
        if wc.status != WcStatus::Success {
            return Err(format!("server receive failed: {wc:?}"));
        }
        let slot = wc.wr_id as usize;
        let req =
            server.mr.read_vec(REQ_AREA + slot * REQ_LEN, REQ_LEN).map_err(|e| e.to_string())?;
        let id = u64::from_le_bytes(req[0..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(req[8..16].try_into().expect("8 bytes")) as u32;
        let addr = u64::from_le_bytes(req[16..24].try_into().expect("8 bytes"));
        // Re-arm the receive slot before answering.
        let sge = [server.mr.sge(REQ_AREA + slot * REQ_LEN, REQ_LEN as u32)];
        server
            .qp
            .post_recv(&[RecvWr { wr_id: slot as u64, sg_list: &sge }])
            .map_err(|e| e.to_string())?;
        let off = scratch_off + (id as usize % 16) * SLOT;
        server.mr.write(off, &reply_bytes(id, len)).map_err(|e| e.to_string())?;
        let sge = [server.mr.sge(off, len)];
        let wr = if len <= SMALL {
            SendWr {
                wr_id: id,
                sg_list: &sge,
                opcode: WrOpcode::Send,
                send_flags: SendFlags::SIGNALED,
                ..Default::default()
            }
        } else {
            SendWr {
                wr_id: id,
                sg_list: &sge,
                opcode: WrOpcode::RdmaWriteWithImm,
                send_flags: SendFlags::SIGNALED,
                imm_data: id as u32,
                rdma: RdmaTarget { remote_addr: addr, rkey: client_rkey },
                ..Default::default()
            }
        };
        server.qp.post_send(&[wr]).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn run(seed: u64, sizes: &[u32], loss: f64, dup: f64, jitter_ns: u64) -> Result<(), String> {
    let params = LinkParams { loss, dup, reorder_jitter_ns: jitter_ns, ..LinkParams::default() };
    let world = SimWorld::mesh(seed, 2, params);
    let n = sizes.len();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let opts = ConnOpts { mtu: Mtu::Mtu1024, timeout: 8, ..ConnOpts::default() };
    let (client, server) = connect_rc(&world, 0, 1, cap, 256, 16 * SLOT + SLOT, &opts, (1, 2))
        .map_err(|e| e.to_string())?;
    for slot in 0..16 {
        let sge = [server.mr.sge(REQ_AREA + slot * REQ_LEN, REQ_LEN as u32)];
        server
            .qp
            .post_recv(&[RecvWr { wr_id: slot as u64, sg_list: &sge }])
            .map_err(|e| e.to_string())?;
    }
    // Client receive buffers for small replies, one per request, in its last slot.
    let small_area = 16 * SLOT;
    for i in 0..n {
        let sge = [client.mr.sge(small_area + (i % 64) * SMALL as usize, SMALL)];
        client
            .qp
            .post_recv(&[RecvWr { wr_id: i as u64, sg_list: &sge }])
            .map_err(|e| e.to_string())?;
    }
    let mut replies: Vec<u64> = Vec::new();
    let mut sent = 0usize;
    let deadline = world.now_ns() + 5_000_000_000;
    let mut err = None;
    // At most 8 requests outstanding (the server has 16 receive slots).
    world.run_until_pred(
        || {
            let mut step = || -> Result<bool, String> {
                serve(&server, SLOT, client.mr.rkey())?;
                for wc in poll(&client.cq) {
                    if wc.status != WcStatus::Success {
                        return Err(format!("client completion failed: {wc:?}"));
                    }
                    if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                        let id = if wc.wc_flags.contains(WcFlags::WITH_IMM) {
                            wc.imm_data as u64
                        } else {
                            wc.wr_id
                        };
                        let len = sizes[id as usize];
                        let got = if len <= SMALL {
                            client.mr.read_vec(
                                small_area + (wc.wr_id as usize % 64) * SMALL as usize,
                                len as usize,
                            )
                        } else {
                            client.mr.read_vec((id as usize % 16) * SLOT, len as usize)
                        }
                        .map_err(|e| e.to_string())?;
                        if got != reply_bytes(id, len) {
                            return Err(format!("reply {id} ({len} B) has the wrong bytes"));
                        }
                        replies.push(id);
                    }
                }
                while sent < n && sent - replies.len() < 8 {
                    let id = sent as u64;
                    let addr = client.mr.addr() + ((id as usize % 16) * SLOT) as u64;
                    let mut req = Vec::with_capacity(REQ_LEN);
                    req.extend(id.to_le_bytes());
                    req.extend((sizes[sent] as u64).to_le_bytes());
                    req.extend(addr.to_le_bytes());
                    let off = 16 * SLOT + SLOT / 2 + (sent % 8) * REQ_LEN;
                    client.mr.write(off, &req).map_err(|e| e.to_string())?;
                    let sge = [client.mr.sge(off, REQ_LEN as u32)];
                    client
                        .qp
                        .post_send(&[SendWr {
                            wr_id: id,
                            sg_list: &sge,
                            send_flags: SendFlags::SIGNALED,
                            ..Default::default()
                        }])
                        .map_err(|e| e.to_string())?;
                    sent += 1;
                }
                Ok(replies.len() == n)
            };
            match step() {
                Ok(done) => done,
                Err(e) => {
                    err = Some(e);
                    true
                }
            }
        },
        deadline,
    );
    if let Some(e) = err {
        return Err(e);
    }
    if replies != (0..n as u64).collect::<Vec<_>>() {
        return Err(format!("replies {replies:?}, expected each of 0..{n} once, in order"));
    }
    Ok(())
}

fn main() {
    let cases = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(32);
    let mut runner =
        TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let sizes = prop::collection::vec(
        prop_oneof![3 => 0u32..=SMALL, 1 => (SMALL + 1)..=(SLOT as u32)],
        1..40,
    );
    let strategy = (any::<u64>(), sizes, 0.0f64..0.05, 0.0f64..0.02, 0u64..3000);
    let result = runner.run(&strategy, |(seed, sizes, loss, dup, jitter)| {
        println!(
            "case: seed {seed}, {} requests, loss {loss:.3}, dup {dup:.3}, jitter {jitter} ns",
            sizes.len()
        );
        run(seed, &sizes, loss, dup, jitter).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => println!("rpc_property: {cases} cases passed"),
        Err(e) => {
            println!("rpc_property: FAILED: {e}");
            std::process::exit(1);
        }
    }
}
