//! Priority flow control (IEEE 802.1Qbb) at switch ingress, as RoCE's lossless Ethernet runs
//! it: a switch counts the bytes each ingress port has buffered (packets that came in on that
//! link and have not yet left on another); above `xoff_bytes` it sends the upstream sender a
//! PFC pause frame for the lossless priority, which stops that link after the frame it is
//! serialising; below `xon_bytes` it sends a pause of zero quanta, which restarts it. The
//! headroom above XOFF absorbs what was already on its way; a packet beyond it is dropped
//! (with enough headroom, never: the property tests check that no packet is dropped).
//!
//! With PFC on, every link sends one packet at a time: the next waits in the link's queue
//! (`Link::waiting`) until the line is free and the link not paused, so a pause stops what had
//! not started (without PFC a packet's serialisation is scheduled the moment it is queued, and
//! nothing of this runs). Pause frames take the reverse link after the frame on it ends, and a
//! switch refreshes an XOFF every half pause time while the port stays above XON.
//!
//! A cycle of paused links, each holding more than its XON threshold of packets that wait on
//! the next paused link, never resumes: the run detects that deadlock when a pause lands and
//! reports the cycle ([`World::pfc_deadlock`]).

use std::collections::VecDeque;

use nic_model::engine::{ip_of_slot, mac_of_ip};

use super::event::EventKind;
use super::link::Waiting;
use super::trace::{TraceKind, NONE};
use super::{LinkId, NodeId, World};

/// PFC at every switch ingress port.
#[derive(Clone, Debug, PartialEq)]
pub struct PfcConfig {
    /// The lossless priority (0–7) all RoCE traffic uses; pause frames name it. 3 by custom.
    pub priority: u8,
    /// Send XOFF when an ingress port's buffered bytes exceed this.
    pub xoff_bytes: u64,
    /// Send XON when they fall to this or below.
    pub xon_bytes: u64,
    /// Bytes above XOFF an ingress port may still buffer (what arrives after its XOFF); a
    /// packet beyond is dropped.
    pub headroom_bytes: u64,
}

impl PfcConfig {
    /// Whether the thresholds make sense; the error names what is wrong.
    pub fn check(&self) -> Result<(), String> {
        if self.priority > 7 {
            return Err(format!("PFC: priority {} is not 0..=7", self.priority));
        }
        if self.xon_bytes > self.xoff_bytes {
            return Err(format!(
                "PFC: xon_bytes ({}) is above xoff_bytes ({})",
                self.xon_bytes, self.xoff_bytes
            ));
        }
        Ok(())
    }

    /// The headroom a port on a link of `gbps` and `latency_ns` needs so that nothing is
    /// dropped: a frame of up to `frame_bytes` the switch is receiving when it decides, the
    /// pause frame's wait behind a frame on the reverse link and its flight, and everything the
    /// sender put on the wire meanwhile (a round trip of the link) plus the frame it had
    /// started.
    pub fn headroom_needed(latency_ns: u64, gbps: f64, frame_bytes: u64) -> u64 {
        let wire = (2 * latency_ns) as f64 * gbps / 8.0;
        wire.ceil() as u64 + 3 * frame_bytes + PAUSE_FRAME_LEN as u64
    }
}

/// Bytes of a PFC frame (the minimum Ethernet frame without FCS).
pub const PAUSE_FRAME_LEN: usize = 60;
/// The longest frame a pause waits behind on the reverse link (an MTU of 4096 with headers).
const MAX_FRAME: usize = 4096 + 80;
/// The quanta of an XOFF (the longest pause; refreshed while needed).
const XOFF_QUANTA: u16 = 0xFFFF;

/// What PFC did (the world's, [`World::pfc_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PfcStats {
    /// XOFF frames sent (first ones and refreshes).
    pub xoff_frames: u64,
    /// XON frames sent.
    pub xon_frames: u64,
    /// Packets dropped for want of headroom.
    pub headroom_drops: u64,
}

