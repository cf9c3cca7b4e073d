//! The wire a soft device lends its NIC ([`PortWire`]): its port, its connections to other
//! ports' inboxes, and what looks at the datagrams on their way out (the device's tap and
//! capture, its fault plan); and the [`Tap`] type.

use std::sync::{Arc, Mutex, MutexGuard};

use super::capture::Capture;
use super::counters::{self, Tally};
use super::faults::{Dir, PortFaults, Verdict};
use super::port::{Links, Port, SendOutcome};
use crate::engine::{ReachAsk, Reached, Wire};

/// Receives a copy of every datagram a device sends or receives, for teaching output (the demo
/// prints each packet) and captures. It runs on whichever thread runs the engine, with the
/// device locked: it must be quick, must not call verbs of the same device, and must not hold
/// the device's handles (that would keep the device alive forever).
pub type Tap = Arc<dyn Fn(TapDir, &[u8]) + Send + Sync>;

/// Direction of a tapped datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapDir {
    /// Sent by this device.
    Tx,
    /// Received by this device.
    Rx,
}

/// The tap that records a device's datagrams into `capture`.
pub(super) fn capture_tap(capture: &Arc<Capture>) -> Tap {
    let c = capture.clone();
    Arc::new(move |dir, datagram| c.record(dir == TapDir::Rx, datagram))
}

/// The device's port lent to its NIC ([`Nic::set_wire`](crate::engine::Nic::set_wire)): small datagrams go into the
/// destination's ring slot as the engine makes them, queued ones when `flush_tx` sends them,
/// and the tap sees each one that went into a slot.
pub(crate) struct PortWire {
    port: Arc<dyn Port>,
    /// The port's connections to the inboxes this device sends to.
    links: Links,
    tap: Option<Tap>,
    /// The device's port counters (what went into a peer's inbox, and what was unreachable).
    tally: Arc<Tally>,
    /// The port's faults (`SOFTVERBS_FAULTS`), if it has a plan.
    faults: Option<Arc<Mutex<PortFaults>>>,
}

impl PortWire {
    /// The wire to lend a device's NIC: through `port`, with the device's tap (its capture
    /// and any other), port counters and fault plan.
    pub(super) fn lend(
        port: &Arc<dyn Port>,
        tap: Option<Tap>,
        tally: &Arc<Tally>,
        faults: &Option<Arc<Mutex<PortFaults>>>,
    ) -> Box<dyn Wire> {
        Box::new(PortWire {
            port: port.clone(),
            links: Links::default(),
            tap,
            tally: tally.clone(),
            faults: faults.clone(),
        })
    }

    #[inline]
    fn send_clean(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        let outcome = self.port.send(&mut self.links, dst, datagram);
        self.count(outcome, datagram.len());
        if outcome == SendOutcome::Sent {
            if let Some(tap) = &self.tap {
                tap(TapDir::Tx, datagram);
            }
        }
        outcome
    }

    /// Counts a datagram of `len` bytes that went into a peer's inbox, or found no port.
    #[inline]
    fn count(&self, outcome: SendOutcome, len: usize) {
        match outcome {
            SendOutcome::Sent => self.tally.sent(len),
            SendOutcome::Unreachable => counters::add(&self.tally.unreachable, 1),
            SendOutcome::Full => {}
        }
    }

    /// A send under a fault plan: lost (as on a link, the sender does not know), held for
    /// its jitter, or sent (changed, and copied, as the plan's dice say).
    #[cold]
    fn send_faulted(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        let Some(f) = &self.faults else { return self.send_clean(dst, datagram) };
        let verdict = lock_faults(f).judge(Dir::Tx, dst, datagram);
        match verdict {
            Verdict::Drop | Verdict::Held => SendOutcome::Sent,
            Verdict::Pass { altered, dup } => {
                let bytes = altered.as_deref().unwrap_or(datagram);
                let outcome = self.send_clean(dst, bytes);
                if dup && outcome == SendOutcome::Sent {
                    let _ = self.send_clean(dst, bytes);
                }
                outcome
            }
        }
    }
}

/// The fault plan's state, even if a thread panicked holding it.
pub(super) fn lock_faults(f: &Mutex<PortFaults>) -> MutexGuard<'_, PortFaults> {
    f.lock().unwrap_or_else(|e| e.into_inner())
}

impl Wire for PortWire {
    #[inline]
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        if self.faults.is_some() {
            return self.send_faulted(dst, datagram);
        }
        self.send_clean(dst, datagram)
    }

    fn reach(&mut self, dst: [u8; 4], ask: &ReachAsk) -> Option<Reached<'_>> {
        self.port.reach(&mut self.links, dst, ask)
    }

    // Nothing may look at the wire (a capture or tap, a fault plan) while a peer is reached.
    fn reaches(&self) -> bool {
        self.tap.is_none() && self.faults.is_none() && self.port.arena().is_some()
    }

    // Nothing looks at what this side sends (no capture or tap, no fault plan, each fixed for
    // the life of this wire: a new tap lends a new one), and the port marks the datagrams so.
    fn takes_unset_icrc(&self) -> bool {
        self.tap.is_none() && self.faults.is_none() && self.port.carries_unset_icrc()
    }

    #[inline]
    fn send_without_icrc(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        debug_assert!(self.tap.is_none() && self.faults.is_none(), "lent so: nothing looks");
        let outcome = self.port.send_without_icrc(&mut self.links, dst, datagram);
        self.count(outcome, datagram.len());
        outcome
    }
}
