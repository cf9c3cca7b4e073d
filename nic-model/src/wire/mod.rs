//! Shared-memory wires: how packets travel between the NIC engines of different processes on
//! one machine.
//!
//! A [`Fabric`] is a directory of segment files (by default `/dev/shm/softverbs-<uid>`, mode
//! 0700; `SOFTVERBS_FABRIC` overrides it), created by [`Fabric::open`] for a program that
//! attaches ports, never by [`Fabric::open_existing`] for one that only looks. Each port owns one **inbox** segment,
//! `port-<lid>.inbox` (mode 0600): a bounded multi-producer, single-consumer ring of
//! fixed-size packet slots plus a doorbell word. Any process of the fabric maps another port's
//! inbox on demand ([`Fabric::connect`]) and enqueues RoCEv2 datagrams into it
//! ([`Sender::send`]); the owning NIC thread takes them out in order ([`Inbox::recv`]) and,
//! when idle, parks on the doorbell futex ([`Inbox::park`]), which a sender rings only if the
//! owner is parked. Sending and receiving on a busy ring make no system call.
//!
//! Segments hold offsets, never pointers (the layout is in the `layout` module), start with
//! a magic, a layout version, their sizes and their owner's pid, and are checked when opened;
//! a segment whose owner died is reported by [`Fabric::list`], reused by
//! [`Fabric::create_inbox`] and removed by [`Fabric::clean`]. What happens when a *sender*
//! dies halfway through writing a packet is described on [`Inbox`].
//!
//! A stray write into a live segment's ring is found where the ring is read anyway and makes
//! the segment broken for its owner, its senders and [`Fabric::list`] alike (see [`Inbox`]).
//!
//! Limits: a process that truncates a segment file under a live mapping makes its users
//! fault (SIGBUS); only processes of the same user can, since files are 0600 in a 0700
//! directory and files owned by anyone else are refused.

mod at_exit;
mod error;
mod fabric;
mod inbox;
pub(crate) mod layout;
pub mod mcast;
pub(crate) mod os;
pub mod reach;
mod segment;
mod sender;
#[cfg(test)]
mod tests;

pub use error::WireError;
pub use fabric::{Fabric, InboxConfig, PublishedCounters, SegmentInfo, FABRIC_ENV};
pub use inbox::{Inbox, InboxStats, MAX_PARK, WRITER_STALL_CHECK};
pub use layout::{CORRUPTED, LAYOUT_VERSION, MAX_LID};
pub use os::{block_async_signals, handlers_restart};
pub use sender::Sender;

/// Whether process `pid` exists and is not a zombie (`kill(pid, 0)` and `/proc`): how the
/// fabric tells a dead owner, for tools that keep their own per-process files beside it.
pub fn process_alive(pid: u32) -> bool {
    os::process_alive(pid, 0)
}
