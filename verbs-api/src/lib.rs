//! The softverbs verbs API: the vocabulary of libibverbs (`<infiniband/verbs.h>`) as Rust types,
//! one error type, the handles a program holds, and the provider traits each backend implements.
//!
//! A program written against this crate runs unchanged on every backend: `soft` (the software NIC
//! between processes), `sim` (the deterministic simulator) and `hw` (real NICs through libibverbs,
//! behind the `rdma-sys` feature). The backend is chosen by device name.
//!
//! The modules stand in layers, each naming only those below it:
//! - the vocabulary: [`types`] (the structs, enums and flags of `verbs.h`), [`error`],
//!   [`ibv`] (each enum's `IBV_*` values, one table per enum) and [`qp_state`] (the IBA
//!   modify-QP table);
//! - [`object`]: one room per verbs object (context, PD, MR, CQ and completion channel, QP, SRQ,
//!   AH), each holding the trait a backend implements and the handle a program holds;
//! - [`provider`]: what a backend implements, in one place: [`Provider`] and the objects' traits;
//! - [`device`]: the provider registry, the device list, and the one module that maps a device
//!   name to its backend, including the `hw` backend below;
//! - [`conn`]: connecting RC/UC QPs as verbs programs do (the QP information two sides exchange,
//!   INIT → RTR → RTS), on top: it uses only the handles and vocabulary, so it works on every
//!   backend and a program that connects two QPs needs nothing beyond this crate and a provider.
//!
//! `hw` (feature `rdma-sys`) is the libibverbs backend. It implements the provider traits and,
//! like every backend, is named by nothing above except [`device`] (through [`hw_provider`]).

pub mod conn;
pub mod device;
pub mod error;
pub mod ibv;
pub mod object;
pub mod provider;
pub mod qp_state;
pub mod types;

pub use device::{
    backend_of, device_list, device_list_detailed, find_device, hw_provider, register_provider,
    Device,
};
pub use error::{Errno, Error, Result};
pub use ibv::IbvEnum;
pub use object::{
    inc_rkey, AddressHandle, CompChannel, CompletionQueue, Context, MemoryRegion, MemoryWindow,
    MrAdvice, MwBindInfo, MwOps, MwType, ProtectionDomain, QpInitAttr, QueuePair, SendWr,
    SharedReceiveQueue, UdTarget,
};
pub use provider::{DeviceInfo, Provider};
pub use types::*;

#[cfg(feature = "rdma-sys")]
pub mod hw;
