//! The NIC's half of congestion control inside the world: the reaction point's per-flow
//! limiter between the engine's transmit queue and the link, ECT on what it sends, and the
//! notification point's CNPs. Runs only when the world has a [`CcConfig`].

use nic_model::engine::{slot_of_ip, Transmit};

use super::{
    build_cnp, dest_qp, ecn_of, is_cnp, is_data, set_ecn, CcConfig, CcState, CcStats, Flow,
    FlowKey, Pacer, ECN_CE, ECN_ECT0, ECN_NOT_ECT,
};
use crate::world::{NodeId, World};

/// What the limiter lets a node send now.
pub(crate) enum CcPoll {
    /// This datagram.
    Take(Transmit),
    /// Nothing now; the first held-back flow may send at this time.
    Wait(u64),
    /// Nothing is queued.
    Empty,
}

impl World {
    /// Turn congestion control on (or off, with `None`) for every NIC: ECT on their data
    /// packets, CNPs for CE-marked packets they receive, and a rate limiter per flow driven by
    /// `cfg.algorithm`. Marking is set per link ([`crate::world::LinkParams::ecn`]). Call it
    /// before traffic starts; off (the default), nothing of it runs.
    pub fn set_congestion_control(&mut self, cfg: Option<CcConfig>) {
        self.cc = cfg.map(|c| Box::new(CcState::new(c)));
    }

    /// What `node`'s congestion control did (zeros when it is off or the node is a switch).
    pub fn cc_stats(&self, node: NodeId) -> CcStats {
        self.cc
            .as_ref()
            .and_then(|c| c.nodes.get(node))
            .map(|n| n.stats.clone())
            .unwrap_or_default()
    }

    /// Every node's [`World::cc_stats`] summed.
    pub fn cc_total_stats(&self) -> CcStats {
        let mut t = CcStats::default();
        for n in self.cc.iter().flat_map(|c| c.nodes.iter()) {
            t.add(&n.stats);
        }
        t
    }

    /// The flows `node` has sent on under congestion control: (destination node, destination
    /// QP, rate now in Gbit/s, lowest rate it was set to), in order.
    pub fn cc_flows(&self, node: NodeId) -> Vec<(NodeId, u32, f64, f64)> {
        let Some(n) = self.cc.as_ref().and_then(|c| c.nodes.get(node)) else { return Vec::new() };
        n.flows
            .iter()
            .map(|(&(slot, qp), f)| {
                ((slot as usize).wrapping_sub(1), qp, f.ctl.rate_gbps(), f.min_rate_gbps)
            })
            .collect()
    }

    /// The next datagram `node` may send: a CNP waiting, else the first datagram of the
    /// engine's queue whose flow's limiter has the credit for it (ACKs and CNPs are never
    /// held). A data datagram leaves ECN-capable (ECT(0)), as a RoCE NIC with DCQCN sends it.
    pub(crate) fn cc_poll(&mut self, node: NodeId) -> CcPoll {
        let now = self.now_ns;
        let line = self.line_gbps(node);
        let Some(cc) = self.cc.as_deref_mut() else { return CcPoll::Empty };
        let (alg, burst) = (&cc.cfg.algorithm, cc.cfg.burst_bytes.max(1));
        if cc.nodes.len() <= node {
            cc.nodes.resize_with(node + 1, Default::default);
        }
        let ncc = &mut cc.nodes[node];
        if let Some(t) = ncc.outbox.pop_front() {
            return CcPoll::Take(t);
        }
        let Some(nic) = self.nodes[node].nic.as_mut() else { return CcPoll::Empty };
        let mut blocked: Vec<FlowKey> = Vec::new();
        let mut wake = u64::MAX;
        let (flows, stats) = (&mut ncc.flows, &mut ncc.stats);
        let taken = nic.poll_transmit_where(|t| {
            if !is_data(&t.data) || line <= 0.0 {
                return true;
            }
            let key = (slot_of_ip(t.dst), dest_qp(&t.data).unwrap_or(0));
            if blocked.contains(&key) {
                return false;
            }
            let flow = flows.entry(key).or_insert_with(|| Flow {
                ctl: alg.new_flow(line, now),
                pacer: Pacer::new(burst, now),
                min_rate_gbps: line,
            });
            flow.ctl.advance(now);
            let rate = flow.ctl.rate_gbps();
            flow.pacer.refill(now, rate);
            let len = t.data.len();
            if flow.pacer.try_take(len) {
                flow.ctl.on_sent(now, len);
                return true;
            }
            stats.paced += 1;
            wake = wake.min(flow.pacer.ready_at(len, rate));
            blocked.push(key);
            false
        });
        match taken {
            Some(mut t) => {
                if is_data(&t.data) && ecn_of(&t.data) == Some(ECN_NOT_ECT) {
                    set_ecn(&mut t.data, ECN_ECT0);
                }
                CcPoll::Take(t)
            }
            None if wake != u64::MAX => CcPoll::Wait(wake.max(now + 1)),
            None => CcPoll::Empty,
        }
    }