/// The world's PFC state.
#[derive(Debug)]
pub(crate) struct PfcState {
    pub(crate) cfg: PfcConfig,
    /// Bytes buffered at its destination switch per ingress link.
    pub(crate) ingress_bytes: Vec<u64>,
    /// Whether the destination switch has the link paused (an XOFF out, no XON since).
    pub(crate) xoff: Vec<bool>,
    pub(crate) stats: PfcStats,
    pub(crate) deadlock: Option<Vec<LinkId>>,
}

/// A PFC frame as Wireshark decodes it (MAC Control, EtherType 0x8808, opcode 0x0101): to the
/// reserved multicast 01:80:c2:00:00:01, from `src`, the class-enable vector with `priority`'s
/// bit, that priority's pause time in quanta (512 bit times; 0 resumes), padded to 60 bytes.
pub fn pause_frame(src: [u8; 6], priority: u8, quanta: u16) -> [u8; PAUSE_FRAME_LEN] {
    let mut f = [0u8; PAUSE_FRAME_LEN];
    f[0..6].copy_from_slice(&[0x01, 0x80, 0xc2, 0x00, 0x00, 0x01]);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x88, 0x08]);
    f[14..16].copy_from_slice(&[0x01, 0x01]);
    let p = (priority & 7) as usize;
    f[16..18].copy_from_slice(&(1u16 << p).to_be_bytes());
    f[18 + 2 * p..20 + 2 * p].copy_from_slice(&quanta.to_be_bytes());
    f
}

impl World {
    /// Turn PFC on (or off, with `None`) at every switch ingress (links added later too).
    /// Call it before traffic starts; off (the default), nothing of it runs.
    pub fn set_pfc(&mut self, cfg: Option<PfcConfig>) {
        let n = self.links.len();
        self.pfc = cfg.map(|cfg| {
            Box::new(PfcState {
                cfg,
                ingress_bytes: vec![0; n],
                xoff: vec![false; n],
                stats: PfcStats::default(),
                deadlock: None,
            })
        });
    }

    /// What PFC did (zeros when it is off).
    pub fn pfc_stats(&self) -> PfcStats {
        self.pfc.as_ref().map(|p| p.stats.clone()).unwrap_or_default()
    }

    /// The cycle of links of a PFC deadlock, once one is detected.
    pub fn pfc_deadlock(&self) -> Option<&[LinkId]> {
        self.pfc.as_ref().and_then(|p| p.deadlock.as_deref())
    }

    /// Whether a packet of `len` bytes that came in on `ingress` (a link into a switch) fits
    /// the port's XOFF threshold and headroom.
    pub(super) fn pfc_admits(&self, ingress: u32, len: u64) -> bool {
        let Some(p) = self.pfc.as_deref() else { return true };
        if ingress == NONE {
            return true;
        }
        p.ingress_bytes[ingress as usize] + len <= p.cfg.xoff_bytes + p.cfg.headroom_bytes
    }

    /// Count a headroom drop.
    pub(super) fn pfc_note_drop(&mut self) {
        if let Some(p) = self.pfc.as_deref_mut() {
            p.stats.headroom_drops += 1;
        }
    }

    /// A packet joins `link`'s queue (PFC on): count it against its ingress port (pausing
    /// that port above XOFF), and start it if the line is free.
    pub(super) fn pfc_push(&mut self, link: LinkId, data: Vec<u8>, extra_ns: u64, ingress: u32) {
        let len = data.len() as u64;
        if ingress != NONE {
            let p = self.pfc.as_deref_mut().expect("PFC is on");
            let i = ingress as usize;
            p.ingress_bytes[i] += len;
            if !p.xoff[i] && p.ingress_bytes[i] > p.cfg.xoff_bytes {
                self.send_pause(ingress as LinkId, true);
            }
        }
        let l = &mut self.links[link];
        l.waiting_bytes += len;
        l.waiting_len += 1;
        l.waiting.push_back(Waiting { data, extra_ns, ingress });
        self.start_next(link);
    }

