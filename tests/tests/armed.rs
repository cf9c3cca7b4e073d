//! An event-driven program that waits in `poll`/`epoll` on a completion channel's fd calls no
//! verb while it waits, so nothing tells the soft device that it stopped calling in: while a
//! CQ with a channel is armed, the device's NIC thread must run the engine (not stand by),
//! or the completion the program waits for comes only when the standby interval ends.
//!
//! Its own test binary: the standby interval is made long (`SOFTVERBS_STANDBY_US`, read when
//! the provider is made) so that a completion left to the end of a standby is unmistakable.

use std::time::{Duration, Instant};

use softverbs_sim::conn::{connect, create_qp_on, ConnOpts, PortAddress};
use softverbs_tests::RcPair;
use verbs_api::*;

const WAIT: Duration = Duration::from_secs(10);
/// The standby interval of this binary's devices.
const STANDBY: Duration = Duration::from_millis(400);
/// At once, with room for a loaded machine; far below [`STANDBY`].
const PROMPT: Duration = Duration::from_millis(50);

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Waits (at most [`WAIT`]) in `poll` until `fd` is readable; whether it became so.
fn poll_readable(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd; the channel's fd is open while the channel lives.
    let n = unsafe { libc::poll(&mut p, 1, WAIT.as_millis() as i32) };
    n == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn a_program_waiting_in_poll_on_an_armed_cqs_channel_gets_its_completion_without_a_standby() {
    std::env::set_var("SOFTVERBS_STANDBY_US", STANDBY.as_micros().to_string());
    for reach in [true, false] {
        let opts = ConnOpts::default();
        let p =
            RcPair::new(&format!("armed_{reach}"), cap(), 1 << 16, &opts, |s| s.set_reach(reach));
        let side = |ctx: &Context, pd: &ProtectionDomain| {
            let ch = ctx.create_comp_channel().expect("channel");
            let cq = ctx.create_cq(16, Some(&ch), 0).expect("cq");
            let qp = create_qp_on(pd, &cq, QpType::Rc, cap()).expect("qp");
            (ch, cq, qp)
        };
        let (cha, cqa, qa) = side(&p.a.ctx, &p.a.pd);
        let (chb, cqb, qb) = side(&p.b.ctx, &p.b.pd);
        let ia = PortAddress::of(&p.a.ctx, None).unwrap().qp_info(&qa, 0x300);
        let ib = PortAddress::of(&p.b.ctx, None).unwrap().qp_info(&qb, 0x400);
        connect(&qa, 0x300, &ib, &opts).expect("connect a");
        connect(&qb, 0x400, &ia, &opts).expect("connect b");
        // b waits for a SEND, a for the SEND's completion; both arm and sleep in poll.
        qb.post_recv(&[RecvWr { wr_id: 5, sg_list: &[p.b.mr.sge(0, 64)] }]).unwrap();
        cqb.req_notify(false).unwrap();
        cqa.req_notify(false).unwrap();
        let (fda, fdb) = (cha.fd().unwrap(), chb.fd().unwrap());
        let posted = Instant::now();
        qa.post_send(&[SendWr {
            wr_id: 6,
            inline_data: Some(b"evented!"),
            send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ..Default::default()
        }])
        .unwrap();
        assert!(poll_readable(fda), "[reach {reach}] a's event");
        let delay = posted.elapsed();
        assert!(poll_readable(fdb), "[reach {reach}] b's event");
        for (ch, cq) in [(&cha, &cqa), (&chb, &cqb)] {
            let ev = ch.get_cq_event(Some(Duration::ZERO)).expect("the event");
            assert!(ev == *cq, "[reach {reach}] the event names the armed CQ");
            ch.ack_cq_events(&ev, 1);
        }
        let sent = cqa.poll_n(1, WAIT).unwrap();
        let want = WorkCompletion {
            wr_id: 6,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 8,
            qp_num: qa.qp_num(),
            ..Default::default()
        };
        assert_eq!(sent, vec![want], "[reach {reach}]");
        let got = cqb.poll_n(1, WAIT).unwrap();
        assert_eq!((got[0].wr_id, got[0].status, got[0].byte_len), (5, WcStatus::Success, 8));
        assert_eq!(p.b.mr.read_vec(0, 8).unwrap(), b"evented!");
        assert!(delay < PROMPT, "[reach {reach}] a's completion came {delay:?} after the post");
    }
}
