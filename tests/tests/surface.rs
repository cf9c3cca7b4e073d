//! The verbs surface beyond plain RC on every backend: each body of
//! `softverbs_tests::surface::bodies` runs on the soft backend in one process, on the soft
//! backend with device B in another process (an `sv-peer verbs` child, over a shared-memory
//! fabric of the test's own), and in the simulator.

use std::sync::{Mutex, MutexGuard};

use softverbs_tests::remote::RemoteDevice;
use softverbs_tests::surface::{bodies, Backend, RealTimePair, SimPair, SoftProcesses};
use softverbs_tests::{FabricDir, Peer};
use verbs_api::{AccessFlags, Errno};

const PEER: &str = env!("CARGO_BIN_EXE_sv-peer");

/// The multi-process runs take turns, so their processes do not compete for the CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn on_soft_loopback(body: fn(&dyn Backend)) {
    body(&RealTimePair::soft_loopback());
}

fn between_processes(test: &str, body: fn(&dyn Backend)) {
    let _serial = serial();
    let be = SoftProcesses::new(PEER.as_ref(), test);
    body(&be);
    be.finish();
}

/// The simulator's seed (the bodies inject their faults explicitly; the seed fixes the rest).
const SIM_SEED: u64 = 0x5EED_0005;

fn in_the_sim(body: fn(&dyn Backend)) {
    println!("[sim] seed {SIM_SEED:#x}");
    body(&SimPair::new(SIM_SEED));
}

/// One test per backend for each body: `<backend>::<body>`.
macro_rules! on_every_backend {
    ($($body:ident $(#[$soft_attr:meta])?),* $(,)?) => {
        mod soft_loopback {
            use super::*;
            $( #[test] $(#[$soft_attr])? fn $body() { on_soft_loopback(bodies::$body) } )*
        }
        mod soft_processes {
            use super::*;
            $( #[test] $(#[$soft_attr])? fn $body() { between_processes(stringify!($body), bodies::$body) } )*
        }
        mod sim {
            use super::*;
            $( #[test] fn $body() { in_the_sim(bodies::$body) } )*
        }
    };
}

on_every_backend!(
    uc_operations_and_loss,
    ud_datagrams,
    srq_shared_by_rc_uc_and_ud,
    async_events_name_their_element,
    cq_overrun_is_an_error_and_an_event,
    limits_are_enforced_and_in_use_is_ebusy,
    cq_resize_and_completion_channel,
    rc_uc_and_ud_at_once,
);

/// When the peer process dies, every verb on its device fails with `EIO` saying what happened
/// to it, at once rather than after a timeout for each call.
#[test]
fn a_dead_verbs_peer_turns_calls_into_eio() {
    let _serial = serial();
    let dir = FabricDir::new("dead_peer");
    let args = ["verbs".to_string(), dir.path().display().to_string()];
    let remote = RemoteDevice::attach(Peer::spawn("dead-peer", PEER.as_ref(), &args))
        .expect("the verbs peer starts");
    let ctx = remote.context().clone();
    let pd = ctx.alloc_pd().expect("alloc_pd in the peer");
    remote.kill();
    let e = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(e.errno, Errno::Io, "{e}");
    assert!(e.message.contains("dead-peer") && e.message.contains("signal: 9"), "{e}");
    let e = ctx.alloc_pd().unwrap_err();
    assert_eq!(e.errno, Errno::Io, "{e}");
    assert!(e.message.contains("the verbs peer is unusable"), "{e}");
}
