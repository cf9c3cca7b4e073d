//! The verbs vocabulary: the structs, enums and flags of `<infiniband/verbs.h>` that name no
//! verbs object, as plain Rust values, by topic. Everything here is re-exported at the crate
//! root.
//!
//! The two structs that carry objects (`ibv_send_wr` with its address handle, `ibv_qp_init_attr`
//! with its CQs and SRQ) live with the queue pair in `object/qp.rs`, because a handle is built
//! on the trait its backend implements, and those traits are built on this vocabulary.

mod device;
mod qp;
mod wr;

pub use device::*;
pub use qp::*;
pub use wr::*;
