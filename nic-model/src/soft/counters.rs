//! A soft device's port counters: their names (rdma-core's port counters and the rxe / mlx5
//! hardware counters where one exists), the port's own tallies beside the engine's
//! [`NicStats`], and the order in which the owner publishes them into its inbox segment for
//! `softverbs counters` in another process ([`crate::wire::Fabric::read_counters`]).
//!
//! Direct reach sends no packet, but the counters count the packets each reached operation
//! stands for, on both sides ([`values`]), so that they read as with reach off: a requester's
//! own ([`NicStats::reached_traffic`]) and what peers reached in this port's memory (counted
//! by them in its reach file).

use std::sync::atomic::{AtomicU64, Ordering};

use super::faults::FaultCounters;
use crate::engine::{NicStats, Traffic};

/// One counter: its name as `softverbs counters` shows it, and what it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    /// The name: rdma-core's (`port_xmit_packets`, from `perfquery` and
    /// /sys/class/infiniband/DEV/ports/1/counters), rxe's hardware counter's (`sent_pkts`,
    /// `rdma statistic show`), mlx5's (`local_ack_timeout_err`), or a softverbs one.
    pub name: &'static str,
    /// What it counts, in a few words.
    pub what: &'static str,
}

macro_rules! counters {
    ($($name:literal: $what:literal,)*) => {
        /// Every counter, in the order the owner publishes them (the segment's counter words).
        pub const COUNTERS: &[Counter] = &[$(Counter { name: $name, what: $what },)*];
    };
}

counters! {
    "port_xmit_packets": "datagrams this port put into a peer's inbox",
    "port_rcv_packets": "datagrams this port took from its inbox",
    "port_xmit_data": "their bytes / 4 (4-byte words, as IB's PortXmitData)",
    "port_rcv_data": "their bytes / 4 (4-byte words, as IB's PortRcvData)",
    "sent_pkts": "packets the transport emitted (rxe)",
    "rcvd_pkts": "packets the transport accepted (rxe)",
    "duplicate_request": "duplicate requests a responder saw (rxe)",
    "out_of_seq_request": "requests ahead of the expected PSN (rxe)",
    "rcvd_seq_err": "sequence-error NAKs received (rxe)",
    "send_rnr_err": "RNR NAKs sent (rxe)",
    "rcvd_rnr_err": "RNR NAKs received (rxe)",
    "local_ack_timeout_err": "local ACK timeouts that fired (mlx5)",
    "completer_retry_err": "go-back-N restarts, each spends one retry_cnt (rxe)",
    "retry_exceeded_err": "send WQEs failed with RETRY_EXC_ERR (rxe)",
    "retry_rnr_exceeded_err": "send WQEs failed with RNR_RETRY_EXC_ERR (rxe)",
    "link_downed": "times the port went down (rxe)",
    "retransmitted_pkts": "packets sent again by go-back-N",
    "seq_nak_sent": "sequence-error NAKs sent (one per run of out_of_seq_request)",
    "rcvd_bad_icrc": "datagrams dropped for a bad ICRC",
    "rcvd_malformed": "datagrams dropped as unparsable (bad ICRC included)",
    "drop_no_qp": "packets for no QP, or a QP not in a state to take them",
    "drop_wrong_source": "RC/UC packets not from their QP's peer",
    "drop_bad_length": "SEND/WRITE packets with a payload that does not fit",
    "drop_uc_ud_message": "UC/UD messages dropped (gap, Q_Key, no receive WQE)",
    "drop_ud_inbox_full": "UD datagrams dropped: the peer's inbox was full",
    "drop_unreachable": "datagrams for no live port (lost, as on a dead link)",
    "backpressured": "RC/UC datagrams that waited for room in a full inbox",
    "ack_timeout_waited": "local ACK timeouts that waited again, no retry spent: the live peer had not read its inbox",
    "fault_loss_tx": "SOFTVERBS_FAULTS: packets lost on the way out",
    "fault_loss_rx": "SOFTVERBS_FAULTS: packets lost on the way in",
    "fault_duplicate": "SOFTVERBS_FAULTS: copies made",
    "fault_reorder": "SOFTVERBS_FAULTS: packets held for a reorder jitter",
    "fault_corrupt": "SOFTVERBS_FAULTS: bits flipped",
    "fault_truncate": "SOFTVERBS_FAULTS: packets cut short",
    "fault_drop_nth": "SOFTVERBS_FAULTS: packets dropped by drop=KIND#K",
    "fault_pause": "SOFTVERBS_FAULTS: packets dropped while the port was paused",
    "fault_port_failed": "SOFTVERBS_FAULTS: packets dropped after fail@",
}

/// The index of the counter named `name` in [`COUNTERS`].
pub fn index_of(name: &str) -> Option<usize> {
    COUNTERS.iter().position(|c| c.name == name)
}

/// What became of datagrams a full destination inbox refused (the engine's
/// [`Flushed`](crate::engine::Flushed), added up by the device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backpressure {
    /// RC and UC datagrams that found the destination inbox full and waited in the backlog
    /// (backpressure: they are sent later, in order, nothing is lost).
    pub backpressured: u64,
    /// UD datagrams dropped because the destination inbox was full, as a congested switch
    /// drops datagrams: UD never retransmits, so this is loss the program sees.
    pub ud_dropped_inbox_full: u64,
}

/// What the port itself counted, beside the engine ([`crate::soft::DeviceStats::port`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Datagrams put into a peer's inbox.
    pub xmit_packets: u64,
    /// Their bytes (IPv4 header to ICRC).
    pub xmit_bytes: u64,
    /// Datagrams taken from this port's inbox and handed to the engine.
    pub rcv_packets: u64,
    /// Their bytes.
    pub rcv_bytes: u64,
    /// Datagrams for an address no live port has: lost.
    pub unreachable: u64,
}

