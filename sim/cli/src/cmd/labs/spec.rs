//! What each C lab in `labs/` must show for `softverbs labs check` to pass it: the packets on
//! the wire, the completions the program prints, the bytes that landed, each with the hint that
//! says what to change when it is missing or wrong.

/// One completion a lab's program must print, as `wc SIDE status=… opcode=… byte_len=N [imm=0x…]`
/// (the form labs/README.md fixes; `ibv_wc` fields under libibverbs' names).
pub struct WcWant {
    /// Which process prints it (`requester`, `responder`, ...).
    pub side: &'static str,
    /// The `ibv_wc_opcode` name.
    pub opcode: &'static str,
    /// `byte_len`, where the lab fixes it.
    pub byte_len: Option<u32>,
    /// `imm_data` (hex, as printed), where the lab sends one.
    pub imm: Option<&'static str>,
    /// What to do when the completion has another opcode.
    pub hint: &'static str,
}

/// One lab: its number, title, README, and what a correct program shows.
pub struct Lab {
    /// The lab's number (1..=11), as `labs check N` takes it.
    pub n: u32,
    /// The directory under `labs/`.
    pub dir: &'static str,
    /// One line: what the lab teaches.
    pub title: &'static str,
    /// The lab's README.md, built in.
    pub readme: &'static str,
    /// Packets that must be on the wire: the opcode as the capture names it, how many, and
    /// what to change when the count differs.
    pub wire: &'static [(&'static str, usize, &'static str)],
    /// Completions the program must print.
    pub wcs: &'static [WcWant],
    /// Lines the program must print exactly (the bytes that landed, `mem SIDE TEXT`, and the
    /// lab's own lines), with what to change when one is missing.
    pub lines: &'static [(&'static str, &'static str)],
}

const SEND_HINT: &str =
    "post an IBV_WR_SEND on the requester and an ibv_post_recv on the responder";
const WRITE_IMM_HINT: &str = "post an IBV_WR_RDMA_WRITE_WITH_IMM (with imm_data = htonl(0x1234)), and an ibv_post_recv on the responder to take the immediate";
const RTS_HINT: &str = "bring both QPs RESET -> INIT -> RTR -> RTS with ibv_modify_qp in connect_qp (TODO(1)-(3)); ibv_query_qp then says IBV_QPS_RTS";
const ATOMIC_HINT: &str = "post IBV_WR_ATOMIC_FETCH_AND_ADD with wr.wr.atomic.remote_addr = peer.addr, .rkey = peer.rkey, .compare_add = 1 and an 8-byte SGE for the old value: a READ and a WRITE instead lose updates when four clients race";
const EVENT_HINT: &str = "arm the CQ with ibv_req_notify_cq before the completion can come (TODO(1)), then sleep in ibv_get_cq_event, print `event responder cq` and ibv_ack_cq_events (TODO(2))";
const FIX_SEND_HINT: &str =
    "a SEND needs a receive the responder posted (ibv_post_recv) before it arrives";
const FIX_WRITE_HINT: &str =
    "the responder's memory region must allow IBV_ACCESS_REMOTE_WRITE for a peer's RDMA WRITE";
const READ_HINT: &str = "post an IBV_WR_RDMA_READ with the responder's address and rkey in wr.rdma";

const SRQ_HINT: &str = "make one SRQ (ibv_create_srq) and post the receives to it (ibv_post_srq_recv) (TODO(1)), and create each client's QP with init.srq = srq (TODO(2)): a QP with neither an SRQ nor receives of its own answers each SEND with an RNR NAK";

const SRQ_MEM_HINT: &str = "each client's message lands in a receive of the SRQ: take one completion per client from the server's CQ, and print the bytes at server.buf + wc.wr_id * SLOT, naming the client by wc.qp_num";

const UD_HINT: &str = "two requests from the clients and two replies from the server, each a datagram: bring each UD QP to RTS (INIT with the P_Key index, port and Q_Key; RTR; RTS with the first PSN, TODO(1)), and answer each request with an address handle made from its completion and GRH (ibv_create_ah_from_wc) and a SEND to wc.src_qp with the Q_Key (TODO(2))";
const UD_REQUEST_HINT: &str = "the server names each request's client by wc.src_qp and reads it past the 40 bytes of the GRH at the start of the receive buffer";

