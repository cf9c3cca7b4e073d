//! How a soft device reaches the wire: the [`Port`] trait, its receiving half (the inbox,
//! which the device's NIC thread owns), and the sending halves it makes
//! ([`Port::egress`]), which implement the engine's [`Egress`] themselves and are lent to it;
//! with an in-process loopback implementation (two or more devices in one process) and a
//! shared-memory one (devices in different processes, through [`crate::wire`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::counters::{self, Tally};
use super::reach::{self, PeerReach};
use verbs_api::Gid;

use crate::engine::{ip_of_slot, is_multicast_ipv4, slot_of_ip, Egress, ReachAsk, ReachOp};
use crate::packet::{Icrc, OpFlags, Opcode};
use crate::wire::reach::ReachArena;
use crate::wire::{mcast, Fabric, Inbox, InboxConfig, Sender, WireError};

/// What became of a datagram handed to a port's sending half: `Sent` (in the destination's
/// inbox), `Full` (backpressure: try again later) or `Unreachable` (no port has that address,
/// or its owner is dead: the datagram is lost, and RC will retry and eventually report
/// RETRY_EXC_ERR). The engine's own word for it.
pub use crate::engine::SendOutcome;

/// One port's attachment to a wire, as the device holds it: the receiving half (its inbox,
/// which the NIC thread drains and parks on), and the maker of its sending halves.
pub trait Port: Send + Sync + 'static {
    /// The LID the fabric assigned.
    fn lid(&self) -> u16;
    /// The port's IPv4 address: its slot's, or its network interface's.
    fn ip(&self) -> [u8; 4] {
        ip_of_slot(self.lid())
    }
    /// A new sending half of this port, to lend the engine (alone, or inside a capture, a tap
    /// or a fault plan): it makes its own connections to other ports' inboxes on demand, and
    /// counts what it sends into `tally`. It lives under the device lock with the engine, so
    /// a send takes no other lock.
    fn egress(&self, tally: &Arc<Tally>) -> Box<dyn Egress>;
    /// Hand up to `max` received datagrams to `f`, each with whether it carries its ICRC,
    /// stopping early after one for which `f` returns false; returns how many were handed over.
    fn recv_burst(&self, max: usize, f: &mut dyn FnMut(&[u8], Icrc) -> bool) -> usize;
    /// Sleep until a datagram arrives, `unpark` is called, or `timeout` passes.
    fn park(&self, timeout: Duration);
    /// As [`Port::park`], for a program thread blocked in a verb: also returns when a signal
    /// handler ran on this thread meanwhile, and says so (true), so that the verb can answer
    /// as the kernel's interrupted read does (`EINTR`). A port whose sleep no signal cuts
    /// short (the in-process loopback's condition variable) says false.
    fn park_interruptible(&self, timeout: Duration) -> bool {
        self.park(timeout);
        false
    }
    /// Wake a parked receiver.
    fn unpark(&self);
    /// Where this port lives (for `devinfo`, errors and `fabric`).
    fn describe(&self) -> String;
    /// Whether the port's own end of the wire is broken for good, and how (naming the file);
    /// for the NIC thread's idle moments, not for every round. None while it works.
    fn check(&self) -> Option<String> {
        None
    }
    /// The last error a send met that names a destination's broken end of the wire (a
    /// corrupted inbox segment), if any: the datagram was lost, as it is to a port that is
    /// down, and this says why.
    fn peer_problem(&self) -> Option<String> {
        None
    }
    /// Names the port's owner (the device) where other processes can read it; a port whose
    /// counters nobody else can read ignores it.
    fn set_label(&self, _name: &str) {}
    /// Publishes the port's counters ([`crate::soft::counters::COUNTERS`], in order) where
    /// other processes read them; cheap (no system call), called once per batch of rounds.
    fn publish(&self, _values: &[u64]) {}
    /// Whether no datagram waits in the port's inbox (a look, no system call); false when
    /// the port cannot tell cheaply.
    fn idle(&self) -> bool {
        false
    }
    /// Whether a datagram waits in the inbox (among the first 16) that a program polling its
    /// CQ has no reason to take: a request that completes nothing at this port (an RDMA WRITE without
    /// immediate data, a READ, an atomic), whose arrival a target notices, if at all, by
    /// polling its memory. A port that cannot tell says whether it may hold any datagram.
    fn one_sided_waits(&self) -> bool {
        !self.idle()
    }
    /// This port's own reach file, when the device lets peers reach its memory (a port on
    /// shared memory, unless `SOFTVERBS_REACH=off`).
    fn arena(&self) -> Option<&Arc<ReachArena>> {
        None
    }
    /// The port receives the UD multicast group `group` (a GID) from now on: senders to the
    /// group send this port a copy (its first QP attached to the group).
    fn join_group(&self, _group: &[u8; 16]) {}
    /// The port no longer receives the group (its last QP detached).
    fn leave_group(&self, _group: &[u8; 16]) {}
}

