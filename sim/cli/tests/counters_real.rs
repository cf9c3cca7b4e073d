//! `softverbs counters` on a real run: this process and a `softverbs demo --target` process
//! connect an RC QP over a shared-memory fabric and move a known number of one-packet
//! messages; a third process, `softverbs counters`, then shows exactly the counts this
//! process's engine and port keep, and the target's port the mirror image of them.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use nic_model::soft::counters::COUNTERS;
use nic_model::soft::Soft;
use softverbs_sim::peer::{FabricDir, Peer, Stderr};
use verbs_api::conn::{self, ConnOpts, Endpoint};
use verbs_api::*;

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
const WAIT: Duration = Duration::from_secs(30);
/// RDMA WRITEs of one packet each, one at a time (so each has its own ACK).
const WRITES: u64 = 20;
/// Where they land in the target's MR (clear of the demo's own areas).
const WRITE_AT: u64 = 20_000;

/// `softverbs counters ARGS --fabric DIR`: (exit status, stdout, stderr).
fn counters(dir: &FabricDir, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("counters")
        .args(args)
        .arg("--fabric")
        .arg(dir.path())
        .output()
        .expect("running softverbs counters");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The counters of the port owned by `pid` in `softverbs counters --json` output.
fn port_of(json: &str, pid: u32) -> Option<BTreeMap<String, u64>> {
    let at = json.find(&format!("\"pid\":{pid},\"counters\":{{"))?;
    let body = &json[at..];
    let body = &body[body.find('{')? + 1..];
    let body = &body[..body.find('}')?];
    Some(
        body.split(',')
            .map(|kv| {
                let (k, v) = kv.split_once(':').expect("name:value");
                (k.trim_matches('"').to_string(), v.parse().expect("a number"))
            })
            .collect(),
    )
}

#[test]
fn counters_of_another_process_match_the_engines_counts_exactly() {
    let dir = FabricDir::create(&format!("softverbs-counters-real-{}", std::process::id()))
        .expect("creating the fabric directory");
    let mut cmd = Command::new(BIN);
    cmd.args(["demo", "--target", "-d", "softverbs0", "--fabric"]).arg(dir.path());
    let mut target = Peer::spawn("the target", cmd, Stderr::Capture).expect("starting the target");
    let target_pid = target.pid().expect("a process");
    let me = std::process::id();
    {
        let soft = Soft::shared_memory(Some(dir.path())).expect("opening the fabric");
        // Packets, not direct reach: the counters this test checks count packets.
        soft.set_reach(false);
        let ctx = soft.open("softverbs0").expect("opening softverbs0");
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let ep = Endpoint::new(&ctx, QpType::Rc, cap, 16, 4096).expect("an endpoint");
        let info = ep.info(0x100).expect("QP info");
        let (remote, mr) = target.swap_info(&info, None, WAIT).expect("the target's INFO");
        let (raddr, rkey) = mr.expect("the target offers its MR");
        let opts = ConnOpts { mtu: Mtu::Mtu1024, ..ConnOpts::default() };
        conn::connect(&ep.qp, 0x100, &remote, &opts).expect("connecting");
        target.expect_line("READY", WAIT).expect("the target is ready");

        for i in 0..WRITES {
            ep.mr.write(0, &[i as u8; 64]).unwrap();
            let sge = [ep.mr.sge(0, 64)];
            let wr = SendWr {
                wr_id: i,
                sg_list: &sge,
                opcode: WrOpcode::RdmaWrite,
                send_flags: SendFlags::SIGNALED,
                rdma: RdmaTarget { remote_addr: raddr + WRITE_AT + 64 * i, rkey },
                ..Default::default()
            };
            ep.qp.post_send(&[wr]).expect("post_send");
            let wc = ep.cq.poll_n(1, WAIT).expect("the WRITE's completion");
            assert_eq!((wc[0].wr_id, wc[0].status), (i, WcStatus::Success));
        }
        // One SEND into the receive the target posted.
        ep.mr.write(0, b"counted").unwrap();
        let sge = [ep.mr.sge(0, 7)];
        let wr = SendWr {
            wr_id: 99,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            send_flags: SendFlags::SIGNALED,
            ..Default::default()
        };
        ep.qp.post_send(&[wr]).expect("post_send");
        let wc = ep.cq.poll_n(1, WAIT).expect("the SEND's completion");
        assert_eq!((wc[0].wr_id, wc[0].status), (99, WcStatus::Success));

        let stats = soft.stats("softverbs0").expect("stats");
        assert_eq!(stats.nic.tx_packets, WRITES + 1, "one packet per message: {stats:?}");
        assert_eq!(stats.nic.rx_packets, WRITES + 1, "one ACK per message: {stats:?}");
        assert_eq!(stats.port.xmit_packets, WRITES + 1);
        let want = stats.counters();

        // The owner publishes when its NIC thread idles: wait (bounded) until it has.
        let deadline = Instant::now() + WAIT;
        let (mine, theirs, json) = loop {
            let (status, json, err) = counters(&dir, &["--json"]);
            assert_eq!(status, 0, "{err}");
            let mine = port_of(&json, me).unwrap_or_else(|| panic!("my port in {json}"));
            let theirs = port_of(&json, target_pid).unwrap_or_else(|| panic!("target in {json}"));
            let done = COUNTERS.iter().zip(want).all(|(c, v)| mine.get(c.name) == Some(&v))
                && theirs["port_rcv_packets"] == WRITES + 1
                && theirs["port_xmit_packets"] == WRITES + 1;
            if done || Instant::now() > deadline {
                break (mine, theirs, json);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for (c, v) in COUNTERS.iter().zip(want) {
            assert_eq!(mine.get(c.name), Some(&v), "{}: {json}", c.name);
        }
        assert!(json.contains("\"device\":\"softverbs0\",\"port\":1,\"lid\":0,"), "{json}");
        // The GID the port's segment carries is one of the port's GIDs (the table may hold a
        // link-local one first, as rxe's does).
        let gids: Vec<String> = (0..16)
            .filter_map(|i| ctx.query_gid(1, i).ok())
            .filter(|g| g.0 != [0; 16])
            .map(|g| softverbs::cmd::gid_ntop(&g))
            .collect();
        assert!(
            gids.iter().any(|g| json.contains(&format!("\"gid\":\"{g}\",\"pid\":{me},"))),
            "{gids:?}: {json}"
        );
        assert_eq!(mine["sent_pkts"], WRITES + 1);
        assert_eq!(mine["retransmitted_pkts"], 0);
        // The target saw the mirror image: every packet sent arrived, every ACK came back.
        assert_eq!(theirs["port_rcv_packets"], mine["port_xmit_packets"], "{json}");
        assert_eq!(theirs["port_xmit_packets"], mine["port_rcv_packets"], "{json}");
        assert_eq!(theirs["port_rcv_data"], mine["port_xmit_data"], "{json}");
        assert_eq!(theirs["rcvd_pkts"], WRITES + 1, "{json}");
        assert_eq!(theirs["sent_pkts"], mine["rcvd_pkts"], "{json}");
        assert_eq!(theirs["duplicate_request"], 0, "{json}");

        // The table: one column per port, one row per counter.
        let (status, table, err) = counters(&dir, &["-d", "softverbs0"]);
        assert_eq!(status, 0, "{err}");
        assert!(table.contains(": 2 live ports\n"), "{table}");
        let row = |name: &str| {
            let l = table.lines().find(|l| l.split_whitespace().next() == Some(name));
            l.unwrap_or_else(|| panic!("{name} in {table}"))
                .split_whitespace()
                .skip(1)
                .map(String::from)
                .collect::<Vec<_>>()
        };
        // A RoCE port has no LID (0, as rxe's): the table shows none.
        assert!(!table.lines().any(|l| l.trim_start().starts_with("LID")), "{table}");
        let pids = row("pid");
        let col = pids.iter().position(|p| *p == me.to_string()).expect("my column");
        assert_eq!(row("port_xmit_packets")[col], (WRITES + 1).to_string(), "{table}");
        assert_eq!(row("sent_pkts")[col], (WRITES + 1).to_string(), "{table}");

        // --watch draws samples with rates, bounded by --count.
        let (status, watched, err) = counters(&dir, &["--watch", "0.05", "--count", "2", "--json"]);
        assert_eq!(status, 0, "{err}");
        assert_eq!(watched.lines().count(), 2, "{watched}");
        assert!(watched.lines().nth(1).unwrap().contains("\"per_second\":{"), "{watched}");

        // A device no process has open is a usage error naming it.
        let (status, _, err) = counters(&dir, &["-d", "softverbs7"]);
        assert_eq!(status, 2, "{err}");
        assert!(err.contains("-d softverbs7: no live port of a device named softverbs7"), "{err}");
        let (status, _, err) = counters(&dir, &["--watch", "0"]);
        assert_eq!(status, 2, "{err}");

        target.send_line("DONE").expect("telling the target");
        let cq = target.expect_line("target CQ:", WAIT).expect("the target's completion");
        assert!(cq.contains("status=IBV_WC_SUCCESS opcode=IBV_WC_RECV byte_len=7"), "{cq}");
        let deadline = Instant::now() + WAIT;
        while target.recv_line(deadline.saturating_duration_since(Instant::now())).expect("BYE")
            != "BYE"
        {}
        target.wait_exit(WAIT).expect("the target exits");
    }
    dir.wait_empty(Duration::from_secs(5)).expect("no segment left");
}

#[test]
fn a_dead_owners_segment_is_not_shown_and_says_why() {
    let dir = FabricDir::create(&format!("softverbs-counters-dead-{}", std::process::id()))
        .expect("creating the fabric directory");
    let mut cmd = Command::new(BIN);
    cmd.args(["demo", "--target", "-d", "softverbs0", "--fabric"]).arg(dir.path());
    let mut target = Peer::spawn("the target", cmd, Stderr::Capture).expect("starting the target");
    let pid = target.pid().expect("a process");
    // Its INFO line comes once its device, and so its segment, exists.
    target.expect_line("INFO ", WAIT).expect("the target's INFO");
    target.kill();
    let (status, out, err) = counters(&dir, &[]);
    assert_eq!(status, 0, "{err}");
    assert!(out.contains(": no live ports\n"), "{out}");
    let note =
        out.lines().find(|l| l.starts_with("not shown: ")).unwrap_or_else(|| panic!("{out}"));
    assert!(
        note.ends_with(&format!(
            "port-1.inbox: owner pid {pid} is dead (`softverbs fabric clean` removes it)"
        )),
        "{note}"
    );
    let (status, json, err) = counters(&dir, &["--json"]);
    assert_eq!(status, 0, "{err}");
    assert!(json.contains("\"ports\":[],\"not_shown\":[{\"path\":"), "{json}");
    let clean = Command::new(BIN)
        .args(["fabric", "clean", "--fabric"])
        .arg(dir.path())
        .output()
        .expect("running softverbs fabric clean");
    assert!(clean.status.success());
    dir.wait_empty(Duration::from_secs(5)).expect("no segment left");
}

#[test]
fn the_guide_names_every_counter() {
    let guide = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide.md");
    let text = std::fs::read_to_string(&guide).expect("reading docs/guide.md");
    for c in COUNTERS {
        assert!(
            text.contains(&format!("| `{}` | {} |", c.name, c.what.replace('|', "\\|"))),
            "docs/guide.md's counter table lacks {} ({})",
            c.name,
            c.what
        );
    }
}