const PING_HINT: &str = "the ping-pong is given: 50 warm-up and 500 timed round trips, each a SEND from the requester and one back from the responder; if fewer, the program stopped early";

/// Every lab, in order.
pub const LABS: &[Lab] = &[
    Lab {
        n: 1,
        dir: "1-open-and-register",
        title: "open a device and register memory",
        readme: include_str!("../../../../../labs/1-open-and-register/README.md"),
        wire: &[],
        wcs: &[],
        lines: &[
            ("device softverbs0", "open softverbs0 with ibv_get_device_list and ibv_open_device and print its name (TODO(1))"),
            ("mr length=4096 access=LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ", "register the whole 4096-byte buffer with ibv_reg_mr and IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ (TODO(2), TODO(3))"),
        ],
    },
    Lab {
        n: 2,
        dir: "2-qp-to-rts",
        title: "bring a QP to RTS",
        readme: include_str!("../../../../../labs/2-qp-to-rts/README.md"),
        wire: &[("RC SEND ONLY", 1, RTS_HINT)],
        wcs: &[WcWant { side: "responder", opcode: "IBV_WC_RECV", byte_len: Some(6), imm: None, hint: RTS_HINT }],
        lines: &[
            ("qp requester state=IBV_QPS_RTS", RTS_HINT),
            ("qp responder state=IBV_QPS_RTS", RTS_HINT),
        ],
    },
    Lab {
        n: 3,
        dir: "3-send-recv",
        title: "SEND and RECV",
        readme: include_str!("../../../../../labs/3-send-recv/README.md"),
        wire: &[("RC SEND ONLY", 1, SEND_HINT)],
        wcs: &[
            WcWant { side: "requester", opcode: "IBV_WC_SEND", byte_len: None, imm: None, hint: "post an IBV_WR_SEND with IBV_SEND_SIGNALED" },
            WcWant { side: "responder", opcode: "IBV_WC_RECV", byte_len: Some(6), imm: None, hint: SEND_HINT },
        ],
        lines: &[("mem responder hello", "send the 6 bytes \"hello\\0\" from the requester's buffer into the responder's posted receive buffer")],
    },
    Lab {
        n: 4,
        dir: "4-write-imm",
        title: "RDMA WRITE with immediate",
        readme: include_str!("../../../../../labs/4-write-imm/README.md"),
        wire: &[("RC RDMA WRITE ONLY WITH IMMEDIATE", 1, WRITE_IMM_HINT)],
        wcs: &[
            WcWant { side: "requester", opcode: "IBV_WC_RDMA_WRITE", byte_len: None, imm: None, hint: WRITE_IMM_HINT },
            WcWant { side: "responder", opcode: "IBV_WC_RECV_RDMA_WITH_IMM", byte_len: None, imm: Some("0x1234"), hint: WRITE_IMM_HINT },
        ],
        lines: &[("mem responder written by WRITE", "write the 17 bytes \"written by WRITE\\0\" to the responder's buffer at offset 1024 (remote_addr = peer.addr + 1024, rkey = peer.rkey)")],
    },
    Lab {
        n: 5,
        dir: "5-read",
        title: "RDMA READ",
        readme: include_str!("../../../../../labs/5-read/README.md"),
        wire: &[("RC RDMA READ REQUEST", 1, READ_HINT), ("RC RDMA READ RESPONSE ONLY", 1, READ_HINT)],
        wcs: &[WcWant { side: "requester", opcode: "IBV_WC_RDMA_READ", byte_len: Some(8), imm: None, hint: READ_HINT }],
        lines: &[("mem requester read me", "read the 8 bytes \"read me\\0\" at offset 2048 of the responder's buffer into the requester's buffer at offset 128")],
    },
    Lab {
        n: 6,
        dir: "6-atomic-counter",
        title: "an atomic counter shared by four processes",
        readme: include_str!("../../../../../labs/6-atomic-counter/README.md"),
        wire: &[("RC FETCH ADD", 400, ATOMIC_HINT), ("RC ATOMIC ACKNOWLEDGE", 400, ATOMIC_HINT)],
        wcs: &[
            WcWant { side: "client1", opcode: "IBV_WC_FETCH_ADD", byte_len: Some(8), imm: None, hint: ATOMIC_HINT },
            WcWant { side: "client4", opcode: "IBV_WC_FETCH_ADD", byte_len: Some(8), imm: None, hint: ATOMIC_HINT },
        ],
        lines: &[("mem server counter=400", "four clients adding 1 a hundred times each make 400: post IBV_WR_ATOMIC_FETCH_AND_ADD with compare_add = 1 (TODO(1)) on a region registered with IBV_ACCESS_REMOTE_ATOMIC (TODO(2))")],
    },
    Lab {
        n: 7,
        dir: "7-events",
        title: "events instead of polling",
        readme: include_str!("../../../../../labs/7-events/README.md"),
        wire: &[("RC SEND ONLY", 1, "the requester's SEND is given; if it is missing, the program stopped before it")],
        wcs: &[WcWant { side: "responder", opcode: "IBV_WC_RECV", byte_len: Some(6), imm: None, hint: EVENT_HINT }],
        lines: &[("event responder cq", EVENT_HINT), ("mem responder hello", EVENT_HINT)],
    },
    Lab {
        n: 8,
        dir: "8-fix-it",
        title: "fix a broken program",
        readme: include_str!("../../../../../labs/8-fix-it/README.md"),
        wire: &[("RC SEND ONLY", 1, FIX_SEND_HINT), ("RC RDMA WRITE ONLY", 1, FIX_WRITE_HINT)],
        wcs: &[
            WcWant { side: "requester", opcode: "IBV_WC_SEND", byte_len: None, imm: None, hint: FIX_SEND_HINT },
            WcWant { side: "responder", opcode: "IBV_WC_RECV", byte_len: Some(6), imm: None, hint: FIX_SEND_HINT },
            WcWant { side: "requester", opcode: "IBV_WC_RDMA_WRITE", byte_len: None, imm: None, hint: FIX_WRITE_HINT },
        ],
        lines: &[
            ("mem responder hello", FIX_SEND_HINT),
            ("mem responder written by WRITE", FIX_WRITE_HINT),
        ],
    },
    Lab {
        n: 9,
        dir: "9-srq",
        title: "one shared receive queue for several clients",
        readme: include_str!("../../../../../labs/9-srq/README.md"),
        wire: &[("RC SEND ONLY", 2, SRQ_HINT)],
        wcs: &[
            WcWant { side: "client1", opcode: "IBV_WC_SEND", byte_len: None, imm: None, hint: SRQ_HINT },
            WcWant { side: "client2", opcode: "IBV_WC_SEND", byte_len: None, imm: None, hint: SRQ_HINT },
        ],
        lines: &[
            ("mem server from client1: hello from client1", SRQ_MEM_HINT),
            ("mem server from client2: hello from client2", SRQ_MEM_HINT),
            ("srq server: 2 receives taken, on 2 QPs", "tell the clients apart by the completion's qp_num, and find each message at server.buf + wc.wr_id * SLOT"),
        ],
    },
    Lab {
        n: 10,
        dir: "10-ud-service",
        title: "a UD service for two clients",
        readme: include_str!("../../../../../labs/10-ud-service/README.md"),
        wire: &[("UD SEND ONLY", 4, UD_HINT)],
        wcs: &[
            WcWant { side: "client1", opcode: "IBV_WC_SEND", byte_len: None, imm: None, hint: UD_HINT },
            WcWant { side: "client2", opcode: "IBV_WC_SEND", byte_len: None, imm: None, hint: UD_HINT },
        ],
        lines: &[
            ("mem server request from client1: time please, from client1", UD_REQUEST_HINT),
            ("mem server request from client2: time please, from client2", UD_REQUEST_HINT),
            ("mem client1 reply: it is time, client1", UD_HINT),
            ("mem client2 reply: it is time, client2", UD_HINT),
        ],
    },
    Lab {
        n: 11,
        dir: "11-latency",
        title: "measure your own program's latency against ib_send_lat",
        readme: include_str!("../../../../../labs/11-latency/README.md"),
        // 2 x (50 + 500) SENDs; the measurement's checks are latency.rs's.
        wire: &[("RC SEND ONLY", 1100, PING_HINT)],
        wcs: &[],
        lines: &[],
    },
];

/// The lab numbered `n`.
pub fn lab(n: u32) -> Option<&'static Lab> {
    LABS.iter().find(|l| l.n == n)
}