/// How many of the datagrams waiting in an inbox [`Port::one_sided_waits`] looks at: an ACK
/// that completes nothing may wait ahead of the WRITE a program polls memory for.
const LOOK_AHEAD: usize = 16;

/// Counts a datagram of `len` bytes that went into a peer's inbox, or found no port.
#[inline]
fn count(tally: &Tally, outcome: SendOutcome, len: usize) {
    match outcome {
        SendOutcome::Sent => tally.sent(len),
        SendOutcome::Unreachable => counters::add(&tally.unreachable, 1),
        SendOutcome::Full => {}
    }
}

// ---------------- loopback: devices of one process ----------------

/// An in-process fabric: ports of devices in the same process, joined by bounded queues.
#[derive(Default)]
pub struct Loopback {
    ports: Mutex<BTreeMap<[u8; 4], Arc<LoopInbox>>>,
    /// The ports that receive each multicast group (by group GID, the ports' addresses).
    groups: Mutex<BTreeMap<[u8; 16], Vec<[u8; 4]>>>,
    next_lid: AtomicU16,
}

struct LoopInbox {
    queue: Mutex<VecDeque<Vec<u8>>>,
    ready: Condvar,
    parked: AtomicBool,
    capacity: usize,
}

/// A port on a [`Loopback`] fabric.
pub struct LoopPort {
    fabric: Arc<Loopback>,
    lid: u16,
    inbox: Arc<LoopInbox>,
}

impl Loopback {
    /// A new, empty in-process fabric.
    pub fn new() -> Arc<Loopback> {
        Arc::new(Loopback {
            ports: Mutex::new(BTreeMap::new()),
            groups: Mutex::new(BTreeMap::new()),
            next_lid: AtomicU16::new(1),
        })
    }

    /// Attach a new port with room for `capacity` datagrams in its inbox.
    pub fn attach(self: &Arc<Self>, capacity: usize) -> LoopPort {
        let lid = self.next_lid.fetch_add(1, Ordering::Relaxed);
        let inbox = Arc::new(LoopInbox {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            parked: AtomicBool::new(false),
            capacity,
        });
        self.ports.lock().unwrap_or_else(|e| e.into_inner()).insert(ip_of_slot(lid), inbox.clone());
        LoopPort { fabric: self.clone(), lid, inbox }
    }
}

/// The sending half of a [`LoopPort`]: a copy of each datagram into the destination's queue.
pub struct LoopEgress {
    fabric: Arc<Loopback>,
    tally: Arc<Tally>,
}

impl Egress for LoopEgress {
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        let outcome = self.fabric.send(dst, datagram);
        count(&self.tally, outcome, datagram.len());
        outcome
    }
}

