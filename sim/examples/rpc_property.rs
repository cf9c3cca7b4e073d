//! Property-testing a small user protocol written on plain verbs, under faults, with the sim
//! backend and the strategies and oracles of `softverbs_sim::world::prop`.
//!
//! The protocol: a client SENDs 24-byte requests `{id, reply_len, reply_addr}`, keeping at most
//! 8 outstanding; the server answers small replies (≤ 512 B) with a SEND WITH IMMEDIATE, and
//! large ones by RDMA WRITE WITH IMMEDIATE straight into the client's buffer at `reply_addr`;
//! either way `imm = id`. The property: under a generated fault schedule (loss, duplication,
//! corruption, truncation, reordering, dropped packets, partitions that heal), every request
//! gets exactly one reply, in request order, with the right bytes, and every completion on
//! both sides says what it must. The client also keeps the protocol's own timeout: a request
//! without a reply within [`REPLY_TIMEOUT_NS`] of virtual time fails the case.
//!
//! It is written with `softverbs_sim::world::proto`: [`connect_rc_server`] connects the two
//! sides, and one [`RunLoop`] polls both CQs while it advances virtual time, passes failed
//! completions out apart, and keeps the reply timers (docs/simulator.md, "Writing a protocol
//! on the simulator").
//!
//! `cargo run -p softverbs-sim --release --example rpc_property [CASES]` (`PROPTEST_CASES`
//! wins; `PROPTEST_RNG_SEED` replays a run); `cargo test -p softverbs-sim --example
//! rpc_property` runs it as a test with a small budget, as `cargo test --workspace` does.

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use softverbs_sim::conn::{ConnOpts, Endpoint};
use softverbs_sim::world::prop::{self as props, oracle, ExpectedWc, FaultEvent};
use softverbs_sim::world::proto::{connect_rc_server, Next, RcServer, RunLoop, TimerId};
use softverbs_sim::world::{LinkParams, SimWorld, World};
use verbs_api::{
    Mtu, QpCap, RdmaTarget, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
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
/// The protocol's own timeout: a request without a reply this long after it was posted fails.
const REPLY_TIMEOUT_NS: u64 = 4_000_000_000;

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

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A successful completion of `wr_id` on `qp_num` (no immediate, no source QP: receives add
/// theirs).
fn success(wr_id: u64, opcode: WcOpcode, byte_len: u32, qp_num: u32) -> ExpectedWc {
    let status = WcStatus::Success;
    ExpectedWc { wr_id, status, opcode, byte_len, imm: None, grh: false, qp_num, src_qp: None }
}

fn e(e: verbs_api::Error) -> String {
    e.to_string()
}

/// The server: answer a request, or check that a reply went out whole.
fn serve(
    server: &RcServer,
    client: &Endpoint,
    wc: &WorkCompletion,
    sent: &mut Vec<u64>,
) -> Result<(), String> {
    let qp = &server.qps[0];
    if wc.opcode != WcOpcode::Recv {
        let len = *sent.get(wc.wr_id as usize).ok_or(format!("server: {wc:?} is no reply"))?;
        let op = if len <= SMALL as u64 { WcOpcode::Send } else { WcOpcode::RdmaWrite };
        let want = success(wc.wr_id, op, len as u32, qp.qp_num());
        return oracle::check_wc(&want, wc).map_err(|m| format!("server: {m}"));
    }
    let slot = wc.wr_id as usize;
    let want = ExpectedWc {
        src_qp: Some(client.qp.qp_num()),
        ..success(wc.wr_id, WcOpcode::Recv, REQ_LEN as u32, qp.qp_num())
    };
    oracle::check_wc(&want, wc).map_err(|m| format!("server's receive: {m}"))?;
    let req = server.mr.read_vec(slot * REQ_LEN, REQ_LEN).map_err(e)?;
    let (id, len, addr) = (u64_at(&req, 0), u64_at(&req, 8), u64_at(&req, 16));
    if id != sent.len() as u64 || len > SLOT as u64 {
        return Err(format!("server: request {id} of {len} B is not the next one"));
    }
    sent.push(len);
    // Re-arm the receive slot before answering.
    let sge = [server.mr.sge(slot * REQ_LEN, REQ_LEN as u32)];
    qp.post_recv(&[RecvWr { wr_id: slot as u64, sg_list: &sge }]).map_err(e)?;
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
    qp.post_send(&[wr]).map_err(e)
}

/// Where the client's receive `wr_id` puts a small reply.
fn small_buffer(wr_id: u64) -> usize {
    SERVER_SLOTS * SLOT + wr_id as usize * SMALL as usize
}

/// The client: requests sent and replies received so far, and each request's reply timer.
struct Client<'a> {
    case: &'a RpcCase,
    end: Endpoint,
    server_qpn: u32,
    requests_done: usize,
    replies: Vec<u64>,
    timers: Vec<TimerId>,
}

impl Client<'_> {
    fn done(&self) -> bool {
        self.replies.len() == self.case.sizes.len() && self.requests_done == self.replies.len()
    }

    /// Post requests while fewer than [`OUTSTANDING`] wait for replies; each sets its timeout.
    fn post_requests(&mut self, run: &mut RunLoop) -> Result<(), String> {
        let (c, n) = (&self.end, self.case.sizes.len());
        while self.timers.len() < n && self.timers.len() - self.replies.len() < OUTSTANDING {
            let id = self.timers.len() as u64;
            let addr = c.mr.addr() + ((id as usize % 16) * SLOT) as u64;
            let mut req = Vec::with_capacity(REQ_LEN);
            req.extend(id.to_le_bytes());
            req.extend((self.case.sizes[id as usize] as u64).to_le_bytes());
            req.extend(addr.to_le_bytes());
            let off = SERVER_SLOTS * SLOT + SLOT / 2 + (id as usize % OUTSTANDING) * REQ_LEN;
            c.mr.write(off, &req).map_err(e)?;
            let sge = [c.mr.sge(off, REQ_LEN as u32)];
            let wr = SendWr {
                wr_id: id,
                sg_list: &sge,
                send_flags: SendFlags::SIGNALED,
                ..Default::default()
            };
            c.qp.post_send(&[wr]).map_err(e)?;
            self.timers.push(run.set_timer_after(REPLY_TIMEOUT_NS));
        }
        Ok(())
    }

    /// A request went out, or a reply came: check it whole.
    fn complete(&mut self, wc: &WorkCompletion, run: &mut RunLoop) -> Result<(), String> {
        let qp_num = self.end.qp.qp_num();
        if wc.opcode == WcOpcode::Send {
            let want = success(self.requests_done as u64, WcOpcode::Send, REQ_LEN as u32, qp_num);
            self.requests_done += 1;
            return oracle::check_wc(&want, wc).map_err(|m| format!("client's request: {m}"));
        }
        // A reply: `imm_data` names it.
        let id = wc.imm_data as u64;
        let len = *self.case.sizes.get(id as usize).ok_or(format!("reply to {id}: {wc:?}"))?;
        let small = len <= SMALL;
        let op = if small { WcOpcode::Recv } else { WcOpcode::RecvRdmaWithImm };
        let want = ExpectedWc {
            imm: Some(id as u32),
            src_qp: Some(self.server_qpn),
            ..success(self.replies.len() as u64, op, len, qp_num)
        };
        oracle::check_wc(&want, wc).map_err(|m| format!("client's reply: {m}"))?;
        let at = if small { small_buffer(wc.wr_id) } else { (id as usize % 16) * SLOT };
        let got = self.end.mr.read_vec(at, len as usize).map_err(e)?;
        oracle::check_bytes(&format!("reply {id}"), &reply_bytes(id, len), &got)?;
        if !run.cancel_timer(self.timers[id as usize]) {
            return Err(format!("reply {id} came twice, or after its timeout"));
        }
        self.replies.push(id);
        self.post_requests(run)
    }
}

