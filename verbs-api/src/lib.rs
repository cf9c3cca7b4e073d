//! The softverbs verbs API: the vocabulary of libibverbs (`<infiniband/verbs.h>`) as Rust types,
//! one error type, the handles a program holds, and the provider traits each backend implements.
//!
//! A program written against this crate runs unchanged on every backend: `soft` (the software NIC
//! between processes), `sim` (the deterministic simulator) and `hw` (real NICs through libibverbs,
//! behind the `rdma-sys` feature). The backend is chosen by device name.

pub mod error;
#[path = "device.rs"]
pub mod handles;
pub mod provider;
pub mod qp_state;
#[path = "types/wr.rs"]
pub mod types;

pub use error::{Errno, Error, Result};
pub use handles::*;
pub use provider::{
    backend_of, hw_provider, register_provider, AsyncElement, AsyncEvent, AsyncEventType,
    DeviceInfo, Provider, SrqAttr, SrqAttrMask, SrqInitAttr,
};
pub use types::*;

#[cfg(feature = "rdma-sys")]
pub mod hw;