impl Loopback {
    fn send(&self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        if is_multicast_ipv4(dst) {
            return self.send_to_group(dst, datagram);
        }
        let Some(inbox) = self.ports.lock().unwrap_or_else(|e| e.into_inner()).get(&dst).cloned()
        else {
            return SendOutcome::Unreachable;
        };
        let mut q = inbox.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= inbox.capacity {
            return SendOutcome::Full;
        }
        q.push_back(datagram.to_vec());
        drop(q);
        if inbox.parked.load(Ordering::Acquire) {
            inbox.ready.notify_one();
        }
        SendOutcome::Sent
    }
}

impl Loopback {
    /// One copy of a datagram to a multicast group for each member port; a full member
    /// inbox drops its copy, as a switch's congested port would.
    #[cold]
    fn send_to_group(&self, group: [u8; 4], datagram: &[u8]) -> SendOutcome {
        let members = self
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&Gid::from_ipv4(group).0)
            .cloned()
            .unwrap_or_default();
        for ip in &members {
            let _ = self.send(*ip, datagram);
        }
        if members.is_empty() {
            SendOutcome::Unreachable
        } else {
            SendOutcome::Sent
        }
    }

    fn set_member(&self, group: &[u8; 16], ip: [u8; 4], member: bool) {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let ports = groups.entry(*group).or_default();
        ports.retain(|&p| p != ip);
        if member {
            ports.push(ip);
        } else if ports.is_empty() {
            groups.remove(group);
        }
    }
}

impl Drop for LoopPort {
    fn drop(&mut self) {
        let ip = ip_of_slot(self.lid);
        self.fabric.ports.lock().unwrap_or_else(|e| e.into_inner()).remove(&ip);
        let mut groups = self.fabric.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups.retain(|_, ports| {
            ports.retain(|&p| p != ip);
            !ports.is_empty()
        });
    }
}

impl Port for LoopPort {
    fn lid(&self) -> u16 {
        self.lid
    }

    fn egress(&self, tally: &Arc<Tally>) -> Box<dyn Egress> {
        Box::new(LoopEgress { fabric: self.fabric.clone(), tally: tally.clone() })
    }

    fn recv_burst(&self, max: usize, f: &mut dyn FnMut(&[u8], Icrc) -> bool) -> usize {
        let mut n = 0;
        while n < max {
            let Some(pkt) = self.inbox.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
            else {
                break;
            };
            n += 1;
            if !f(&pkt, Icrc::Carried) {
                break;
            }
        }
        n
    }

    fn one_sided_waits(&self) -> bool {
        let q = self.inbox.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().take(LOOK_AHEAD).any(|d| completes_nothing(d))
    }

    fn park(&self, timeout: Duration) {
        let q = self.inbox.queue.lock().unwrap_or_else(|e| e.into_inner());
        if !q.is_empty() {
            return;
        }
        self.inbox.parked.store(true, Ordering::Release);
        let _unused = self.inbox.ready.wait_timeout(q, timeout);
        self.inbox.parked.store(false, Ordering::Release);
    }

    fn unpark(&self) {
        let _q = self.inbox.queue.lock().unwrap_or_else(|e| e.into_inner());
        self.inbox.ready.notify_all();
    }

    fn describe(&self) -> String {
        format!("in-process loopback port, LID {}", self.lid)
    }

    fn join_group(&self, group: &[u8; 16]) {
        self.fabric.set_member(group, ip_of_slot(self.lid), true);
    }

    fn leave_group(&self, group: &[u8; 16]) {
        self.fabric.set_member(group, ip_of_slot(self.lid), false);
    }
}

// ---------------- shared memory: devices of different processes ----------------

/// A port whose inbox is a shared-memory segment of a [`Fabric`] (the receiving half; its
/// sending halves are [`ShmEgress`]).
pub struct ShmPort {
    fabric: Fabric,
    inbox: Inbox,
    /// The port's reach file (None with `SOFTVERBS_REACH=off`, or if it could not be made).
    arena: Option<Arc<ReachArena>>,
    /// See [`Port::peer_problem`]; written by a sending half only when a send fails that way.
    peer_problem: Arc<Mutex<Option<String>>>,
    /// The multicast groups the port joined in the fabric's registry (`wire/mcast.rs`),
    /// left when the port goes.
    groups: Mutex<Vec<[u8; 16]>>,
}

