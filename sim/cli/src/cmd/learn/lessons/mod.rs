//! The lessons of `softverbs learn`, one file each, in the order of the primer: `zero_copy`,
//! `bypass`, `one_sided`, `messages`, `sge` and `vs_tcp` run between two processes over
//! [`super::session`] and [`super::runs`]; `qp_states` and `mr`, the control path, run two
//! devices in this process alone. Each has a `run` that prints the lesson and its table.

pub(super) mod bypass;
pub(super) mod messages;
pub(super) mod mr;
pub(super) mod one_sided;
pub(super) mod qp_states;
pub(super) mod sge;
pub(super) mod vs_tcp;
pub(super) mod zero_copy;
