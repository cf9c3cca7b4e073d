//! The fast paths (post, responder, completer) against the general paths they shortcut, as
//! properties.

use super::*;

// ---------------- the post fast path ----------------

/// One generated send WR for the fast-path property test.
#[derive(Clone, Debug)]
struct GenWr {
    opcode: WrOpcode,
    len: u32,
    /// 0: gather list; 1: IBV_SEND_INLINE from the gather list; 2: `inline_data`.
    inline: u8,
    flags: SendFlags,
    imm: u32,
    /// 0: good keys; 1: a bad lkey; 2: an extra zero-length SGE with a bad lkey.
    keys: u8,
}

fn gen_wr() -> impl proptest::strategy::Strategy<Value = GenWr> {
    use proptest::prelude::*;
    let opcode = prop_oneof![
        4 => Just(WrOpcode::Send),
        2 => Just(WrOpcode::SendWithImm),
        2 => Just(WrOpcode::RdmaWrite),
        2 => Just(WrOpcode::RdmaWriteWithImm),
        1 => Just(WrOpcode::RdmaRead),
    ];
    let len = prop_oneof![4 => 0u32..=72, 1 => 0u32..=400];
    let flags = (any::<bool>(), any::<bool>(), proptest::bool::weighted(0.1)).prop_map(
        |(signaled, solicited, fence)| {
            let mut f = SendFlags::empty();
            f.set(SendFlags::SIGNALED, signaled);
            f.set(SendFlags::SOLICITED, solicited);
            f.set(SendFlags::FENCE, fence);
            f
        },
    );
    let keys = prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
    (opcode, len, 0u8..3, flags, any::<u32>(), keys).prop_map(
        |(opcode, len, inline, flags, imm, keys)| GenWr { opcode, len, inline, flags, imm, keys },
    )
}

/// Posts `w` on `p.a` and returns the outcome as text (errors are compared by message).
fn post_gen(p: &mut Pair, a: &Side, b: &Side, w: &GenWr, wr_id: u64) -> String {
    let data = pattern(w.len as usize, wr_id as u8);
    a.mem.write(4096, &data).unwrap();
    let lkey = if w.keys == 1 { a.key ^ 0x100 } else { a.key };
    let mut sges = vec![Sge { addr: a.mem.addr() + 4096, length: w.len, lkey }];
    if w.keys == 2 {
        sges.push(Sge { addr: a.mem.addr(), length: 0, lkey: a.key ^ 0x200 });
    }
    let mut flags = w.flags;
    if w.inline == 1 {
        flags |= SendFlags::INLINE;
    }
    let wr = SendWr {
        wr_id,
        sg_list: if w.inline == 2 { &[] } else { &sges },
        inline_data: (w.inline == 2).then_some(&data[..]),
        opcode: w.opcode,
        send_flags: flags,
        imm_data: w.imm,
        rdma: RdmaTarget { remote_addr: b.mem.addr() + 8192, rkey: b.key },
        ..Default::default()
    };
    let now = p.now;
    format!("{:?}", p.a.post_send(now, a.qpn, &[wr]))
}

