//! The verbs objects, one room each: the trait its backend implements (`CqOps`, ...) and the
//! handle a program holds (`CompletionQueue`, ...), which forwards each verb to that trait.
//!
//! A trait and its handle share a room because a verb that makes or names another object takes
//! that object's handle: `ibv_create_cq` takes a completion channel, `ibv_create_qp` the CQs and
//! SRQ, and a UD send WR carries an address handle. So the rooms stack as the objects do: `ah`,
//! `cq`, `mr` and `srq` at the bottom, `qp` on them, `mw` on `qp` (`ibv_bind_mw` posts on a
//! QP), `pd` on `mw`, and `context` on top; none
//! names a room above it.

pub mod ah;
pub mod context;
pub mod cq;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
pub mod srq;

pub use ah::{AddressHandle, AhOps};
pub use context::{Context, ContextOps};
pub use cq::{CompChannel, CompChannelOps, CompletionQueue, CqOps};
pub use mr::{MemoryRegion, MrOps};
pub use mw::{inc_rkey, MemoryWindow, MwBindInfo, MwOps, MwType};
pub use pd::{MrAdvice, PdOps, ProtectionDomain};
pub use qp::{QpInitAttr, QpOps, QueuePair, SendWr, UdTarget};
pub use srq::{SharedReceiveQueue, SrqOps};
