//! The CM id's state machine (src/cm_state.rs), on its own: the library's crate has no unit
//! tests (its `.symver` lines need the cdylib's version nodes), so the module is compiled here
//! by path, as a plain Rust module with no C around it.

#[path = "../src/cm_state.rs"]
#[allow(dead_code)]
mod cm_state;

use cm_state::CmState::{self, *};

const ALL: [CmState; 6] = [Idle, AddrResolved, RouteResolved, Connect, Established, Disconnect];

#[test]
fn an_active_id_resolves_connects_and_disconnects() {
    let mut s = CmState::default();
    assert_eq!(s, Idle);
    assert!(!s.has_addr());
    for next in [AddrResolved, RouteResolved, Connect, Established, Disconnect] {
        assert!(s.move_to(next), "{s:?} -> {next:?}");
    }
    assert!(s.disconnected() && s.has_addr() && !s.established());
}

#[test]
fn a_listeners_new_id_starts_connecting() {
    let mut s = Idle;
    assert!(s.move_to(Connect) && s.has_addr());
    assert!(s.move_to(Established) && s.established());
}

#[test]
fn nothing_leaves_disconnect_and_disconnected_is_delivered_once() {
    for from in ALL {
        let mut s = from;
        assert_eq!(s.move_to(Disconnect), from != Disconnect, "{from:?}");
        for next in ALL {
            assert!(!Disconnect.allows(next), "Disconnect -> {next:?}");
        }
        assert_eq!(s, Disconnect);
    }
}

#[test]
fn connecting_needs_an_address_and_resolving_again_is_allowed() {
    assert!(!Idle.allows(Established));
    assert!(!Idle.allows(RouteResolved));
    assert!(RouteResolved.allows(AddrResolved));
    assert!(AddrResolved.allows(AddrResolved));
    assert!(!Established.allows(Connect));
    assert!(!Established.allows(AddrResolved));
    let mut s = Established;
    assert!(!s.move_to(Connect));
    assert_eq!(s, Established, "a refused move leaves the state");
}