/// The send queue of `qp` as text, with addresses relative to their MRs (two pairs' MRs lie
/// at different addresses).
fn wqes(qp: &Qp, a: &Side, b: &Side) -> String {
    let (la, lb) = (a.mem.addr(), b.mem.addr());
    let rel = |addr: u64, base: u64| addr.wrapping_sub(base);
    let list: Vec<String> = qp
        .sq
        .iter()
        .map(|w| {
            let sges: Vec<_> = w.sges.iter().map(|s| (rel(s.addr, la), s.length, s.lkey)).collect();
            let inline = w.inline.as_deref().map(<[u8]>::to_vec);
            format!(
                "{} {:?} sig={} se={} fence={} sges={sges:?} inline={inline:?} len={} \
                 rdma=({:#x}, {:#x}) imm={:#x} psn={:?} npsn={} started={}",
                w.wr_id,
                w.opcode,
                w.signaled,
                w.solicited,
                w.fence,
                w.len,
                rel(w.rdma.remote_addr, lb),
                w.rdma.rkey,
                w.imm,
                w.first_psn,
                w.npsn,
                w.started
            )
        })
        .collect();
    list.join("\n")
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]
    /// The fast path (`req::post_now`, taken when the NIC has a wire to send on) and the
    /// general path (the same NIC with no wire lent) agree on everything a WR leads to: the
    /// post's result, the datagrams to the byte, the queue and requester state, and, after the
    /// exchange, every completion on both sides and the bytes that landed.
    #[test]
    fn the_post_fast_path_does_what_the_general_path_does(
        wrs in proptest::collection::vec(gen_wr(), 1..12)
    ) {
        // The two pairs share their MRs' memory, so that addresses (in SGEs and RETHs, and so
        // in datagrams) are the same in both.
        let (mem_a, mem_b) = (MrMemory::allocate(MR_LEN).unwrap(), MrMemory::allocate(MR_LEN).unwrap());
        let pair = || {
            let mut p = Pair::new();
            let a = side_on_memory(&mut p.a, ALL, 64, mem_a.clone());
            let b = side_on_memory(&mut p.b, ALL, 64, mem_b.clone());
            connect(&mut p.a, a.qpn, 2, b.qpn, ConnOpts::default());
            connect(&mut p.b, b.qpn, 1, a.qpn, ConnOpts::default());
            (p, a, b)
        };
        let (mut fast, fa, fb) = pair();
        let (mut slow, sa, sb) = pair();
        let wire = FakeEgress { to: 2, ..FakeEgress::default() };
        fast.a.set_egress(Some(Box::new(wire.clone())));
        for (p, b) in [(&mut fast, &fb), (&mut slow, &sb)] {
            for id in 0..32 {
                p.b.post_recv(b.qpn, &[RecvWr { wr_id: id, sg_list: &[sge(b, 16384 + 512 * id, 512)] }])
                    .unwrap();
            }
        }
        for (i, w) in wrs.iter().enumerate() {
            let id = i as u64 + 1;
            let got = post_gen(&mut fast, &fa, &fb, w, id);
            let want = post_gen(&mut slow, &sa, &sb, w, id);
            proptest::prop_assert_eq!(&got, &want, "post result of {:?}", w);
            let mut fast_out = wire.take();
            fast_out.extend(std::iter::from_fn(|| fast.a.poll_transmit()).map(|t| t.data));
            let slow_out: Vec<Vec<u8>> =
                std::iter::from_fn(|| slow.a.poll_transmit()).map(|t| t.data).collect();
            proptest::prop_assert_eq!(&fast_out, &slow_out, "datagrams of {:?}", w);
            let (fq, sq) = (&fast.a.qps[&fa.qpn], &slow.a.qps[&sa.qpn]);
            proptest::prop_assert_eq!(wqes(fq, &fa, &fb), wqes(sq, &sa, &sb));
            proptest::prop_assert_eq!(format!("{:?}", fq.req), format!("{:?}", sq.req));
            proptest::prop_assert_eq!(fast.a.next_timeout(), slow.a.next_timeout());
            // Deliver them, and the responses, on both pairs alike.
            for (p, out) in [(&mut fast, fast_out), (&mut slow, slow_out)] {
                let now = p.now;
                for d in out {
                    p.b.handle_packet(now, &d);
                }
                while let Some(t) = p.b.poll_transmit() {
                    p.a.handle_packet(now, &t.data);
                }
                p.a.set_egress(None);
                while let Some(t) = p.a.poll_transmit() {
                    p.b.handle_packet(now, &t.data);
                }
                while let Some(t) = p.b.poll_transmit() {
                    p.a.handle_packet(now, &t.data);
                }
            }
            fast.a.set_egress(Some(Box::new(wire.clone())));
            let key = |w: &WorkCompletion| (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data, w.wc_flags, w.qp_num != 0);
            let fw: Vec<_> = poll_all(&mut fast.a, fa.cq).iter().chain(poll_all(&mut fast.b, fb.cq).iter()).map(key).collect();
            let sw: Vec<_> = poll_all(&mut slow.a, sa.cq).iter().chain(poll_all(&mut slow.b, sb.cq).iter()).map(key).collect();
            // (The bytes that land follow: the same datagrams reach responders in the same
            // state; the other engine tests check what lands.)
            proptest::prop_assert_eq!(fw, sw, "completions after {:?}", w);
        }
    }
}

