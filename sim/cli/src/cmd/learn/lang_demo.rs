//! The Traditional Chinese lines of `softverbs demo` and its failure drills (`demo --break`),
//! English line (without its indentation) → 繁體中文, for `--lang zh-TW`. The
//! language module consults this table after the lessons' own. Only explanatory lines are here: wire lines,
//! completions, statuses, events and every line that carries a number of the run stay English.

/// English line → 繁體中文, one paragraph line for one line.
pub(super) const ZH_TW: &[(&str, &str)] = &[
    // The demo: setting up.
    ("softverbs demo: RDMA between two processes, packet by packet.", "softverbs demo：兩個行程之間的 RDMA，一個封包一個封包地看。"),
    (
        "Setting up, as every verbs program does before its first operation: open the device,",
        "設定，就像每個 verbs 程式在第一個操作之前做的：開啟裝置、",
    ),
    (
        "allocate a protection domain, register memory, create a completion queue and a queue pair.",
        "配置保護網域、註冊記憶體、建立完成佇列與佇列對。",
    ),
    (
        "The two sides exchanged these over a pipe (ibv_rc_pingpong uses TCP), and each QP went",
        "兩端透過管線交換這些資訊（ibv_rc_pingpong 用 TCP），每個 QP 都朝對方經過",
    ),
    (
        "From now on the target program sleeps in a blocking read(): its NIC works alone.",
        "從現在起，目標端程式在阻塞的 read() 中睡眠：它的網卡獨自工作。",
    ),
    (
        "How to read the wire lines (-> a packet the initiator sent, <- one it received):",
        "如何閱讀線路上的每一行（-> 發起端送出的封包，<- 它收到的封包）：",
    ),
    (
        "PSN     packet sequence number: each request packet takes the next one; a response",
        "PSN     封包序號：每個請求封包用下一個序號；回應封包",
    ),
    ("carries the PSN of the request it answers", "帶著它所回應之請求的 PSN"),
    (
        "to QP   the destination QP number in the base transport header (BTH)",
        "to QP   基本傳輸標頭（BTH）中的目的 QP 編號",
    ),
    (
        "AckReq  the requester asks for an acknowledgement of this packet",
        "AckReq  請求端要求對這個封包回覆確認",
    ),
    (
        "RETH    remote virtual address, rkey and length of an RDMA WRITE or READ",
        "RETH    RDMA WRITE 或 READ 的遠端虛擬位址、rkey 與長度",
    ),
    (
        "AETH    in responses: ACK or NAK, and the MSN, the number of requests the target",
        "AETH    在回應中：ACK 或 NAK，以及 MSN，也就是目標端在這個 QP 上",
    ),
    ("has completed on this QP", "已完成的請求數"),
    // The demo: the five operations.
    (
        "The target posted a receive buffer; the SEND fills it. Both sides get a completion:",
        "目標端掛好了一個接收緩衝區；SEND 把它填滿。兩端都會得到一個完成：",
    ),
    (
        "the initiator's arrives with the ACK, the target's is shown at the end.",
        "發起端的隨 ACK 到達，目標端的在最後顯示。",
    ),
    (
        "2500 bytes gathered from two places of our MR (two SGEs) into the target's memory.",
        "從我們 MR 的兩個地方（兩個 SGE）聚集 2500 個位元組，寫進目標端的記憶體。",
    ),
    (
        "A message longer than the path MTU is cut into FIRST, MIDDLE(s) and LAST packets;",
        "比 path MTU 長的訊息會被切成 FIRST、MIDDLE 與 LAST 封包；",
    ),
    (
        "only the FIRST carries the RETH, only the LAST asks for the ACK, and one ACK covers",
        "只有 FIRST 帶 RETH，只有 LAST 要求 ACK，一個 ACK 就涵蓋",
    ),
    (
        "them all. The target program is not involved and gets no completion.",
        "全部。目標端程式不參與，也不會得到完成。",
    ),
    (
        "A successful WRITE completion means the bytes are in the target's memory.",
        "WRITE 成功完成，表示位元組已經在目標端的記憶體中。",
    ),
    (
        "One request packet with a RETH and no data; the target's NIC answers from its memory",
        "一個帶 RETH、不帶資料的請求封包；目標端的網卡從它的記憶體回答，",
    ),
    (
        "with a READ RESPONSE that carries the PSN of the request (a READ longer than the MTU",
        "用帶著該請求 PSN 的 READ RESPONSE（比 MTU 長的 READ",
    ),
    (
        "gets one response packet, and one PSN, per MTU) and acknowledges it.",
        "每個 MTU 得到一個回應封包與一個 PSN），同時確認它。",
    ),
    (
        "If the 8-byte counter in the target's memory is 7, make it 42. The target's NIC does",
        "如果目標端記憶體中 8 位元組的計數器是 7，就改成 42。目標端的網卡把",
    ),
    (
        "the compare and the write as one step, and the original value comes back in an",
        "比較與寫入當成一個步驟完成，原本的值放在",
    ),
    ("ATOMIC ACKNOWLEDGE, into our buffer.", "ATOMIC ACKNOWLEDGE 中送回我們的緩衝區。"),
    (
        "Add 8 to the target's counter; the value before the add comes back.",
        "把目標端的計數器加 8；加之前的值會送回來。",
    ),
    (
        "== What the target saw, once the initiator woke it up (its program did nothing until now):",
        "== 發起端叫醒目標端後，它看到了什麼（它的程式到現在為止什麼都沒做）：",
    ),
    (
        "Its only completion is the SEND's: wr_id 100 names the receive it posted, src_qp and slid",
        "它唯一的完成是 SEND 的：wr_id 100 指出它掛的接收請求，src_qp 與 slid",
    ),
    (
        "the sending QP and port. The WRITE and the atomics changed its memory without one,",
        "指出傳送的 QP 與埠。WRITE 與原子操作改變了它的記憶體卻沒有產生完成，",
    ),
    (
        "and without its program, as its threads' CPU times above show.",
        "也不需要它的程式，如上面各執行緒的 CPU 時間所示。",
    ),
    (
        "All five operations completed with the right data.",
        "五個操作都以正確的資料完成。",
    ),
    (
        "== Measurements (each operation once, wall-clock time from post to completion):",
        "== 量測（每個操作一次，從送出到完成的實際時間）：",
    ),
    // The failure drills: headings.
    (
        "On the wire (time since ibv_post_send; -> sent by the initiator, <- received):",
        "線路上（自 ibv_post_send 起的時間；-> 發起端送出，<- 收到）：",
    ),
    ("The target, once told the run is over:", "目標端，在被告知執行結束之後："),
    ("Why, and how to fix it in a real program:", "為什麼，以及在真實程式中如何修正："),
    (
        "resent behind it: go-back-N resends every packet after the lost one",
        "跟在後面重送：回退 N 重傳會重送遺失封包之後的每一個封包",
    ),
    ("initiator async events: none", "發起端的非同步事件：無"),
    // The failure drills: what each does.
    (
        "The initiator posts an RDMA WRITE of 64 bytes with an rkey the target never handed out,",
        "發起端送出一個 64 位元組的 RDMA WRITE，用的是目標端從未給出的 rkey，",
    ),
    ("then a SEND behind it.", "後面再跟一個 SEND。"),
    (
        "The initiator posts an RDMA WRITE of 64 bytes that starts 16 bytes before the end of the",
        "發起端送出一個 64 位元組的 RDMA WRITE，起點在目標端記憶體區域結尾之前 16 個位元組，",
    ),
    ("target's memory region, then a SEND behind it.", "後面再跟一個 SEND。"),
    (
        "The target posted a receive of 16 bytes; the initiator SENDs 64, then a SEND behind it.",
        "目標端掛了一個 16 位元組的接收請求；發起端 SEND 64 個位元組，後面再跟一個 SEND。",
    ),
    (
        "The target posted no receive; the initiator SENDs with rnr_retry 0, then a SEND behind it.",
        "目標端沒有掛接收請求；發起端以 rnr_retry 0 送出 SEND，後面再跟一個 SEND。",
    ),
    (
        "The target posted no receive yet; the initiator SENDs with rnr_retry 7 (retry forever).",
        "目標端還沒有掛接收請求；發起端以 rnr_retry 7（永遠重試）送出 SEND。",
    ),
    (
        "After the second RNR NAK the target posts its receive, and the next retry lands.",
        "第二個 RNR NAK 之後目標端掛上接收請求，下一次重試就成功送達。",
    ),
    (
        "Once connected, the target program destroys its QP, as the kernel does for a program that",
        "連線建立後，目標端程式銷毀它的 QP，就像核心替一個",
    ),
    (
        "dies: its NIC drops every packet for that QP without an answer. The initiator then SENDs,",
        "死掉的程式所做的：它的網卡丟棄送往該 QP 的每個封包，不做任何回應。接著發起端送出 SEND，",
    ),
    (
        "The target's CQ holds 1 completion and the target does not poll it; it posted three",
        "目標端的 CQ 只能放 1 個完成，而且目標端不去輪詢它；它掛了三個",
    ),
    (
        "receives, and the initiator SENDs three messages.",
        "接收請求，發起端 SEND 三則訊息。",
    ),
    (
        "A QP in INIT is moved to RTR with an address vector that names the peer by LID only",
        "一個在 INIT 的 QP 被移到 RTR，用的位址向量只以 LID 指出對方",
    ),
    (
        "(is_global 0, dlid 0), as InfiniBand programs do. The port is RoCE (Ethernet).",
        "（is_global 0、dlid 0），就像 InfiniBand 程式的做法。這個埠是 RoCE（乙太網路）。",
    ),
    // The failure drills: why, and the fix.
    (
        "The target's NIC checks every RDMA request's rkey against its memory regions; an unknown key is",
        "目標端的網卡會拿每個 RDMA 請求的 rkey 比對它的記憶體區域；未知的金鑰就是",
    ),
    (
        "a remote access error, fatal to the connection on both sides. Send the peer the rkey of the MR",
        "遠端存取錯誤，對兩端的連線都是致命的。要把 MR 的 rkey（mr->rkey，不是 lkey）",
    ),
    (
        "(mr->rkey, not lkey) and never use it after ibv_dereg_mr.",
        "交給對方，而且在 ibv_dereg_mr 之後就不要再用它。",
    ),
    (
        "The rkey was right but [remote_addr, remote_addr + length) left the region: the same remote",
        "rkey 是對的，但 [remote_addr, remote_addr + length) 超出了區域：同樣是遠端",
    ),
    (
        "access error. Check offsets against the length the peer advertised before posting.",
        "存取錯誤。送出之前，先拿位移與對方公布的長度比對。",
    ),
    (
        "A SEND must fit the receive it consumes: the target's receive completed with",
        "SEND 必須放得進它所消耗的接收請求：目標端的接收請求以",
    ),
    (
        "IBV_WC_LOC_LEN_ERR and the initiator got IBV_WC_REM_INV_REQ_ERR. Post receives at least as",
        "IBV_WC_LOC_LEN_ERR 完成，發起端則得到 IBV_WC_REM_INV_REQ_ERR。掛的接收請求至少要和",
    ),
    (
        "large as the largest message (agree on a maximum), or use RDMA WRITE into a sized buffer.",
        "最大的訊息一樣大（雙方約定上限），或改用 RDMA WRITE 寫進大小已知的緩衝區。",
    ),
    (
        "A SEND needs a posted receive; without one the target answers with an RNR NAK, and with",
        "SEND 需要一個已掛好的接收請求；沒有的話目標端回覆 RNR NAK，而在",
    ),
    (
        "rnr_retry 0 the first one is fatal (IBV_WC_RNR_RETRY_EXC_ERR). Post receives before the peer",
        "rnr_retry 0 時第一個就是致命的（IBV_WC_RNR_RETRY_EXC_ERR）。要在對方可能送出之前",
    ),
    (
        "can send (before RTR), keep the receive queue filled, and set rnr_retry (7 = forever).",
        "（RTR 之前）掛好接收請求，讓接收佇列一直有掛好的接收請求，並設定 rnr_retry（7 = 永遠）。",
    ),
    (
        "Receiver not ready is flow control, not an error: the requester waits min_rnr_timer and",
        "接收端未就緒是流量控制，不是錯誤：請求端等待 min_rnr_timer 後",
    ),
    (
        "tries again, up to rnr_retry times (7 = forever). Each wait costs latency, so post receives",
        "再試一次，最多 rnr_retry 次（7 = 永遠）。每次等待都增加延遲，所以要在流量到來之前",
    ),
    (
        "ahead of the traffic; a finite rnr_retry turns a stuck peer into IBV_WC_RNR_RETRY_EXC_ERR.",
        "掛好接收請求；有限的 rnr_retry 會把卡住的對方變成 IBV_WC_RNR_RETRY_EXC_ERR。",
    ),
    (
        "A dead peer answers nothing: the requester waits the local ACK timeout, resends, and after",
        "死掉的對方什麼都不回：請求端等待本地 ACK 逾時、重送，並在",
    ),
    (
        "retry_cnt retries completes with IBV_WC_RETRY_EXC_ERR. Choose timeout and retry_cnt for how",
        "retry_cnt 次重試之後以 IBV_WC_RETRY_EXC_ERR 完成。依你需要多快發現問題來選擇",
    ),
    (
        "fast you must notice, and tear the connection down (or reconnect) on that status.",
        "timeout 與 retry_cnt，並在看到這個狀態時拆掉連線（或重新連線）。",
    ),
    (
        "RoCE ports have no LIDs: every address vector must carry a GRH (is_global = 1, dgid,",
        "RoCE 的埠沒有 LID：每個位址向量都必須帶 GRH（is_global = 1、dgid、",
    ),
    (
        "sgid_index). Fill ah_attr.grh from the peer's GID (ibv_query_gid), as ibv_rc_pingpong -g does.",
        "sgid_index）。用對方的 GID（ibv_query_gid）填入 ah_attr.grh，就像 ibv_rc_pingpong -g 的做法。",
    ),
    (
        "A CQ holds at most cqe completions; one more overruns it (IBV_EVENT_CQ_ERR) and completions",
        "一個 CQ 最多放 cqe 個完成；多一個就會溢位（IBV_EVENT_CQ_ERR），完成就會",
    ),
    (
        "are lost. Size each CQ for every WR that can complete into it (send + receive queue depths)",
        "遺失。每個 CQ 的大小要容得下所有可能完成到它的 WR（傳送加接收佇列的深度），",
    ),
    ("and poll it often enough.", "並且要夠常輪詢它。"),
];