/// Run one case; `Ok` gives the number of faults the links injected.
fn run(case: &RpcCase) -> Result<u64, String> {
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
    let (server, mut clients) =
        connect_rc_server(&world, 1, &[0], cap, 256, mr_len, &opts).map_err(e)?;
    let client = clients.pop().expect("one client");
    for slot in 0..SERVER_SLOTS {
        let sge = [server.mr.sge(slot * REQ_LEN, REQ_LEN as u32)];
        server.qps[0].post_recv(&[RecvWr { wr_id: slot as u64, sg_list: &sge }]).map_err(e)?;
    }
    // One receive per reply (small or large: a WRITE WITH IMMEDIATE consumes one too).
    for k in 0..n as u64 {
        let sge = [client.mr.sge(small_buffer(k), SMALL)];
        client.qp.post_recv(&[RecvWr { wr_id: k, sg_list: &sge }]).map_err(e)?;
    }
    let start = world.now_ns();
    // The user's protocol meets the library's fault schedules: link 0 carries requests.
    props::schedule_faults(&world, start, &case.faults, &base, 0, 1);

    let mut run = RunLoop::new(&world);
    let server_cq = run.add_cq(&server.cq);
    run.add_cq(&client.cq);
    let server_qpn = server.qps[0].qp_num();
    let mut client =
        Client { case, end: client, server_qpn, requests_done: 0, replies: vec![], timers: vec![] };
    let mut sent_by_server = Vec::new();
    client.post_requests(&mut run)?;
    while !client.done() {
        match run.next(start + LIMIT_NS).map_err(e)? {
            Next::Completion(c) if c.cq == server_cq => {
                serve(&server, &client.end, &c.wc, &mut sent_by_server)?
            }
            Next::Completion(c) => client.complete(&c.wc, &mut run)?,
            Next::Failed(c) => {
                let side = if c.cq == server_cq { "server" } else { "client" };
                return Err(format!("{side}: a completion failed: {:?}", c.wc));
            }
            Next::Timer(t) => {
                let id = client.timers.iter().position(|&x| x == t).unwrap_or(usize::MAX);
                return Err(format!("request {id} got no reply in {REPLY_TIMEOUT_NS} ns"));
            }
            Next::Idle => return Err("the world went idle before every reply came".into()),
            Next::Deadline => return Err(format!("not done within {LIMIT_NS} ns")),
        }
    }
    let want: Vec<u64> = (0..n as u64).collect();
    oracle::check_exactly_once_in_order("replies", &want, &client.replies)?;
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