// ---------------- the responder's fast path ----------------

/// What befalls a datagram in the fast-path properties: mostly nothing; now and then it is
/// lost, repeated, damaged, late, or arrives from a third port (which neither path may take).
fn gen_fate() -> impl proptest::strategy::Strategy<Value = Fate> {
    use proptest::prelude::*;
    prop_oneof![
        12 => Just(Fate::Deliver),
        1 => Just(Fate::Drop),
        1 => Just(Fate::Duplicate),
        1 => any::<usize>().prop_map(Fate::Damage),
        1 => Just(Fate::Late),
        1 => Just(Fate::Stranger),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// The responder's fast path (`resp::receive_send_only`, taken by `handle_packet_at`) and
    /// the general one (`handle_packet_general`) do the same with whatever arrives: SENDs of
    /// one packet and of several, with and without immediate data, into receives big enough
    /// and too small, or none; lost, repeated, damaged and late datagrams, datagrams from a
    /// third port, and the requester's retransmissions. Two responders, identical but for the
    /// path, see the same datagrams; what they send back, every completion, what lands in
    /// their memory, their counters and their responder state must be the same.
    #[test]
    fn the_receive_fast_path_does_what_the_general_path_does(
        steps in proptest::collection::vec(
            (
                0u32..600,
                proptest::option::of(proptest::prelude::any::<u32>()),
                0u8..3,
                proptest::sample::select(vec![64u32, 700, 4]),
                proptest::collection::vec(gen_fate(), 0..8),
            ),
            1..10,
        )
    ) {
        let (mut p, a, fb) = setup(ConnOpts::default());
        // The general-path responder: made exactly as the pair's, so it has the same QPN.
        let mut slow = Nic::new(NicConfig::new("b", 2));
        let sb = side(&mut slow, ALL);
        proptest::prop_assert_eq!(sb.qpn, fb.qpn);
        connect(&mut slow, sb.qpn, 1, a.qpn, ConnOpts::default());
        let mut next_recv = 0u64;
        for (i, (len, imm, recvs, recv_len, fates)) in steps.iter().enumerate() {
            // Receives, the same on both responders.
            for _ in 0..*recvs {
                let off = 1024 * (next_recv % 32);
                for (nic, s) in [(&mut p.b, &fb), (&mut slow, &sb)] {
                    nic.post_recv(s.qpn, &[RecvWr { wr_id: next_recv, sg_list: &[sge(s, off, *recv_len)] }])
                        .unwrap();
                }
                next_recv += 1;
            }
            let data = pattern(*len as usize, i as u8);
            a.mem.write(0, &data).unwrap();
            let sg = [sge(&a, 0, *len)];
            let wr = SendWr {
                wr_id: i as u64,
                sg_list: &sg,
                opcode: if imm.is_some() { WrOpcode::SendWithImm } else { WrOpcode::Send },
                imm_data: imm.unwrap_or(0),
                send_flags: signaled(),
                ..Default::default()
            };
            let now = p.now;
            p.a.post_send(now, a.qpn, &[wr]).unwrap();
            // A retransmission now and then: the ACK timer, already due.
            if i % 3 == 2 {
                p.now += 1 << 30;
                p.a.handle_timeout(p.now);
            }
            let sent = std::iter::from_fn(|| p.a.poll_transmit()).map(|t| t.data);
            let arriving = befall(sent, &mut fates.iter().copied());
            let now = p.now;
            for d in &arriving {
                p.b.handle_packet_at(&mut Now::At(now), d);
                slow.handle_packet_general(&mut Now::At(now), d, packet::Icrc::Carried);
            }
            let fast_out: Vec<Vec<u8>> = std::iter::from_fn(|| p.b.poll_transmit()).map(|t| t.data).collect();
            let slow_out: Vec<Vec<u8>> = std::iter::from_fn(|| slow.poll_transmit()).map(|t| t.data).collect();
            proptest::prop_assert_eq!(&fast_out, &slow_out, "what the responders sent, step {}", i);
            let fw = poll_all(&mut p.b, fb.cq);
            let sw = poll_all(&mut slow, sb.cq);
            proptest::prop_assert_eq!(&fw, &sw, "receive completions, step {}", i);
            proptest::prop_assert_eq!(p.b.stats(), slow.stats());
            // The responder state, with addresses made relative to the MR (the two
            // responders' memories lie at different addresses).
            let resp = |r: &qp::RespState, base: u64| {
                let recv = r.recv.as_ref().map(|(w, off)| {
                    let sges: Vec<_> =
                        w.sges.iter().map(|s| (s.addr - base, s.length, s.lkey)).collect();
                    (w.wr_id, sges, w.len, *off)
                });
                (r.epsn, r.msn, r.nak_sent, recv, r.write.is_some(), r.resources.len(), r.drop_msg)
            };
            proptest::prop_assert_eq!(
                resp(&p.b.qps[&fb.qpn].resp, fb.mem.addr()),
                resp(&slow.qps[&sb.qpn].resp, sb.mem.addr())
            );
            proptest::prop_assert_eq!(p.b.qps[&fb.qpn].rq.len(), slow.qps[&sb.qpn].rq.len());
            proptest::prop_assert_eq!(read_mem(&fb, 0, 32 * 1024), read_mem(&sb, 0, 32 * 1024));
            // The requester hears the fast responder.
            for d in fast_out {
                p.a.handle_packet(now, &d);
            }
            let _ = poll_all(&mut p.a, a.cq);
        }
    }
}

// ---------------- the completer's fast path ----------------

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// The completer's fast path (`comp::handle_acknowledge`, which `handle_packet_at` takes
    /// for an RC ACKNOWLEDGE read by `packet::peek_rc_acknowledge`) and the general one
    /// (`handle_packet_general`) do the same with whatever the responder sends back: ACKs, RNR
    /// NAKs (no receive posted), NAKs (a bad rkey), READ responses among them; lost, repeated,
    /// damaged, late and from a third port, with the ACK timer firing now and then. Two
    /// requesters, identical but for the path, post the same WRs and get the same responses;
    /// what they send, every completion, the bytes READs bring back, their counters, send
    /// queues, requester state and timers must be the same.
    #[test]
    fn the_acknowledge_fast_path_does_what_the_general_path_does(
        steps in proptest::collection::vec(
            (
                proptest::sample::select(vec![0u8, 0, 0, 1, 2, 2, 3, 3, 4]),
                0u32..600,
                0u8..3,
                proptest::collection::vec(gen_fate(), 0..8),
            ),
            1..10,
        )
    ) {
        let opts = ConnOpts { rnr_retry: 2, retry_cnt: 3, ..Default::default() };
        let (mut p, fa, b) = setup(opts);
        // The general-path requester: made exactly as the pair's, so it has the same QPN.
        let mut slow = Nic::new(NicConfig::new("a", 1));
        let sa = side(&mut slow, ALL);
        proptest::prop_assert_eq!(sa.qpn, fa.qpn);
        connect(&mut slow, sa.qpn, 2, b.qpn, opts);
        let mut recv_id = 0u64;
        for (i, (op, len, recvs, fates)) in steps.iter().enumerate() {
            for _ in 0..*recvs {
                let off = 1024 * (recv_id % 16);
                p.b.post_recv(b.qpn, &[RecvWr { wr_id: recv_id, sg_list: &[sge(&b, off, 1024)] }])
                    .unwrap();
                recv_id += 1;
            }
            let data = pattern(*len as usize, i as u8);
            let (opcode, rkey) = match op {
                0 => (WrOpcode::Send, b.key),
                1 => (WrOpcode::SendWithImm, b.key),
                2 => (WrOpcode::RdmaWrite, b.key),
                3 => (WrOpcode::RdmaRead, b.key),
                _ => (WrOpcode::RdmaWrite, b.key ^ 0x100),
            };
            let now = p.now;
            let mut posted = Vec::new();
            for (nic, s) in [(&mut p.a, &fa), (&mut slow, &sa)] {
                s.mem.write(0, &data).unwrap();
                let local = if opcode == WrOpcode::RdmaRead { 16384 + 1024 * (i as u64 % 16) } else { 0 };
                let sg = [sge(s, local, *len)];
                let wr = SendWr {
                    wr_id: i as u64,
                    sg_list: &sg,
                    opcode,
                    imm_data: i as u32,
                    send_flags: signaled(),
                    rdma: RdmaTarget { remote_addr: b.mem.addr() + 32768, rkey },
                    ..Default::default()
                };
                posted.push(format!("{:?}", nic.post_send(now, s.qpn, &[wr])));
            }
            proptest::prop_assert_eq!(&posted[0], &posted[1], "post results, step {}", i);
            // Rounds of: what the requesters send (the same), the responder's answers to it,
            // and those answers, after what befalls them on the way, to both requesters.
            let mut fates = fates.iter().copied();
            for round in 0..4 {
                if round == 2 && i % 3 == 2 {
                    // The ACK timer (or the RNR back-off), due by now.
                    p.now += 1 << 30;
                    let now = p.now;
                    p.a.handle_timeout(now);
                    slow.handle_timeout(now);
                }
                let fast_out: Vec<Vec<u8>> = std::iter::from_fn(|| p.a.poll_transmit()).map(|t| t.data).collect();
                let slow_out: Vec<Vec<u8>> = std::iter::from_fn(|| slow.poll_transmit()).map(|t| t.data).collect();
                proptest::prop_assert_eq!(&fast_out, &slow_out, "what the requesters sent, step {} round {}", i, round);
                let now = p.now;
                for d in &fast_out {
                    p.b.handle_packet(now, d);
                }
                let sent = std::iter::from_fn(|| p.b.poll_transmit()).map(|t| t.data);
                let arriving = befall(sent, &mut fates);
                for d in &arriving {
                    p.a.handle_packet_at(&mut Now::At(now), d);
                    slow.handle_packet_general(&mut Now::At(now), d, packet::Icrc::Carried);
                }
                let fw = poll_all(&mut p.a, fa.cq);
                let sw = poll_all(&mut slow, sa.cq);
                proptest::prop_assert_eq!(&fw, &sw, "completions, step {} round {}", i, round);
                proptest::prop_assert_eq!(p.a.stats(), slow.stats());
                let (fq, sq) = (&p.a.qps[&fa.qpn], &slow.qps[&sa.qpn]);
                proptest::prop_assert_eq!(fq.state, sq.state);
                proptest::prop_assert_eq!(wqes(fq, &fa, &b), wqes(sq, &sa, &b));
                proptest::prop_assert_eq!(format!("{:?}", fq.req), format!("{:?}", sq.req));
                proptest::prop_assert_eq!(p.a.next_timeout(), slow.next_timeout());
                proptest::prop_assert_eq!(read_mem(&fa, 16384, 16384), read_mem(&sa, 16384, 16384));
            }
            let _ = poll_all(&mut p.b, b.cq);
        }
    }
}
