//! Taps: a copy of every datagram a device sends or receives, for teaching output (the demo
//! prints each packet). On the way out a tap is a layer around the port's sending half
//! ([`Tapped`]); on the way in the device's progress round calls it before the engine sees
//! the datagram, together with the capture ([`observer`]).

use std::sync::Arc;

use super::capture::Capture;
use crate::engine::{Egress, SendOutcome};

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

/// What looks at the datagrams a device receives: its capture, then its tap (None: nothing).
pub(super) fn observer(capture: Option<&Arc<Capture>>, tap: Option<Tap>) -> Option<Tap> {
    let c = capture.map(|c| {
        let c = c.clone();
        Arc::new(move |dir, datagram: &[u8]| c.record(dir == TapDir::Rx, datagram)) as Tap
    });
    match (c, tap) {
        (Some(c), Some(t)) => Some(Arc::new(move |dir: TapDir, d: &[u8]| {
            c(dir, d);
            t(dir, d);
        }) as Tap),
        (c, t) => c.or(t),
    }
}

/// A port's sending half (or its other layers) with a tap on it: the tap sees each datagram
/// that went into a peer's inbox.
pub(crate) struct Tapped<S> {
    inner: S,
    tap: Tap,
}

impl<S: Egress> Tapped<S> {
    pub(crate) fn new(inner: S, tap: Tap) -> Tapped<S> {
        Tapped { inner, tap }
    }
}

impl<S: Egress> Egress for Tapped<S> {
    fn send(&mut self, dst: [u8; 4], datagram: &[u8]) -> SendOutcome {
        let outcome = self.inner.send(dst, datagram);
        if outcome == SendOutcome::Sent {
            (self.tap)(TapDir::Tx, datagram);
        }
        outcome
    }

    fn release(&mut self) -> bool {
        self.inner.release()
    }

    // Looking at datagrams loses none.
    fn peer_busy(&self, dst: [u8; 4]) -> bool {
        self.inner.peer_busy(dst)
    }
}