impl ShmPort {
    /// Create this port's inbox segment in the fabric, and with `reach` its reach file, so
    /// that peers' NICs can reach the memory of the MRs the device owns (`engine::reach`).
    /// A reach file that cannot be made (a full `/dev/shm`) leaves the port without one.
    pub fn create(fabric: Fabric, cfg: InboxConfig, reach: bool) -> Result<ShmPort, WireError> {
        let inbox = fabric.create_inbox(cfg)?;
        let arena = reach
            .then(|| match ReachArena::create(fabric.dir(), inbox.lid()) {
                Ok(a) => Some(Arc::new(a)),
                Err(e) => {
                    tracing::info!(error = %e, "no reach file: peers send packets to this port");
                    None
                }
            })
            .flatten();
        Ok(ShmPort {
            fabric,
            inbox,
            arena,
            peer_problem: Arc::new(Mutex::new(None)),
            groups: Mutex::new(Vec::new()),
        })
    }

    /// The fabric it belongs to.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// Its inbox (for statistics).
    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }
}

impl Port for ShmPort {
    fn lid(&self) -> u16 {
        self.inbox.lid()
    }

    fn egress(&self, tally: &Arc<Tally>) -> Box<dyn Egress> {
        Box::new(ShmEgress {
            fabric: self.fabric.clone(),
            lid: self.inbox.lid(),
            own: self.arena.clone(),
            senders: Vec::new(),
            views: Vec::new(),
            peer_problem: self.peer_problem.clone(),
            tally: tally.clone(),
        })
    }

    fn recv_burst(&self, max: usize, f: &mut dyn FnMut(&[u8], Icrc) -> bool) -> usize {
        self.inbox.recv_while_marked(max, |bytes, icrc_unset| {
            f(bytes, if icrc_unset { Icrc::Unset } else { Icrc::Carried })
        })
    }

    fn park(&self, timeout: Duration) {
        self.inbox.park(timeout);
    }

    fn park_interruptible(&self, timeout: Duration) -> bool {
        self.inbox.park_interruptible(timeout)
    }

    fn unpark(&self) {
        self.inbox.unpark();
    }

    fn describe(&self) -> String {
        format!("shared-memory inbox {}", self.inbox.path().display())
    }

    fn check(&self) -> Option<String> {
        let what = self.inbox.check_health()?;
        Some(format!("{}: {what}", self.inbox.path().display()))
    }

    fn peer_problem(&self) -> Option<String> {
        self.peer_problem.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_label(&self, name: &str) {
        self.inbox.set_label(name);
    }

    fn publish(&self, values: &[u64]) {
        self.inbox.publish_counters(values);
    }

    fn arena(&self) -> Option<&Arc<ReachArena>> {
        self.arena.as_ref()
    }

    fn idle(&self) -> bool {
        self.inbox.is_empty()
    }

    fn join_group(&self, group: &[u8; 16]) {
        if let Err(e) = mcast::join_group(self.fabric.dir(), group, self.inbox.lid()) {
            tracing::warn!(error = %e, "could not join a multicast group in the fabric");
            return;
        }
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if !groups.contains(group) {
            groups.push(*group);
        }
    }

    fn leave_group(&self, group: &[u8; 16]) {
        let _ = mcast::leave_group(self.fabric.dir(), group, self.inbox.lid());
        self.groups.lock().unwrap_or_else(|e| e.into_inner()).retain(|g| g != group);
    }

    fn one_sided_waits(&self) -> bool {
        self.inbox.any_ready(LOOK_AHEAD, completes_nothing)
    }
}

impl Drop for ShmPort {
    fn drop(&mut self) {
        for group in self.groups.get_mut().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = mcast::leave_group(self.fabric.dir(), &group, self.inbox.lid());
        }
    }
}

