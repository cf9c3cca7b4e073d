//! A CM id's state, named after the kernel's `enum rdma_cm_state` (drivers/infiniband/core/
//! cma_priv.h), with the one function that moves it, as verbs-api's `qp_state.rs` is for QPs.
//! Every place that changes an id's connection state goes through [`CmState::move_to`].

/// Where an id is in its life (the kernel's `RDMA_CM_*` state of the same name, except
/// [`Established`](CmState::Established), which the kernel keeps as `RDMA_CM_CONNECT` and the
/// IB CM beneath it calls established).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CmState {
    /// `RDMA_CM_IDLE`: made, or bound to a local address only.
    #[default]
    Idle,
    /// `RDMA_CM_ADDR_RESOLVED`: `rdma_resolve_addr` found the softverbs port.
    AddrResolved,
    /// `RDMA_CM_ROUTE_RESOLVED`: `rdma_resolve_route` done (one route to every port).
    RouteResolved,
    /// `RDMA_CM_CONNECT`: a REQ sent (`rdma_connect`) or, for a listener's new id, received.
    Connect,
    /// Connected: the REP (active side) or RTU (passive side) came, or `rdma_establish`.
    Established,
    /// `RDMA_CM_DISCONNECT`: a DREQ or DREP came, or the DREQ went unanswered; DISCONNECTED is
    /// delivered once, on the move here.
    Disconnect,
}

impl CmState {
    /// Whether `self -> next` is a move an id makes. Resolving again is allowed (an address
    /// may be resolved twice before connecting); a move to `Disconnect` is allowed from every
    /// state but itself (a DREQ timeout, a peer's DREQ racing ours); nothing leaves `Disconnect`.
    pub fn allows(self, next: CmState) -> bool {
        use CmState::*;
        matches!(
            (self, next),
            (Idle | AddrResolved | RouteResolved, AddrResolved)
                | (AddrResolved | RouteResolved, RouteResolved)
                | (Idle | AddrResolved | RouteResolved | Connect, Connect)
                | (AddrResolved | RouteResolved | Connect | Established, Established)
        ) || (next == Disconnect && self != Disconnect)
    }

    /// Move to `next` if [`allows`](CmState::allows) says so; returns whether it moved (a
    /// refused move leaves the state, as the kernel's `cma_comp_exch` does).
    pub fn move_to(&mut self, next: CmState) -> bool {
        let ok = self.allows(next);
        if ok {
            *self = next;
        }
        ok
    }

    /// Whether the id has a destination address (resolved, or a REQ's): `rdma_resolve_route`
    /// and `rdma_connect` need one.
    pub fn has_addr(self) -> bool {
        !matches!(self, CmState::Idle)
    }

    /// Whether the connection is established (a GONE peer then gets a DREQ, not a REJ).
    pub fn established(self) -> bool {
        self == CmState::Established
    }

    /// Whether DISCONNECTED was delivered (each side gets it once).
    pub fn disconnected(self) -> bool {
        self == CmState::Disconnect
    }
}