    /// Start the next waiting packet on `link` if its line is free and it is not paused.
    fn start_next(&mut self, link: LinkId) {
        let now = self.now_ns;
        let l = &mut self.links[link];
        if l.serialising.is_some() || now < l.paused_until_ns {
            return;
        }
        let Some(w) = l.waiting.pop_front() else { return };
        l.waiting_bytes -= w.data.len() as u64;
        l.waiting_len -= 1;
        l.serialising = Some((w.ingress, w.data.len() as u32));
        let hdr = super::link::Hdr::of(&w.data, self.routes.routed);
        self.enqueue(link, w.data, hdr, w.extra_ns);
        let at = self.links[link].busy_until_ns;
        self.push(at, EventKind::LinkFree { link });
    }

    /// A `LinkFree` event: the packet serialising on `link` is out (its bytes leave its
    /// ingress port's count, which may resume that port), or a pause ran out; start the next
    /// packet, and let a NIC that feeds the link give it more.
    pub(super) fn link_free(&mut self, link: LinkId) {
        let now = self.now_ns;
        let l = &mut self.links[link];
        if let Some(since) = l.paused_since_ns.filter(|_| now >= l.paused_until_ns) {
            l.stats.paused_ns += l.paused_until_ns.saturating_sub(since);
            l.paused_since_ns = None;
        }
        if l.serialising.is_some() && l.busy_until_ns <= now {
            let (ingress, len) = l.serialising.take().expect("checked just above");
            if ingress != NONE {
                let p = self.pfc.as_deref_mut().expect("PFC is on");
                let i = ingress as usize;
                p.ingress_bytes[i] -= u64::from(len);
                if p.xoff[i] && p.ingress_bytes[i] <= p.cfg.xon_bytes {
                    self.send_pause(ingress as LinkId, false);
                }
            }
        }
        self.start_next(link);
        let src = self.links[link].src;
        if !self.nodes[src].is_switch() {
            self.transmit(src);
        }
    }

    /// The switch at the end of `ingress` sends a pause frame (XOFF, or XON) to the node at
    /// its start, over the reverse link, after the frame that link is sending.
    fn send_pause(&mut self, ingress: LinkId, xoff: bool) {
        let now = self.now_ns;
        let (up, sw) = (self.links[ingress].src, self.links[ingress].dst);
        let p = self.pfc.as_deref_mut().expect("PFC is on");
        p.xoff[ingress] = xoff;
        if xoff {
            p.stats.xoff_frames += 1;
        } else {
            p.stats.xon_frames += 1;
        }
        let quanta = if xoff { XOFF_QUANTA } else { 0 };
        // Over the reverse link after its current frame; a link the scenario made one way
        // only is still one direction of a cable, whose other direction carries the pause.
        let b = match self.link_between(sw, up) {
            Some(back) => &self.links[back],
            None => &self.links[ingress],
        };
        let at = now.max(b.busy_until_ns.min(now + b.params.serialisation_ns(MAX_FRAME)))
            + b.params.serialisation_ns(PAUSE_FRAME_LEN)
            + b.params.latency_ns;
        self.push(at, EventKind::Pause { link: ingress, quanta });
        if xoff {
            let half = pause_ns(quanta, self.links[ingress].params.bandwidth_gbps) / 2;
            self.push(now + half.max(1), EventKind::PauseRefresh { link: ingress });
        }
    }

    /// A `PauseRefresh` event: re-send the XOFF of a port still above XON.
    pub(super) fn pause_refresh(&mut self, link: LinkId) {
        if self.pfc.as_deref().is_some_and(|p| p.xoff[link]) {
            self.send_pause(link, true);
        }
    }

