//! softverbs as `librdmacm.so.1`: the RDMA connection manager's C ABI (rdma-core 44's symbols,
//! version nodes and struct layouts) over softverbs' `libibverbs.so.1`, so programs that connect
//! by IP address and port (rping, perftest `-R`, the rdma-core examples) run unmodified.
//!
//! A softverbs port's address is its GID (`::ffff:10.0.x.y`). The CM's messages (REQ, REP,
//! RTU, REJ, DREQ, DREP) go between processes over Unix datagram sockets in
//! `$SOFTVERBS_FABRIC/cm/`, one per event channel, which is also the channel's pollable `fd`.
#![allow(clippy::missing_safety_doc)]

mod cm_abi;
mod cm_state;
mod conn;
mod cq;
mod ep;
mod events;
mod ids;
mod mcast;
mod more;
mod outbox;
mod qpattr;
mod state;
mod sync;
mod v6;
mod watch;
// The rsocket API (issue 30).
mod rsocket;
// The CM across hosts: CM MADs on QP1 over the UDP wire (issue 31 item 3).
mod wire;
// QP 1 for every process of an address (issue 31).
mod wire_mux;
// An id's own name, which rdma_migrate_id re-points (librpma).
mod home;
// The CM across hosts over IPv6: stand-in addresses for IPv6 peers, MADs over IPv6.
mod wire6;

// Each exported symbol's version node, generated from symbols.txt by build.rs.
std::arch::global_asm!(include_str!(concat!(env!("OUT_DIR"), "/symver.s")));
