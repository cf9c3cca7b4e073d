//! `SOFTVERBS_FAULTS` on real runs: this process and a `softverbs demo --target` process over a
//! shared-memory fabric. Through 5 % loss each way (the target's plan) an RC QP moves a known
//! pattern with every byte and completion right, and the counters show the retransmissions
//! and the injected drops; a port failed by `fail@` gets `IBV_EVENT_PORT_ERR` and its sends
//! `RETRY_EXC_ERR`; a plan that does not parse is refused naming the bad word.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use nic_model::soft::Soft;
use softverbs_sim::peer::{FabricDir, Peer, Stderr};
use verbs_api::conn::{self, ConnOpts, Endpoint};
use verbs_api::*;

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
const WAIT: Duration = Duration::from_secs(60);
/// Where the pattern goes in the target's MR (clear of the demo's own areas).
const AT: u64 = 20_480;
const CHUNK: usize = 4096;

/// A `softverbs demo --target` process on `dir` with `faults` as its plan.
fn target(dir: &FabricDir, faults: Option<&str>) -> Peer {
    let mut cmd = Command::new(BIN);
    cmd.args(["demo", "--target", "-d", "softverbs0", "--fabric"]).arg(dir.path());
    cmd.env_remove("SOFTVERBS_FAULTS");
    if let Some(f) = faults {
        cmd.env("SOFTVERBS_FAULTS", f);
    }
    Peer::spawn("the target", cmd, Stderr::Capture).expect("starting the target")
}

/// Connects an RC endpoint on `ctx` to `t`; returns it and the target's MR (address, rkey).
fn connect(ctx: &Context, t: &mut Peer, opts: &ConnOpts) -> (Endpoint, u64, u32) {
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let ep = Endpoint::new(ctx, QpType::Rc, cap, 16, 3 * CHUNK).expect("an endpoint");
    let info = ep.info(0x200).expect("QP info");
    let (remote, mr) = t.swap_info(&info, None, WAIT).expect("the target's INFO");
    let (raddr, rkey) = mr.expect("the target offers its MR");
    conn::connect(&ep.qp, 0x200, &remote, opts).expect("connecting");
    t.expect_line("READY", WAIT).expect("the target is ready");
    (ep, raddr, rkey)
}

fn post_one(
    ep: &Endpoint,
    wr_id: u64,
    opcode: WrOpcode,
    off: usize,
    len: usize,
    remote: u64,
    rkey: u32,
) {
    let sge = [ep.mr.sge(off, len as u32)];
    let wr = SendWr {
        wr_id,
        sg_list: &sge,
        opcode,
        send_flags: SendFlags::SIGNALED,
        rdma: RdmaTarget { remote_addr: remote, rkey },
        ..Default::default()
    };
    ep.qp.post_send(&[wr]).expect("post_send");
}

/// Tells the target it is done and checks its report and exit.
fn finish_target(t: &mut Peer, recv_len: usize) {
    t.send_line("DONE").expect("telling the target");
    let cq = t.expect_line("target CQ:", WAIT).expect("the target's completion");
    assert!(
        cq.contains(&format!("status=IBV_WC_SUCCESS opcode=IBV_WC_RECV byte_len={recv_len} ")),
        "{cq}"
    );
    let deadline = Instant::now() + WAIT;
    while t.recv_line(deadline.saturating_duration_since(Instant::now())).expect("BYE") != "BYE" {}
    t.wait_exit(WAIT).expect("the target exits");
}

/// The counters of the port owned by `pid` in `softverbs counters --json` output.
fn counters_of(dir: &FabricDir, pid: u32) -> BTreeMap<String, u64> {
    let out = Command::new(BIN)
        .args(["counters", "--json", "--fabric"])
        .arg(dir.path())
        .output()
        .expect("running softverbs counters");
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{json} {}", String::from_utf8_lossy(&out.stderr));
    let at =
        json.find(&format!("\"pid\":{pid},\"counters\":{{")).unwrap_or_else(|| panic!("{json}"));
    let body = &json[at..];
    let body = &body[body.find('{').unwrap() + 1..];
    body[..body.find('}').unwrap()]
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once(':').unwrap();
            (k.trim_matches('"').to_string(), v.parse().unwrap())
        })
        .collect()
}

fn pattern(i: usize) -> Vec<u8> {
    (0..CHUNK).map(|j| (j.wrapping_mul(31) ^ i.wrapping_mul(7)) as u8).collect()
}

