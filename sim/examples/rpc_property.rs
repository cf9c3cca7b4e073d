//! Property-testing a small user protocol written on plain verbs, under faults, with the sim
//! backend and the strategies and oracles of `softverbs_sim::world::prop`.
//!
//! The protocol: a client SENDs 24-byte requests `{id, reply_len, reply_addr}`, keeping at most
//! 8 outstanding; the server answers small replies (≤ 512 B) with a SEND WITH IMMEDIATE, and
//! large ones by RDMA WRITE WITH IMMEDIATE straight into the client's buffer at `reply_addr`;
//! either way `imm = id`. The property: under a generated fault schedule (loss, duplication,
//! corruption, truncation, reordering, dropped packets, partitions that heal), every request
//! gets exactly one reply, in request order, with the right bytes, and every completion on
//! both sides says what it must.
//!
//! `cargo run -p softverbs-sim --release --example rpc_property [CASES]` (`PROPTEST_CASES`
//! wins; `PROPTEST_RNG_SEED` replays a run); `cargo test -p softverbs-sim --example
//! rpc_property` runs it as a test with a small budget, as `cargo test --workspace` does.

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use softverbs_sim::conn::{ConnOpts, Endpoint};
use softverbs_sim::world::prop::{self as props, oracle, ExpectedWc, FaultEvent};
use softverbs_sim::world::{connect_rc, LinkParams, SimWorld, World};
use verbs_api::{
    CompletionQueue, Mtu, QpCap, RdmaTarget, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

/// Replies up to this long go by SEND; longer ones by RDMA WRITE.
const SMALL: u32 = 512;
/// Each outstanding request's area for a large reply in the client's MR (and for a reply's
/// source in the server's).
const SLOT: usize = 64 * 1024;
/// Request slots the server keeps receives posted for.
const SERVER_SLOTS: usize = 16;
/// Requests the client keeps outstanding at most.
const OUTSTANDING: usize = 8;
/// `{id, reply_len, reply_addr}`, little-endian u64s.
const REQ_LEN: usize = 24;
/// Virtual time a case may take.
const LIMIT_NS: u64 = 5_000_000_000;

/// One property case: the reply sizes the client asks for, in order, and the faults.
#[derive(Clone, Debug)]
struct RpcCase {
    seed: u64,
    sizes: Vec<u32>,
    faults: Vec<FaultEvent>,
}

fn rpc_case() -> impl Strategy<Value = RpcCase> {
    let sizes = prop::collection::vec(
        prop_oneof![3 => 0u32..=SMALL, 1 => (SMALL + 1)..=(SLOT as u32)],
        1..40,
    );
    (any::<u64>(), sizes, props::fault_schedule(3)).prop_map(|(seed, sizes, faults)| RpcCase {
        seed,
        sizes,
        faults,
    })
}

fn reply_bytes(id: u64, len: u32) -> Vec<u8> {
    (0..len).map(|i| (id as u32).wrapping_mul(31).wrapping_add(i) as u8).collect()
}

fn poll(cq: &CompletionQueue) -> Result<Vec<WorkCompletion>, String> {
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::default(); 16];
    loop {
        let n = cq.poll(&mut buf).map_err(|e| format!("poll_cq: {e}"))?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The server's loop body: answer every request that has arrived, and check its own
/// completions.
fn serve(server: &Endpoint, client: &Endpoint, sent: &mut Vec<u64>) -> Result<(), String> {
    let e = |e: verbs_api::Error| e.to_string();
    for wc in poll(&server.cq)? {
        if wc.status != WcStatus::Success {
            return Err(format!("server: a completion failed: {wc:?}"));
        }
        if wc.opcode != WcOpcode::Recv {
            // A reply went out whole.
            let len = *sent.get(wc.wr_id as usize).ok_or(format!("server: {wc:?} is no reply"))?;
            let want = ExpectedWc {
                wr_id: wc.wr_id,
                status: WcStatus::Success,
                opcode: if len <= SMALL as u64 { WcOpcode::Send } else { WcOpcode::RdmaWrite },
                byte_len: len as u32,
                imm: None,
                grh: false,
                qp_num: server.qp.qp_num(),
                src_qp: None,
            };
            oracle::check_wc(&want, &wc).map_err(|m| format!("server: {m}"))?;
            continue;
        }
        let slot = wc.wr_id as usize;
        let want = ExpectedWc {
            wr_id: wc.wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: REQ_LEN as u32,
            imm: None,
            grh: false,
            qp_num: server.qp.qp_num(),
            src_qp: Some(client.qp.qp_num()),
        };
        oracle::check_wc(&want, &wc).map_err(|m| format!("server's receive: {m}"))?;
        let req = server.mr.read_vec(slot * REQ_LEN, REQ_LEN).map_err(e)?;
        let (id, len, addr) = (u64_at(&req, 0), u64_at(&req, 8), u64_at(&req, 16));
        if id != sent.len() as u64 || len > SLOT as u64 {
            return Err(format!("server: request {id} of {len} B is not the next one"));
        }
        sent.push(len);
        // Re-arm the receive slot before answering.
        let sge = [server.mr.sge(slot * REQ_LEN, REQ_LEN as u32)];
        server.qp.post_recv(&[RecvWr { wr_id: slot as u64, sg_list: &sge }]).map_err(e)?;
        let off = SLOT + (id as usize % SERVER_SLOTS) * SLOT;
        server.mr.write(off, &reply_bytes(id, len as u32)).map_err(e)?;
        let sge = [server.mr.sge(off, len as u32)];
        let small = len <= SMALL as u64;
        let wr = SendWr {
            wr_id: id,
            sg_list: &sge,
            opcode: if small { WrOpcode::SendWithImm } else { WrOpcode::RdmaWriteWithImm },
            send_flags: SendFlags::SIGNALED,
            imm_data: id as u32,
            rdma: RdmaTarget { remote_addr: addr, rkey: client.mr.rkey() },
            ..Default::default()
        };
        server.qp.post_send(&[wr]).map_err(e)?;
    }
    Ok(())
}

/// Where the client's receive `wr_id` puts a small reply.
fn small_buffer(wr_id: u64) -> usize {
    SERVER_SLOTS * SLOT + wr_id as usize * SMALL as usize
}

/// Run one case; `Ok` gives the number of faults the links injected.
fn run(case: &RpcCase) -> Result<u64, String> {
    let e = |e: verbs_api::Error| e.to_string();
    let base = LinkParams { queue_limit: 0, ..LinkParams::default() };
    let world = {
        let mut w = World::new(case.seed);
        let (c, s) = (w.add_node("client"), w.add_node("server"));
        w.add_duplex(c, s, base.clone());
        SimWorld::new(w)
    };
    let n = case.sizes.len();
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let opts = ConnOpts { mtu: Mtu::Mtu1024, timeout: 8, ..ConnOpts::default() };
    let mr_len = (SERVER_SLOTS + 1) * SLOT + 64 * SMALL as usize;
    let (client, server) = connect_rc(&world, 0, 1, cap, 256, mr_len, &opts, (1, 2)).map_err(e)?;
    for slot in 0..SERVER_SLOTS {
        let sge = [server.mr.sge(slot * REQ_LEN, REQ_LEN as u32)];
        server.qp.post_recv(&[RecvWr { wr_id: slot as u64, sg_list: &sge }]).map_err(e)?;
    }
    // One receive per reply (small or large: a WRITE WITH IMMEDIATE consumes one too).
    for k in 0..n as u64 {
        let sge = [client.mr.sge(small_buffer(k), SMALL)];
        client.qp.post_recv(&[RecvWr { wr_id: k, sg_list: &sge }]).map_err(e)?;
    }
    let start = world.now_ns();
    // The user's protocol meets the library's fault schedules: link 0 carries requests.
    props::schedule_faults(&world, start, &case.faults, &base, 0, 1);

    let mut replies: Vec<u64> = Vec::new();
    let mut sent_by_server: Vec<u64> = Vec::new();
    let mut requests_done = 0usize;
    let mut posted = 0usize;
    let mut err = None;
    let mut step = || -> Result<bool, String> {
        serve(&server, &client, &mut sent_by_server)?;
        for wc in poll(&client.cq)? {
            if wc.status != WcStatus::Success {
                return Err(format!("client: a completion failed: {wc:?}"));
            }
            if wc.opcode == WcOpcode::Send {
                let want = ExpectedWc {
                    wr_id: requests_done as u64,
                    status: WcStatus::Success,
                    opcode: WcOpcode::Send,
                    byte_len: REQ_LEN as u32,
                    imm: None,
                    grh: false,
                    qp_num: client.qp.qp_num(),
                    src_qp: None,
                };
                oracle::check_wc(&want, &wc).map_err(|m| format!("client's request: {m}"))?;
                requests_done += 1;
                continue;
            }
            // A reply: `imm_data` names it.
            let id = wc.imm_data as u64;
            let len = *case.sizes.get(id as usize).ok_or(format!("reply to {id}: {wc:?}"))?;
            let small = len <= SMALL;
            let want = ExpectedWc {
                wr_id: replies.len() as u64,
                status: WcStatus::Success,
                opcode: if small { WcOpcode::Recv } else { WcOpcode::RecvRdmaWithImm },
                byte_len: len,
                imm: Some(id as u32),
                grh: false,
                qp_num: client.qp.qp_num(),
                src_qp: Some(server.qp.qp_num()),
            };
            oracle::check_wc(&want, &wc).map_err(|m| format!("client's reply: {m}"))?;
            let at = if small { small_buffer(wc.wr_id) } else { (id as usize % 16) * SLOT };
            let got = client.mr.read_vec(at, len as usize).map_err(e)?;
            oracle::check_bytes(&format!("reply {id}"), &reply_bytes(id, len), &got)?;
            replies.push(id);
        }
        while posted < n && posted - replies.len() < OUTSTANDING {
            let id = posted as u64;
            let addr = client.mr.addr() + ((id as usize % 16) * SLOT) as u64;
            let mut req = Vec::with_capacity(REQ_LEN);
            req.extend(id.to_le_bytes());
            req.extend((case.sizes[posted] as u64).to_le_bytes());
            req.extend(addr.to_le_bytes());
            let off = SERVER_SLOTS * SLOT + SLOT / 2 + (posted % OUTSTANDING) * REQ_LEN;
            client.mr.write(off, &req).map_err(e)?;
            let sge = [client.mr.sge(off, REQ_LEN as u32)];
            let wr = SendWr {
                wr_id: id,
                sg_list: &sge,
                send_flags: SendFlags::SIGNALED,
                ..Default::default()
            };
            client.qp.post_send(&[wr]).map_err(e)?;
            posted += 1;
        }
        Ok(replies.len() == n && requests_done == n)
    };
    world.run_until_pred(
        || match step() {
            Ok(done) => done,
            Err(m) => {
                err = Some(m);
                true
            }
        },
        start + LIMIT_NS,
    );
    if let Some(m) = err {
        return Err(m);
    }
    let want: Vec<u64> = (0..n as u64).collect();
    oracle::check_exactly_once_in_order("replies", &want, &replies)?;
    if requests_done != n {
        return Err(format!("{requests_done} of {n} requests completed at the client"));
    }
    let faults = world.lock().total_stats().faults();
    Ok(faults)
}

/// Run `cases` cases (`PROPTEST_CASES` wins), printing the generator seed first and each
/// case's world seed before it runs; `Ok` gives (cases run, cases in which faults happened).
fn property(cases: u32) -> Result<(usize, usize), String> {
    let mut runner = TestRunner::new(props::config(cases));
    let counts = std::cell::Cell::new((0, 0));
    runner
        .run(&rpc_case(), |case| {
            println!(
                "case: seed {}, {} requests, {} fault events",
                case.seed,
                case.sizes.len(),
                case.faults.len()
            );
            let faults =
                run(&case).map_err(|m| TestCaseError::fail(format!("seed {}: {m}", case.seed)))?;
            let (n, hit) = counts.get();
            counts.set((n + 1, hit + usize::from(faults > 0)));
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    Ok(counts.get())
}

fn main() {
    // PROPTEST_CASES, when set, wins over the argument.
    let cases = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(32);
    match property(cases) {
        Ok((n, hit)) => println!("rpc_property: {n} cases passed, {hit} of them under faults"),
        Err(m) => {
            println!("rpc_property: FAILED: {m}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    /// The example's property, with a budget fit for CI (`PROPTEST_CASES` for more).
    #[test]
    fn every_request_gets_one_reply_in_order_under_faults() {
        let (n, hit) = super::property(16).unwrap_or_else(|m| panic!("{m}"));
        assert!(hit > 0, "none of {n} cases met a fault: the property was not exercised");
    }
}