    /// A `Pause` event: the pause frame reached the start of `link`, which stops for `quanta`
    /// (or restarts, for 0).
    pub(super) fn pause_arrive(&mut self, link: LinkId, quanta: u16) {
        let now = self.now_ns;
        let (up, sw) = (self.links[link].src, self.links[link].dst);
        let back = self.link_between(sw, up).unwrap_or(link);
        if self.links[back].partitioned {
            return;
        }
        let priority = self.pfc.as_deref().map_or(3, |p| p.cfg.priority);
        if let Some(c) = self.capture.as_mut().filter(|c| c.error.is_none()) {
            let frame = pause_frame(mac_of_ip(ip_of_slot(sw as u16 + 1)), priority, quanta);
            if let Err(e) = c.writer.write_frame(now, &frame) {
                c.error = Some(e);
            }
        }
        let l = &mut self.links[link];
        if quanta > 0 {
            if l.paused_since_ns.is_none() {
                l.paused_since_ns = Some(now);
                l.stats.pfc_pauses += 1;
            }
            l.paused_until_ns = now + pause_ns(quanta, l.params.bandwidth_gbps);
            let until = l.paused_until_ns;
            self.push(until, EventKind::LinkFree { link });
            self.record(TraceKind::PfcPause, link as u32, up as u32, &[], u64::from(quanta));
            if self.pfc.as_deref().is_some_and(|p| p.deadlock.is_none()) {
                if let Some(cycle) = self.deadlock_through(link) {
                    self.record(TraceKind::PfcDeadlock, link as u32, NONE, &[], cycle.len() as u64);
                    self.pfc.as_deref_mut().expect("PFC is on").deadlock = Some(cycle);
                }
            }
            return;
        }
        if let Some(since) = l.paused_since_ns.take() {
            l.stats.paused_ns += now - since;
        }
        l.paused_until_ns = 0;
        self.record(TraceKind::PfcPause, link as u32, up as u32, &[], 0);
        self.link_free(link);
    }

    /// Whether `link` is paused now.
    fn paused(&self, link: LinkId) -> bool {
        self.now_ns < self.links[link].paused_until_ns
    }

    /// The paused links out of the switch at the end of paused ingress `x` that hold more
    /// than its XON threshold of `x`'s packets between them (so `x` cannot resume before one
    /// of them does), or none.
    fn stuck_on(&self, x: LinkId) -> Vec<LinkId> {
        let p = self.pfc.as_deref().expect("PFC is on");
        let sw = self.links[x].dst;
        if !self.paused(x) || !self.nodes[sw].is_switch() {
            return Vec::new();
        }
        let (mut held, mut on) = (0u64, Vec::new());
        for (y, l) in self.links.iter().enumerate() {
            if l.src != sw || !self.paused(y) {
                continue;
            }
            let mine: u64 = l
                .waiting
                .iter()
                .filter(|w| w.ingress == x as u32)
                .map(|w| w.data.len() as u64)
                .sum();
            if mine > 0 {
                held += mine;
                on.push(y);
            }
        }
        if held > p.cfg.xon_bytes {
            on
        } else {
            Vec::new()
        }
    }

    /// A cycle of stuck paused links through `start`, if there is one (depth-first).
    fn deadlock_through(&self, start: LinkId) -> Option<Vec<LinkId>> {
        let mut path = vec![start];
        let mut todo: Vec<VecDeque<LinkId>> = vec![self.stuck_on(start).into()];
        let mut seen = vec![false; self.links.len()];
        seen[start] = true;
        while let Some(next) = todo.last_mut() {
            let Some(y) = next.pop_front() else {
                todo.pop();
                path.pop();
                continue;
            };
            if y == start {
                return Some(path);
            }
            if !seen[y] {
                seen[y] = true;
                path.push(y);
                todo.push(self.stuck_on(y).into());
            }
        }
        None
    }

    /// The node names of a cycle of links, `a -> b -> c -> a`.
    pub fn describe_links(&self, links: &[LinkId]) -> String {
        let name = |n: NodeId| self.nodes[n].name.as_str();
        let mut s: Vec<&str> = links.iter().map(|&l| name(self.links[l].src)).collect();
        if let Some(&last) = links.last() {
            s.push(name(self.links[last].dst));
        }
        s.join(" -> ")
    }
}

/// How long `quanta` pause a link of `gbps` (a quantum is 512 bit times).
fn pause_ns(quanta: u16, gbps: f64) -> u64 {
    if gbps <= 0.0 {
        return 0;
    }
    (f64::from(quanta) * 512.0 / gbps).ceil() as u64
}