#[test]
fn rc_moves_a_pattern_through_five_percent_loss_each_way() {
    const ROUNDS: usize = 30;
    let dir = FabricDir::create(&format!("softverbs-faults-loss-{}", std::process::id())).unwrap();
    let plan = "seed=7 loss=5%";
    let mut t = target(&dir, Some(plan));
    let target_pid = t.pid().unwrap();
    {
        let soft = Soft::shared_memory(Some(dir.path())).expect("opening the fabric");
        soft.fault_plan(None).unwrap();
        let ctx = soft.open("softverbs0").expect("opening softverbs0");
        // A 4 ms local ACK timeout (4.096 us * 2^10), so losses are recovered quickly.
        let opts = ConnOpts { timeout: 10, retry_cnt: 7, ..ConnOpts::default() };
        let (ep, raddr, rkey) = connect(&ctx, &mut t, &opts);
        for i in 0..ROUNDS {
            let p = pattern(i);
            ep.mr.write(0, &p).unwrap();
            post_one(&ep, 2 * i as u64, WrOpcode::RdmaWrite, 0, CHUNK, raddr + AT, rkey);
            let wc = ep.cq.poll_n(1, WAIT).expect("the WRITE's completion");
            assert_eq!(
                (wc[0].wr_id, wc[0].status, wc[0].opcode),
                (2 * i as u64, WcStatus::Success, WcOpcode::RdmaWrite),
                "round {i}"
            );
            ep.mr.write(CHUNK, &[0u8; CHUNK]).unwrap();
            post_one(&ep, 2 * i as u64 + 1, WrOpcode::RdmaRead, CHUNK, CHUNK, raddr + AT, rkey);
            let wc = ep.cq.poll_n(1, WAIT).expect("the READ's completion");
            assert_eq!(
                (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
                (2 * i as u64 + 1, WcStatus::Success, WcOpcode::RdmaRead, CHUNK as u32),
                "round {i}"
            );
            assert_eq!(ep.mr.read_vec(CHUNK, CHUNK).unwrap(), p, "round {i}: the bytes read back");
        }
        ep.mr.write(0, b"through the loss").unwrap();
        post_one(&ep, 999, WrOpcode::Send, 0, 16, 0, 0);
        let wc = ep.cq.poll_n(1, WAIT).expect("the SEND's completion");
        assert_eq!((wc[0].wr_id, wc[0].status), (999, WcStatus::Success));

        let mine = soft.stats("softverbs0").unwrap();
        assert!(mine.nic.retransmits > 0, "losses were recovered by retransmission: {mine:?}");
        assert_eq!(mine.faults, Default::default(), "this process has no plan");
        // What another process sees: this port's retransmissions, the target's injected drops.
        let deadline = Instant::now() + WAIT;
        while counters_of(&dir, std::process::id())["retransmitted_pkts"] != mine.nic.retransmits {
            assert!(Instant::now() < deadline, "the counters never showed the retransmissions");
            std::thread::sleep(Duration::from_millis(20));
        }
        let theirs = counters_of(&dir, target_pid);
        assert!(theirs["fault_loss_tx"] > 0 && theirs["fault_loss_rx"] > 0, "{theirs:?}");
        assert_eq!(theirs["fault_duplicate"] + theirs["fault_corrupt"], 0, "{theirs:?}");
        finish_target(&mut t, 16);
    }
    let stderr = t.stderr();
    assert!(
        stderr.contains(
            "softverbs: fault plan for softverbs0: seed=7 loss=5% — set \
             SOFTVERBS_FAULTS='seed=7 loss=5%' to repeat"
        ),
        "{stderr}"
    );
    dir.wait_empty(Duration::from_secs(5)).expect("no segment left");
}

#[test]
fn a_failed_port_gets_port_err_and_its_sends_retry_exc_err() {
    let dir = FabricDir::create(&format!("softverbs-faults-fail-{}", std::process::id())).unwrap();
    let mut t = target(&dir, None);
    {
        let soft = Soft::shared_memory(Some(dir.path())).expect("opening the fabric");
        soft.fault_plan(Some("fail@1500ms")).expect("a good plan");
        let opened = Instant::now();
        let ctx = soft.open("softverbs0").expect("opening softverbs0");
        let opts = ConnOpts { timeout: 10, retry_cnt: 2, ..ConnOpts::default() };
        let (ep, raddr, rkey) = connect(&ctx, &mut t, &opts);
        ep.mr.write(0, &pattern(1)).unwrap();
        post_one(&ep, 1, WrOpcode::RdmaWrite, 0, CHUNK, raddr + AT, rkey);
        let wc = ep.cq.poll_n(1, WAIT).expect("the WRITE's completion");
        assert!(opened.elapsed() < Duration::from_millis(1500), "too slow to test before fail@");
        assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success), "before the failure");

        // The port comes up as the device opens; then it fails.
        let first = ctx.get_async_event(Some(WAIT)).expect("PORT_ACTIVE");
        assert_eq!(first.event_type, AsyncEventType::PortActive);
        let ev = ctx.get_async_event(Some(WAIT)).expect("an async event");
        assert_eq!((ev.event_type, ev.element), (AsyncEventType::PortErr, AsyncElement::Port(1)));
        assert!(opened.elapsed() >= Duration::from_millis(1500));
        assert_eq!(ctx.query_port(1).unwrap().state, PortState::Down);

        post_one(&ep, 2, WrOpcode::RdmaWrite, 0, CHUNK, raddr + AT, rkey);
        let wc = ep.cq.poll_n(1, WAIT).expect("the failed WRITE's completion");
        assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::RetryExcErr), "{:?}", wc[0]);
        let stats = soft.stats("softverbs0").unwrap();
        assert!(stats.faults.port_failed >= 3, "the first try and two retries: {stats:?}");
        assert_eq!(stats.nic.retry_exceeded, 1);
        assert!(
            stats.port_error.as_deref().is_some_and(|e| e.contains("fail@1500 ms")),
            "{stats:?}"
        );
        // The owner publishes when its NIC thread idles: wait (bounded) until it has.
        let deadline = Instant::now() + WAIT;
        let mine = loop {
            let mine = counters_of(&dir, std::process::id());
            if mine["retry_exceeded_err"] == 1 || Instant::now() > deadline {
                break mine;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!((mine["link_downed"], mine["retry_exceeded_err"]), (1, 1), "{mine:?}");
        assert!(mine["fault_port_failed"] >= 3, "{mine:?}");
        // The target's receive was never used: finish it with the SEND from a fresh run is not
        // possible on a failed port, so end it by closing its input.
        t.close_stdin();
        let _ = t.wait_exit(WAIT);
    }
    dir.wait_empty(Duration::from_secs(5)).expect("no segment left");
}