/// [`PortCounters`] as the device keeps them: written only by whoever holds the device lock
/// (the port's sending half, lent to the engine, and the progress loop), so an increment is
/// a relaxed load and store, no locked instruction; read by [`Tally::snapshot`] from anywhere.
#[derive(Default)]
pub struct Tally {
    pub(crate) xmit_packets: AtomicU64,
    pub(crate) xmit_bytes: AtomicU64,
    pub(crate) rcv_packets: AtomicU64,
    pub(crate) rcv_bytes: AtomicU64,
    pub(crate) unreachable: AtomicU64,
}

/// Adds `n` to a counter with one writer (see [`Tally`]).
#[inline]
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl Tally {
    /// One datagram of `len` bytes put into a peer's inbox.
    #[inline]
    pub(crate) fn sent(&self, len: usize) {
        add(&self.xmit_packets, 1);
        add(&self.xmit_bytes, len as u64);
    }

    /// One datagram of `len` bytes taken from the inbox.
    #[inline]
    pub(crate) fn received(&self, len: usize) {
        add(&self.rcv_packets, 1);
        add(&self.rcv_bytes, len as u64);
    }

    /// What the port counted so far.
    pub fn snapshot(&self) -> PortCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PortCounters {
            xmit_packets: get(&self.xmit_packets),
            xmit_bytes: get(&self.xmit_bytes),
            rcv_packets: get(&self.rcv_packets),
            rcv_bytes: get(&self.rcv_bytes),
            unreachable: get(&self.unreachable),
        }
    }
}

/// Number of counters.
pub const COUNT: usize = COUNTERS.len();

// Every counter has a word in the segment's counters block.
const _: () = assert!(COUNT <= crate::wire::layout::COUNTER_WORDS);

/// The value of every counter of [`COUNTERS`], in its order, from the engine's and the
/// port's counts; `link_downed` is whether the port has gone down. The packet and byte
/// counters (`port_xmit_packets`, `port_rcv_packets`, `port_xmit_data`, `port_rcv_data`,
/// `sent_pkts`, `rcvd_pkts`) add the packets direct reach stood for: this port's requests
/// (`nic.reached_traffic`) and its peers' in its memory (`reached_here`).
pub fn values(
    nic: &NicStats,
    backpressure: &Backpressure,
    port: &PortCounters,
    faults: &FaultCounters,
    reached_here: &Traffic,
    link_downed: bool,
) -> [u64; COUNT] {
    let mut stood = nic.reached_traffic;
    stood.add(reached_here);
    let plus = |wire: u64, reached: u64| wire.wrapping_add(reached);
    [
        plus(port.xmit_packets, stood.sent_packets),
        plus(port.rcv_packets, stood.received_packets),
        plus(port.xmit_bytes, stood.sent_bytes) / 4,
        plus(port.rcv_bytes, stood.received_bytes) / 4,
        plus(nic.tx_packets, stood.sent_packets),
        plus(nic.rx_packets, stood.received_packets),
        nic.rx_duplicates,
        nic.rx_out_of_sequence,
        nic.seq_naks_received,
        nic.rnr_naks_sent,
        nic.rnr_naks_received,
        nic.timeouts,
        nic.retries,
        nic.retry_exceeded,
        nic.rnr_retry_exceeded,
        u64::from(link_downed),
        nic.retransmits,
        nic.seq_naks_sent,
        nic.rx_bad_icrc,
        nic.rx_malformed,
        nic.rx_no_qp,
        nic.rx_wrong_source,
        nic.rx_bad_length,
        nic.dropped_messages,
        backpressure.ud_dropped_inbox_full,
        port.unreachable,
        backpressure.backpressured,
        nic.timeouts_deferred,
        faults.loss_tx,
        faults.loss_rx,
        faults.duplicate,
        faults.reorder,
        faults.corrupt,
        faults.truncate,
        faults.drop_nth,
        faults.pause,
        faults.port_failed,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_its_own_place_and_fits_the_segment() {
        for (i, c) in COUNTERS.iter().enumerate() {
            assert_eq!(index_of(c.name), Some(i), "{} is listed once", c.name);
        }
        let nic =
            NicStats { tx_packets: 5, rx_bad_icrc: 2, seq_naks_received: 3, ..NicStats::default() };
        let backpressure = Backpressure { backpressured: 7, ud_dropped_inbox_full: 1 };
        let port = PortCounters {
            xmit_bytes: 400,
            rcv_packets: 9,
            unreachable: 4,
            ..PortCounters::default()
        };
        let faults = FaultCounters { loss_rx: 6, port_failed: 2, ..FaultCounters::default() };
        let here = Traffic { received_packets: 2, received_bytes: 100, ..Traffic::default() };
        let v = values(&nic, &backpressure, &port, &faults, &here, true);
        let at = |n: &str| v[index_of(n).expect(n)];
        assert_eq!(at("sent_pkts"), 5);
        assert_eq!(at("rcvd_bad_icrc"), 2);
        assert_eq!(at("rcvd_seq_err"), 3);
        assert_eq!(at("backpressured"), 7);
        assert_eq!(at("drop_ud_inbox_full"), 1);
        assert_eq!(at("port_xmit_data"), 100, "4-byte words");
        assert_eq!(at("port_rcv_packets"), 11, "9 from the inbox, 2 reached here");
        assert_eq!(at("port_rcv_data"), 25);
        assert_eq!(at("drop_unreachable"), 4);
        assert_eq!(at("link_downed"), 1);
        assert_eq!((at("fault_loss_rx"), at("fault_port_failed")), (6, 2));
    }
}