/// Whether `datagram` (IPv4 or IPv6, UDP, then the BTH) carries a request that completes
/// nothing at its responder: an RDMA WRITE packet without immediate data, a READ REQUEST, an
/// atomic. Reads the version and the opcode only; anything else, or too short, is not.
pub(super) fn completes_nothing(datagram: &[u8]) -> bool {
    let bth_at = match datagram.first().map(|b| b >> 4) {
        Some(4) => usize::from(datagram[0] & 0x0f) * 4 + 8,
        Some(6) => 40 + 8,
        _ => return false,
    };
    let Some(info) = datagram.get(bth_at).and_then(|&op| Opcode(op).info()) else {
        return false;
    };
    info.flags.contains(OpFlags::REQUEST)
        && info.flags.intersects(OpFlags::WRITE | OpFlags::READ | OpFlags::ATOMIC)
        && !info.flags.contains(OpFlags::IMM)
}

/// The sending half of a [`ShmPort`], lent to the engine: its connections to the inboxes it
/// sends to and the reach files of the peers it reached, each sorted by LID (a port talks to
/// few peers, and a binary search over a short vector is the cheapest lookup for every
/// datagram), and the port's counters.
pub struct ShmEgress {
    fabric: Fabric,
    /// Its own port's LID (never reached: that is this process's own memory).
    lid: u16,
    /// The port's own reach file, if it has one (direct reach is on for this device): while
    /// the port is down ([`ReachArena::port_down`]) it reaches nothing, as its packets would
    /// get no answer.
    own: Option<Arc<ReachArena>>,
    senders: Vec<(u16, Sender)>,
    views: Vec<(u16, PeerReach)>,
    peer_problem: Arc<Mutex<Option<String>>>,
    tally: Arc<Tally>,
}

impl ShmEgress {
    /// Remembers a send's error if it names a corrupted destination segment.
    #[cold]
    fn note(&self, err: &WireError) {
        if let WireError::BadSegment { .. } = err {
            *self.peer_problem.lock().unwrap_or_else(|e| e.into_inner()) = Some(err.to_string());
        }
    }

    /// A send, with the mark that says whether the datagram's ICRC is unset, counted.
    #[inline]
    fn send_marked(&mut self, dst: [u8; 4], datagram: &[u8], icrc_unset: bool) -> SendOutcome {
        let outcome = self.send_uncounted(dst, datagram, icrc_unset);
        count(&self.tally, outcome, datagram.len());
        outcome
    }

    #[inline]
    fn send_uncounted(&mut self, dst: [u8; 4], datagram: &[u8], icrc_unset: bool) -> SendOutcome {
        let lid = slot_of_ip(dst);
        if lid == 0 {
            if is_multicast_ipv4(dst) {
                return self.send_to_group(dst, datagram, icrc_unset);
            }
            return SendOutcome::Unreachable;
        }
        let at = match self.senders.binary_search_by_key(&lid, |(l, _)| *l) {
            Ok(at) => at,
            Err(at) => match self.fabric.connect(lid) {
                Ok(s) => {
                    self.senders.insert(at, (lid, s));
                    at
                }
                Err(WireError::OwnerDead { .. }) => {
                    // The peer died: remove its segment so the LID can be reused.
                    let _ = self.fabric.clean();
                    return SendOutcome::Unreachable;
                }
                Err(e) => {
                    self.note(&e);
                    return SendOutcome::Unreachable;
                }
            },
        };
        let sender = &self.senders[at].1;
        match sender.send_marked(datagram, icrc_unset) {
            Ok(()) => SendOutcome::Sent,
            Err(WireError::Full) => {
                if sender.owner_alive() {
                    SendOutcome::Full
                } else {
                    self.senders.remove(at);
                    let _ = self.fabric.clean();
                    SendOutcome::Unreachable
                }
            }
            Err(e) => {
                // Closed, dead or corrupted: forget the mapping; a later send reconnects.
                self.note(&e);
                self.senders.remove(at);
                SendOutcome::Unreachable
            }
        }
    }
}