#[test]
fn a_bad_plan_is_refused_naming_the_bad_word() {
    let out = Command::new(BIN)
        .args(["devices"])
        .env("SOFTVERBS_FAULTS", "loss=5% bogus=1")
        .output()
        .expect("running softverbs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("SOFTVERBS_FAULTS: \"bogus=1\": unknown word \"bogus\""), "{err}");
    let soft = Soft::loopback();
    let e = soft.fault_plan(Some("drop=nak#1")).unwrap_err();
    assert_eq!(e.errno, Errno::Inval);
    assert!(e.message.contains("\"drop=nak#1\": unknown packet kind \"nak\""), "{e}");
}

/// (exit status, stdout, stderr) of `softverbs ARGS` with `SOFTVERBS_FAULTS=plan` on `dir`.
fn run_with_plan(dir: &FabricDir, plan: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .arg("--fabric")
        .arg(dir.path())
        .env("SOFTVERBS_FAULTS", plan)
        .output()
        .expect("running softverbs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_guides_plans_run_the_demo_and_a_pingpong_pair_to_the_end() {
    let dir = FabricDir::create(&format!("softverbs-faults-guide-{}", std::process::id())).unwrap();
    // Duplicates, corruption, reordering and a dropped ACK on both of the demo's NICs (one
    // process, so both devices take the plan): RC recovers and the demo tells its story.
    let plan = "seed=3 tx:dup=1% rx:corrupt=0.1% reorder=50us drop=ack#3";
    let (status, out, err) = run_with_plan(&dir, plan, &["demo", "--in-process"]);
    assert_eq!(status, Some(0), "{out}\n{err}");
    assert!(out.contains("All five operations completed with the right data."), "{out}");
    for dev in ["softverbs0", "softverbs1"] {
        assert!(
            err.contains(&format!(
                "softverbs: fault plan for {dev}: {plan} — set SOFTVERBS_FAULTS='{plan}' to repeat"
            )),
            "{err}"
        );
    }
    // A pingpong pair, both under 5 % loss each way: every iteration completes.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    // -g 0: address the peer by GID, as a RoCE port needs.
    let common = ["pingpong", "-p", &port, "-g", "0", "-n", "200", "-s", "256", "--timeout", "30"];
    let fabric = dir.path().to_str().unwrap().to_string();
    let spawn = |extra: &[&str]| {
        let mut cmd = Command::new(BIN);
        cmd.args(common)
            .args(extra)
            .args(["--fabric", &fabric])
            .env("SOFTVERBS_FAULTS", "seed=7 loss=5%");
        let mut p = Peer::spawn("pingpong", cmd, Stderr::Capture).expect("starting pingpong");
        p.close_stdin();
        p
    };
    let mut server = spawn(&[]);
    std::thread::sleep(Duration::from_millis(300));
    let mut client = spawn(&["localhost"]);
    for (p, what) in [(&mut client, "client"), (&mut server, "server")] {
        let lines = p.remaining_lines(WAIT);
        let status = p.wait_exit(WAIT);
        assert!(
            status.as_ref().is_ok_and(|s| s.success()),
            "{what}: {status:?} {lines:?} {}",
            p.stderr()
        );
        assert!(lines.iter().any(|l| l.starts_with("200 iters in ")), "{what}: {lines:?}");
    }
    dir.wait_empty(Duration::from_secs(5)).expect("no segment left");
}
