//! `softverbs demo --break KIND`: each failure drill run as real processes (the initiator and
//! its target process, on a fabric directory of their own), checked for the packet that carries
//! the failure, both sides' completion statuses, the async events and the flushed work
//! requests, all as the run printed them.

mod common;

use common::Run;

/// Run drill `kind`; it must succeed (the drill's failure is the lesson, not the command's).
fn drill(kind: &str, extra: &[&str]) -> String {
    let mut args = vec!["demo", "--break", kind];
    args.extend_from_slice(extra);
    let Run { status, stdout, stderr } = common::softverbs(&format!("drill-{kind}"), &args);
    assert!(status.success(), "demo --break {kind}: {status}\n{stdout}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stdout
}

fn count(out: &str, needle: &str) -> usize {
    out.lines().filter(|l| l.contains(needle)).count()
}

fn has(out: &str, needle: &str) {
    assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
}

const FLUSH: &str = "status=IBV_WC_WR_FLUSH_ERR (5, \"Work Request Flushed Error\") vendor_err=0x0";

#[test]
fn rkey_naks_with_remote_access_error_and_flushes_both_sides() {
    let out = drill("rkey", &[]);
    has(&out, "NAK: remote access error (syndrome 0x62) for PSN 0x001000");
    assert_eq!(count(&out, "NAK: "), 1, "{out}");
    // The WRITE carried a key other than the one the target advertised.
    let advertised = out.split("rkey ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap();
    let sent = out.split("rkey=").nth(1).and_then(|s| s.split_whitespace().next()).unwrap();
    assert_ne!(advertised, sent, "{out}");
    has(
        &out,
        "initiator CQ: wr_id=1 status=IBV_WC_REM_ACCESS_ERR (10, \"remote access error\") vendor_err=0x0",
    );
    has(&out, &format!("initiator CQ: wr_id=2 {FLUSH}"));
    has(&out, "initiator async events: none");
    has(&out, "target async event: IBV_EVENT_QP_ACCESS_ERR on QP");
    has(&out, &format!("target CQ: wr_id=100 {FLUSH}"));
    assert_eq!(count(&out, "IBV_WC_WR_FLUSH_ERR (5"), 2, "{out}");
    assert_eq!(count(&out, "state: IBV_QPS_ERR"), 2, "{out}");
    has(&out, "Why, and how to fix it in a real program:");
}

#[test]
fn bounds_naks_with_remote_access_error() {
    let out = drill("bounds", &[]);
    has(&out, "len=64");
    has(&out, "NAK: remote access error (syndrome 0x62) for PSN 0x001000");
    has(&out, "initiator CQ: wr_id=1 status=IBV_WC_REM_ACCESS_ERR (10,");
    has(&out, &format!("initiator CQ: wr_id=2 {FLUSH}"));
    has(&out, &format!("target CQ: wr_id=100 {FLUSH}"));
    has(&out, "target async event: IBV_EVENT_QP_ACCESS_ERR on QP");
}

#[test]
fn small_recv_is_an_invalid_request_and_a_local_length_error() {
    let out = drill("small-recv", &[]);
    has(&out, "the target posted 1 receive(s) of 16 bytes");
    has(&out, "NAK: invalid request (syndrome 0x61) for PSN 0x001000");
    has(
        &out,
        "initiator CQ: wr_id=1 status=IBV_WC_REM_INV_REQ_ERR (9, \"remote invalid request error\")",
    );
    has(&out, &format!("initiator CQ: wr_id=2 {FLUSH}"));
    has(&out, "target CQ: wr_id=100 status=IBV_WC_LOC_LEN_ERR (1, \"local length error\")");
    has(&out, "target async event: IBV_EVENT_QP_REQ_ERR on QP");
    assert_eq!(count(&out, "state: IBV_QPS_ERR"), 2, "{out}");
}

#[test]
fn no_recv_with_rnr_retry_0_fails_at_the_first_rnr_nak() {
    let out = drill("no-recv", &[]);
    has(&out, "rnr_retry 0, target min_rnr_timer 12 (640 us)");
    assert_eq!(count(&out, "RNR NAK: receiver not ready"), 1, "{out}");
    // No retry left, so no wait: the text says so rather than "wait at least 640 us".
    has(&out, "(syndrome 0x2c); no RNR retry left (rnr_retry 0): no wait");
    assert_eq!(count(&out, "wait at least"), 0, "{out}");
    has(
        &out,
        "initiator CQ: wr_id=1 status=IBV_WC_RNR_RETRY_EXC_ERR (13, \"RNR retry counter exceeded\")",
    );
    has(&out, &format!("initiator CQ: wr_id=2 {FLUSH}"));
    assert_eq!(count(&out, "): PSN 0x001000 again"), 0, "{out}");
    // The target posted nothing, so it has no completion, and its QP is still fine.
    assert_eq!(count(&out, "target CQ:"), 0, "{out}");
    has(&out, "state: IBV_QPS_RTS");
}

#[test]
fn rnr_retries_until_the_late_receive_lands() {
    let out = drill("rnr", &[]);
    let naks = count(&out, "RNR NAK: receiver not ready, no receive posted (syndrome 0x2e); wait at least 1280 us (timer 14)");
    assert!(naks >= 2, "{out}");
    assert_eq!(count(&out, "): PSN 0x001000 again"), naks, "one retry per RNR NAK: {out}");
    has(&out, "RNR retry 1 (rnr_retry 7): PSN 0x001000 again");
    has(&out, "initiator CQ: wr_id=1 status=IBV_WC_SUCCESS (0, \"success\") vendor_err=0x0 opcode=IBV_WC_SEND byte_len=64");
    has(&out, "target CQ: wr_id=100 status=IBV_WC_SUCCESS (0, \"success\") vendor_err=0x0 opcode=IBV_WC_RECV byte_len=64");
    has(&out, "initiator async events: none");
    assert_eq!(count(&out, "IBV_WC_WR_FLUSH_ERR"), 0, "{out}");
}

#[test]
fn peer_dies_is_silence_then_retry_cnt_timeouts_then_retry_exc_err() {
    let out = drill("peer-dies", &[]);
    has(&out, "timeout 10 (4.2 ms), retry_cnt 3");
    // Nothing comes back; the first packet goes out once and then once per timeout.
    assert_eq!(count(&out, "softverbs0 <- "), 0, "{out}");
    for k in 1..=3 {
        has(
            &out,
            &format!("the local ACK timeout (timeout 10 = 4.2 ms) fired; retry {k} of retry_cnt 3"),
        );
    }
    assert_eq!(count(&out, "fired; retry"), 3, "{out}");
    assert_eq!(count(&out, "SEND ONLY                       PSN 0x001000"), 4, "{out}");
    has(
        &out,
        "initiator CQ: wr_id=1 status=IBV_WC_RETRY_EXC_ERR (12, \"transport retry counter exceeded\")",
    );
    has(&out, &format!("initiator CQ: wr_id=2 {FLUSH}"));
    has(&out, "initiator async events: none");
    has(&out, ": destroyed; its NIC answered nothing");
}

#[test]
fn no_gid_is_einval_from_modify_qp() {
    let out = drill("no-gid", &[]);
    has(&out, "failed: EINVAL (errno 22): ibv_modify_qp: IBV_QP_AV: port 1 is RoCE (Ethernet link layer): an address vector needs a GRH with a GID (is_global, dgid, sgid_index); a LID names no port there");
    has(&out, "the QP stays in IBV_QPS_INIT");
    has(&out, "ibv_modify_qp succeeded, QP in IBV_QPS_RTR");
    assert_eq!(count(&out, "wire "), 0, "{out}");
}

#[test]
fn cq_overrun_raises_cq_err_and_loses_completions() {
    let out = drill("cq-overrun", &[]);
    has(&out, "the target posted 3 receive(s)");
    // The first SEND's completion fills the target's CQ; the second overruns it, and the
    // target's QP goes to ERR without acknowledging it (rxe's responder, class G), so the
    // initiator retries it until its retry count runs out and flushes the third.
    has(&out, "initiator CQ: wr_id=1 status=IBV_WC_SUCCESS (0,");
    has(&out, "initiator CQ: wr_id=2 status=IBV_WC_RETRY_EXC_ERR (12,");
    has(&out, "initiator CQ: wr_id=3 status=IBV_WC_WR_FLUSH_ERR (5,");
    has(&out, "initiator QP 0x");
    has(&out, "state: IBV_QPS_ERR");
    has(&out, "target async event: IBV_EVENT_CQ_ERR on CQ");
    has(&out, "CQ overrun: 2 completion(s) were lost because the CQ of 1 entries was full");
    assert!(
        out.lines().any(|l| l.starts_with("  target QP 0x") && l.ends_with("state: IBV_QPS_ERR")),
        "the target's QP is in ERR:\n{out}"
    );
}

#[test]
fn an_unknown_kind_is_a_usage_error_naming_the_kinds() {
    let r = common::softverbs("drill-bad", &["demo", "--break", "nope"]);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "the kinds are rkey, bounds, small-recv, no-recv, rnr, peer-dies, no-gid, cq-overrun"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn lang_zh_tw_translates_a_drills_explanations_and_keeps_its_run() {
    let en = drill("small-recv", &[]);
    let zh = drill("small-recv", &["--lang", "zh-TW"]);
    for line in [
        "線路上（自 ibv_post_send 起的時間；-> 發起端送出，<- 收到）：",
        "為什麼，以及在真實程式中如何修正：",
        "  SEND 必須放得進它所消耗的接收請求：目標端的接收請求以",
        "目標端，在被告知執行結束之後：",
    ] {
        assert!(zh.lines().any(|l| l == line), "{line:?} in:\n{zh}");
    }
    for english in ["Why, and how to fix it", "On the wire (", "A SEND must fit the receive"] {
        assert!(en.contains(english), "{english} in the English run");
        assert!(!zh.contains(english), "{english} left in:\n{zh}");
    }
    // The run's values stay as they are, in Chinese words: the NAK, both sides' statuses,
    // the flush.
    has(&zh, "NAK：無效的請求（syndrome 0x61），PSN 0x001000");
    has(&zh, "發起端 CQ：wr_id=1 status=IBV_WC_REM_INV_REQ_ERR (9,");
    has(&zh, "目標端 CQ：wr_id=100 status=IBV_WC_LOC_LEN_ERR (1,");
    has(&zh, &format!("發起端 CQ：wr_id=2 {FLUSH}"));
    assert!(!zh.contains("initiator CQ:") && !zh.contains("NAK: invalid request"), "{zh}");
    assert_eq!(en.lines().count(), zh.lines().count(), "line for line");
}

#[test]
fn lang_zh_tw_translates_the_demos_explanations_and_keeps_the_wire() {
    let Run { status, stdout: zh, stderr } =
        common::softverbs("demo-zh", &["demo", "--lang", "zh-TW"]);
    assert!(status.success(), "{status}\n{zh}\n{stderr}");
    for line in [
        "softverbs demo：兩個行程之間的 RDMA，一個封包一個封包地看。",
        "從現在起，目標端程式在阻塞的 read() 中睡眠：它的網卡獨自工作。",
        "   只有 FIRST 帶 RETH，只有 LAST 要求 ACK，一個 ACK 就涵蓋",
        "五個操作都以正確的資料完成。",
    ] {
        assert!(zh.lines().any(|l| l == line), "{line:?} in:\n{zh}");
    }
    assert!(!zh.contains("All five operations completed"), "{zh}");
    // Wire lines and verbs names stay English; a completion's fields too, in Chinese words.
    has(&zh, "-> RC RDMA WRITE FIRST");
    has(&zh, "發起端 CQ：wr_id=1 status=IBV_WC_SUCCESS opcode=IBV_WC_SEND");
}

#[test]
fn break_with_in_process_is_a_usage_error() {
    let r = common::softverbs("drill-inproc", &["demo", "--break", "rkey", "--in-process"]);
    assert_eq!(r.status.code(), Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("--break runs two processes"), "{}", r.stderr);
}

/// A drill draws its packet ladder as the demo does: the WRITE and the SEND behind it, the NAK
/// coming back with its syndrome named, and the two completions, in the terminal and as SVG.
#[test]
fn a_drill_draws_its_packet_ladder_in_the_terminal_and_as_svg() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let svg = dir.path().join("rkey.svg");
    let out = drill("rkey", &["--ladder", "--svg", svg.to_str().expect("UTF-8 path")]);
    let ladder: Vec<&str> =
        out.lines().skip_while(|l| !l.starts_with("softverbs demo: packet ladder")).collect();
    let arrows: Vec<&str> = ladder.iter().copied().filter(|l| l.contains("PSN 0x")).collect();
    assert_eq!(arrows.len(), 3, "{out}");
    assert!(arrows[0].contains("├─ RC RDMA WRITE ONLY PSN 0x001000 ─"), "{out}");
    assert!(arrows[1].contains("├─ RC SEND ONLY PSN 0x001001 ─"), "{out}");
    assert!(
        arrows[2].contains("│◄ RC ACKNOWLEDGE PSN 0x001000 NAK remote access error ─"),
        "{out}"
    );
    let cqes: Vec<&str> = ladder.iter().copied().filter(|l| l.contains("● CQE")).collect();
    assert_eq!(cqes.len(), 2, "{out}");
    // In error a completion names its WR by wr_id: its opcode is undefined (0 on rxe).
    assert!(cqes[0].contains("CQE wr_id 1 IBV_WC_REM_ACCESS_ERR"), "{out}");
    assert!(cqes[1].contains("CQE wr_id 2 IBV_WC_WR_FLUSH_ERR"), "{out}");
    let text = std::fs::read_to_string(&svg).expect("the SVG was written");
    assert_eq!(common::xml::well_formed(&text), Ok("svg".to_string()), "{text}");
    assert!(text.contains("NAK remote access error"), "{text}");
    common::xml::renders(&svg).unwrap_or_else(|e| panic!("{e}"));
}

/// The SVGs committed under docs/ (which the ladder tests keep equal to what their commands
/// write) render.
#[test]
fn the_svgs_in_the_docs_render() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let mut n = 0;
    for dir in [docs.join("learn"), docs.clone()] {
        for e in std::fs::read_dir(&dir).expect("the docs directory").flatten() {
            if e.path().extension().is_some_and(|x| x == "svg") {
                common::xml::renders(&e.path()).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
    }
    assert!(n >= 2, "the docs' SVGs were found ({n})");
}

#[test]
fn no_gid_says_it_has_no_ladder() {
    let out = drill("no-gid", &["--ladder"]);
    has(&out, "No packet ladder: ibv_modify_qp refused the QP, so nothing was sent.");
}

/// The terminal ladder of a drill: the rows after its title, up to the legend.
fn ladder_rows(out: &str) -> Vec<&str> {
    out.lines()
        .skip_while(|l| !l.starts_with("softverbs demo: packet ladder"))
        .take_while(|l| !l.starts_with("► packet"))
        .collect()
}

/// rnr_retry 0: the RNR NAK is fatal, so no RNR wait is drawn after it (the QP is in ERR);
/// the PSN sequence error NAK that follows is explained, on the wire and on the ladder.
#[test]
fn no_recv_draws_no_rnr_wait_after_the_fatal_rnr_nak() {
    let out = drill("no-recv", &["--ladder"]);
    let rows = ladder_rows(&out);
    let nak = rows.iter().position(|l| l.contains("RNR NAK (timer")).expect("the RNR NAK row");
    assert!(!out.contains("RNR wait begins"), "{out}");
    assert!(!rows.iter().any(|l| l.contains('┊')), "a waiting lifeline in:\n{out}");
    assert!(rows[nak + 1].contains("» no RNR retry left (rnr_retry 0): no wait"), "{out}");
    has(&out, "no RNR retry left (rnr_retry 0): no wait, the QP goes to IBV_QPS_ERR and the SEND completes with IBV_WC_RNR_RETRY_EXC_ERR");
    if out.contains("NAK: PSN sequence error") {
        has(&out, "which it refused with the RNR NAK (a refused request is not taken, so the next PSN is out of order)");
        has(&out, "» target expects PSN 0x001000 (RNR NAKed), got a later one");
    }
}

/// A dead peer: each round of resends begins with the local ACK timer firing, drawn in the
/// terminal and in the SVG as the legend says, and the last one ends the retries.
#[test]
fn peer_dies_draws_each_local_ack_timeout() {
    let dir = tempfile::tempdir().expect("tmp");
    let svg = dir.path().join("peer-dies.svg");
    let out = drill("peer-dies", &["--ladder", "--svg", svg.to_str().expect("UTF-8 path")]);
    let rows = ladder_rows(&out);
    let timers = rows.iter().filter(|l| l.contains("◆ local ACK timeout: no ACK came")).count();
    let resends = count(&out, "of silence: the local ACK timeout");
    assert!(resends > 0, "{out}");
    assert_eq!(timers, resends, "{out}");
    assert_eq!(
        rows.iter().filter(|l| l.contains("◆ local ACK timeout: no retry left")).count(),
        1,
        "{out}"
    );
    let text = std::fs::read_to_string(&svg).expect("the SVG was written");
    assert_eq!(text.matches(r#"<g class="mark timer">"#).count(), timers + 1, "{text}");
    assert!(text.contains("orange diamond: timer fired"), "{text}");
}

/// The RNR drill: its waits begin with a square and end with a diamond in the SVG.
#[test]
fn rnr_drill_marks_waits_and_timers_apart() {
    let dir = tempfile::tempdir().expect("tmp");
    let svg = dir.path().join("rnr.svg");
    let out = drill("rnr", &["--svg", svg.to_str().expect("UTF-8 path")]);
    let text = std::fs::read_to_string(&svg).expect("the SVG was written");
    let waits = text.matches(r#"<g class="mark rnrwait">"#).count();
    assert!(waits >= 2, "{out}\n{text}");
    assert_eq!(text.matches(r#"<g class="mark timer">"#).count(), waits, "{text}");
}