impl ShmEgress {
    /// One copy of a datagram to a multicast group for each port of the fabric's registry
    /// (`wire/mcast.rs`), this port included (its other QPs may be attached); a full or dead
    /// member drops its copy, as a UD datagram is dropped. Unreachable when no port is a
    /// member.
    #[cold]
    fn send_to_group(&mut self, group: [u8; 4], datagram: &[u8], icrc_unset: bool) -> SendOutcome {
        let members =
            mcast::group_members(self.fabric.dir(), &Gid::from_ipv4(group).0).unwrap_or_default();
        for &lid in &members {
            let _ = self.send_uncounted(ip_of_slot(lid), datagram, icrc_unset);
        }
        if members.is_empty() {
            SendOutcome::Unreachable
        } else {
            SendOutcome::Sent
        }
    }
}

impl Egress for ShmEgress {
    #[inline]
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        self.send_marked(dst, datagram, false)
    }

    // The shared-memory wire loses nothing: a datagram in a live owner's inbox will be read.
    fn peer_busy(&self, dst: [u8; 4]) -> bool {
        let lid = slot_of_ip(dst);
        self.senders
            .binary_search_by_key(&lid, |(l, _)| *l)
            .is_ok_and(|at| self.senders[at].1.unread() && self.senders[at].1.owner_alive())
    }

    // The receiver reads the slot's mark and checks everything but the ICRC; whatever looks
    // at the datagrams on this side is a layer around this egress, which says no itself.
    fn takes_unset_icrc(&self) -> bool {
        true
    }

    #[inline]
    fn send_without_icrc(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        self.send_marked(dst, datagram, true)
    }

    // A layer around this egress (a capture, a tap, a fault plan) says no itself.
    fn reaches(&self) -> bool {
        self.own.as_ref().is_some_and(|a| !a.port_down())
    }

    #[inline]
    fn reach(&mut self, dst: [u8; 4], ask: &ReachAsk, op: &ReachOp<'_>) -> Option<u64> {
        let lid = slot_of_ip(dst);
        if lid == 0 || lid == self.lid {
            return None;
        }
        let reached = reach::reach(&mut self.views, self.fabric.dir(), lid, ask)?;
        Some(reach::place(&reached, op))
    }
}

#[cfg(test)]
mod tests {
    use super::completes_nothing;

    /// A datagram of `version` whose BTH opcode is `op` (headers zero but for the first byte).
    fn datagram(version: u8, op: u8) -> Vec<u8> {
        let (ip, first) = match version {
            4 => (20, 0x45),
            _ => (40, 0x60),
        };
        let mut d = vec![0u8; ip + 8 + 12];
        d[0] = first;
        d[ip + 8] = op;
        d
    }

    #[test]
    fn only_requests_that_complete_nothing_at_the_responder_are_one_sided() {
        for v in [4, 6] {
            // RC and UC RDMA WRITE packets without immediate, READ REQUEST, the two atomics.
            for op in [0x06, 0x07, 0x08, 0x0a, 0x0c, 0x13, 0x14, 0x26, 0x27, 0x28, 0x2a] {
                assert!(completes_nothing(&datagram(v, op)), "IPv{v} opcode {op:#04x}");
            }
            // SENDs, WRITEs with immediate, responses and ACKs, UD, CNP, unknown codes.
            for op in [0x00, 0x04, 0x09, 0x0b, 0x0d, 0x10, 0x11, 0x12, 0x64, 0x81, 0x1f] {
                assert!(!completes_nothing(&datagram(v, op)), "IPv{v} opcode {op:#04x}");
            }
        }
        assert!(!completes_nothing(&[]));
        assert!(!completes_nothing(&datagram(4, 0x0a)[..28]), "too short for a BTH");
    }
}