    /// The line rate a node's flows start at: its fastest link's.
    fn line_gbps(&mut self, node: NodeId) -> f64 {
        let cc = self.cc.as_deref_mut().expect("congestion control is on");
        if cc.nodes.len() <= node {
            cc.nodes.resize_with(node + 1, Default::default);
        }
        if let Some(l) = cc.nodes[node].line_gbps {
            return l;
        }
        let l = self
            .links
            .iter()
            .filter(|l| l.src == node)
            .map(|l| l.params.bandwidth_gbps)
            .fold(0.0, f64::max);
        cc.nodes[node].line_gbps = Some(l);
        l
    }

    /// A datagram arrived at NIC `node` with congestion control on. A CNP is the reaction
    /// point's: its flow's rate falls, and the engine never sees it (returns true). A CE-marked
    /// data packet makes the notification point send a CNP to its sender's QP, unless that QP
    /// sent one less than `cnp_interval_ns` ago; the packet still goes to the engine.
    pub(crate) fn cc_receive(&mut self, node: NodeId, data: &[u8]) -> bool {
        let now = self.now_ns;
        let Some(cc) = self.cc.as_deref_mut() else { return false };
        let interval = cc.cfg.cnp_interval_ns;
        if cc.nodes.len() <= node {
            cc.nodes.resize_with(node + 1, Default::default);
        }
        let Some(nic) = self.nodes[node].nic.as_ref() else { return false };
        let ncc = &mut cc.nodes[node];
        let Some(local_qp) = dest_qp(data) else { return false };
        let peer = [data[12], data[13], data[14], data[15]];
        if is_cnp(data) {
            ncc.stats.cnps_received += 1;
            // The CNP names this NIC's QP; its flow is keyed by the QP it sends to.
            let Ok((attr, _)) = nic.query_qp(local_qp) else { return true };
            let key = (slot_of_ip(peer), attr.dest_qp_num);
            if let Some(flow) = ncc.flows.get_mut(&key) {
                flow.ctl.advance(now);
                flow.pacer.refill(now, flow.ctl.rate_gbps());
                flow.ctl.on_cnp(now);
                flow.min_rate_gbps = flow.min_rate_gbps.min(flow.ctl.rate_gbps());
            }
            return true;
        }
        if ecn_of(data) != Some(ECN_CE) || !is_data(data) {
            return false;
        }
        ncc.stats.ce_received += 1;
        if ncc.last_cnp.get(&local_qp).is_some_and(|&t| now < t.saturating_add(interval)) {
            ncc.stats.cnps_coalesced += 1;
            return false;
        }
        // A NIC answers only a packet it accepts: one damaged on the way (a bad ICRC, cut
        // short) draws no CNP. Checked only here, for a CNP about to be sent.
        if nic_model::packet::parse_datagram(data).is_err() {
            return false;
        }
        let Ok((attr, _)) = nic.query_qp(local_qp) else { return false };
        let me = [data[16], data[17], data[18], data[19]];
        let sport = u16::from_be_bytes([data[20], data[21]]);
        let cnp = build_cnp(me, peer, attr.dest_qp_num, sport);
        ncc.outbox.push_back(Transmit { dst: peer, data: cnp });
        ncc.last_cnp.insert(local_qp, now);
        ncc.stats.cnps_sent += 1;
        false
    }
}
