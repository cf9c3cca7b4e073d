//! The softverbs software NIC: RoCEv2 packets, the transport engine, the shared-memory wire,
//! and the `soft` backend that binds them to the verbs API.
//!
//! Layers, bottom up:
//! - [`packet`]: the RoCEv2 transport headers and ICRC, parsed and emitted from one opcode table;
//! - [`engine`]: the sans-IO transport (requester, responder, completer, QP state, CQs, MRs);
//! - [`wire`]: shared-memory inbox segments that carry packets between processes;
//! - [`soft`]: the `soft` backend, which drives engines over a wire with real time;
//! - [`umem`]: what `ibv_reg_mr` of a program's memory may pin, as the kernel checks it;
//! - [`pinned`]: a program's registered pages moved onto shared memory, the NIC's until
//!   `ibv_dereg_mr` and reachable by peers;
//! - [`cost`]: process-wide counters of the emulation's own copies and system calls.

pub mod cost;
pub mod engine;
pub mod fault;
mod odp;
pub mod packet;
pub mod pinned;
pub mod prefetch;
mod small_copy;
pub mod soft;
pub mod umem;
pub mod verbs;
pub mod wire;
