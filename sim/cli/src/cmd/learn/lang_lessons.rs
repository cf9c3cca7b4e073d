//! The Traditional Chinese of the lessons' own lines (`softverbs learn CONCEPT --lang zh-TW`):
//! the lines without the run's numbers ([`EXACT`], keyed like `lang.rs`'s table), the lines
//! with them ([`LIVE`], templates like `lang_live.rs`'s), the tables' rows ([`row`]: a row's
//! label and verdict change, its numbers and the columns' alignment stay) and `learn vs-tcp`'s
//! takeaway, whose phrases are made from the table's verdicts ([`takeaway`]).
//! `sim/cli/tests/zh_tw.rs` runs every lesson (vs-tcp on stand-in measurements) in zh-TW and
//! fails on an English sentence; `learn_lang.rs` holds [`EXACT`]'s keys to what the lessons
//! print.

/// English line (without its indentation) → 繁體中文, for lines that carry no value of the run.
pub(super) const EXACT: &[(&str, &str)] = &[
    // Every lesson's set-up line.
    (
        "RDMA here travels as packets through the emulated NICs (direct reach off, so that the packets and copies can be counted).",
        "這裡的 RDMA 以封包經過模擬網卡傳送（direct reach 關閉，好讓封包與複製都能被計數）。",
    ),
    // bypass.
    (
        "The emulated NIC is a thread in each process. While a program polls, that thread stands",
        "模擬網卡是每個行程中的一個執行緒。程式輪詢時，這個執行緒在旁待命，",
    ),
    (
        "does in silicon, where a program's post and poll are memory writes and reads too.",
        "在晶片中做的工作；在那裡，程式的送出與輪詢同樣只是記憶體的寫入與讀取。",
    ),
    (
        "When a program is descheduled for over a millisecond, its NIC thread takes over and",
        "當程式被排程器移出 CPU 超過一毫秒，它的網卡執行緒便接手，",
    ),
    (
        "then sleeps on its doorbell; the peer's next SEND wakes it with a system call, counted",
        "然後睡在它的門鈴上；對端的下一個 SEND 以一次系統呼叫喚醒它，這次呼叫",
    ),
    (
        "above on the program threads. A real NIC never sleeps: a doorbell is a memory write.",
        "算在上面的程式執行緒裡。真實網卡從不睡眠：門鈴只是一次記憶體寫入。",
    ),
    (
        "softverbs counts its own system calls (futex and parker waits and wakes, scheduler calls)",
        "softverbs 在呼叫處計數自己的系統呼叫（futex 與 parker 的等待和喚醒、排程器呼叫）；",
    ),
    (
        "at the call sites; a TCP call is counted by the lesson at the call and by the kernel.",
        "TCP 的呼叫則由課程在呼叫時計數，也由核心計數。",
    ),
    // zero-copy.
    (
        "per message (read from the sender's MR, into a ring slot of the shared-memory wire, out",
        "（從傳送端的 MR 讀出、寫進共享記憶體線路的環狀緩衝區槽位，再寫出",
    ),
    (
        "by DMA and writes it once by DMA, in silicon, with no CPU and no ring copy. And while a",
        "再以 DMA 寫入一次，全在晶片中完成，不用 CPU，也沒有環狀緩衝區的複製。此外，當",
    ),
    (
        "program calls in, softverbs runs the NIC's work inline, in the program's own verbs calls",
        "程式呼叫進來時，softverbs 就在程式自己的 verbs 呼叫中直接執行網卡的工作",
    ),
    (
        "(ibv_post_send builds the packets, ibv_poll_cq takes them in): part of the programs' CPU",
        "（ibv_post_send 建立封包，ibv_poll_cq 收進封包）：上面程式的 CPU",
    ),
    (
        "above is that work, and none of it is a copy the program asked for.",
        "有一部分就是這些工作，其中沒有任何一次是程式要求的複製。",
    ),
    ("softverbs learn vs-tcp       (copies and CPU over a range of sizes)", "softverbs learn vs-tcp       （一系列大小下的複製與 CPU）"),
    // one-sided.
    (
        "the lesson's requests for its measurements, before and after each phase); the emulated",
        "課程在每個階段前後索取量測值的要求）；它行程中的模擬",
    ),
    (
        "emulated NIC thread also competes with the compute loop, which a real NIC never does.",
        "模擬網卡執行緒還會與計算迴圈搶 CPU，真實網卡從不會這樣。",
    ),
    (
        "The initiator's program CPU includes the NIC work softverbs runs inline in its verbs",
        "發起端程式的 CPU 包含 softverbs 在它的 verbs 呼叫中直接執行的網卡工作",
    ),
    ("calls (building and taking in packets while it posts and polls).", "（在送出與輪詢時建立並收進封包）。"),
    ("softverbs demo               (a WRITE and a READ, packet by packet)", "softverbs demo               （一個 WRITE 與一個 READ，逐個封包）"),
    // messages.
    ("softverbs learn sge          (one message from three buffers into two)", "softverbs learn sge          （一則訊息從三個緩衝區到兩個）"),
    ("softverbs demo               (the packets of a SEND, one by one)", "softverbs demo               （SEND 的封包，一個一個看）"),
    // sge.
    (
        "The QP refused it at post time: nothing went on the wire and no completion is due.",
        "QP 在送出時就拒絕了它：線路上什麼都沒有，也不會有完成。",
    ),
    (
        "TCP: one writev() of the same three buffers; the target reads into one buffer.",
        "TCP：對同樣三個緩衝區做一次 writev()；目標端讀進一個緩衝區。",
    ),
    (
        "copied (the three pieces read, the packets with their headers built in shared memory,",
        "（讀出三段資料、在共享記憶體中建立帶標頭的封包、",
    ),
    (
        "the two buffers written: the initiator's NIC code and the target's NIC or program thread).",
        "寫入兩個緩衝區：由發起端的網卡程式碼，以及目標端的網卡或程式執行緒完成）。",
    ),
    (
        "A real NIC does both by DMA: its engine reads and writes the memory, and no CPU copies a",
        "真實網卡以 DMA 完成這兩件事：由它的引擎讀寫記憶體，沒有任何 CPU 複製",
    ),
    (
        "byte. TCP's writev also gathers, but the kernel copies each byte in, and read() out again.",
        "任何一個位元組。TCP 的 writev 也會聚集，但核心把每個位元組複製進去，read() 再複製出來。",
    ),
    (
        "Takeaway: SGEs let one work request read and write scattered memory with no copy by the program or the kernel (here the emulated NIC copies with the CPU; a real NIC by DMA); their number per request is bounded by max_sge.",
        "重點：SGE 讓一個工作請求讀寫分散的記憶體，程式與核心都不必複製（這裡由模擬網卡用 CPU 複製；真實網卡用 DMA）；每個請求的 SGE 數目以 max_sge 為上限。",
    ),
    ("softverbs devinfo -v        (max_sge, among the device's limits)", "softverbs devinfo -v        （max_sge，在裝置的各項限制之中）"),
    ("softverbs learn zero-copy   (who copies the bytes, counted)", "softverbs learn zero-copy   （誰複製位元組，逐一計數）"),
    // qp-states.
    ("The same step with every required attribute:", "帶齊每個必要屬性的同一步："),
    ("softverbs demo --in-process   (the same three steps, then the traffic)", "softverbs demo --in-process   （同樣的三步，接著是資料傳輸）"),
    ("man ibv_modify_qp             (the table of required attributes)", "man ibv_modify_qp             （必要屬性的表格）"),
    // mr.
    ("The target registered two buffers (ibv_reg_mr):", "目標端註冊了兩塊緩衝區（ibv_reg_mr）："),
    ("the target's buffer now holds \"written by RDMA\"", "目標端的緩衝區現在存著 \"written by RDMA\""),
    (
        "the read-only buffer is untouched; initiator QP ERR, target QP ERR",
        "唯讀緩衝區沒被動到；發起端 QP ERR，目標端 QP ERR",
    ),
    ("softverbs learn qp-states   (how a QP gets to ERR and back)", "softverbs learn qp-states   （QP 如何進入 ERR 再回來）"),
    ("man ibv_reg_mr              (the access flags)", "man ibv_reg_mr              （存取旗標）"),
    // vs-tcp.
    (
        "Laptop figures say nothing about RDMA hardware's. The published column is not measured here:",
        "筆電上的數字無法說明 RDMA 硬體的表現。「公開數據」一欄不是在這裡量測的：",
    ),
    (
        "docs/learn/vs-tcp.md cites it), and it is what the RDMA column would be compared with on hardware.",
        "docs/learn/vs-tcp.md 註明了出處），在硬體上，RDMA 欄應該拿來和它比較。",
    ),
    (
        "and puts the packets on a wire. RDMA WRITEs travel here as packets (direct reach off),",
        "再把封包送上線路。這裡的 RDMA WRITE 以封包傳送（direct reach 關閉），",
    ),
    (
        "so the packets and copies can be counted; softverbs perf write_bw measures the direct",
        "好讓封包與複製都能被計數；softverbs perf write_bw 量測的則是直接",
    ),
    (
        "copy into the peer's memory instead. TCP over loopback never leaves the kernel either.",
        "複製進對端記憶體的情形。走 loopback 的 TCP 也從不離開核心。",
    ),
    ("softverbs perf lat            (latency, measured properly)", "softverbs perf lat            （延遲，以正確的方式量測）"),
];

/// English template → 繁體中文 template, for the lessons' lines with the run's values (as
/// `lang_live.rs`'s: `{}` in the English, `{0}`, `{1}`, ... in the Chinese).
pub(super) const LIVE: &[(&str, &str)] = &[
    // Said instead of the packets line when `SOFTVERBS_REACH` is on (the lessons' own runs turn
    // it off; `learn_lang.rs`'s exact keys must each be printed by them, so it lives here).
    (
        "RDMA WRITEs and READs here go by direct reach (SOFTVERBS_REACH on): copies into the peer's memory, no packets to count.",
        "這裡的 RDMA WRITE 與 READ 走 direct reach（SOFTVERBS_REACH 開啟）：直接複製進對端的記憶體，沒有封包可計數。",
    ),
    // The tables' note on tick-sampled rows.
    (
        "~ a tick sample, not an exact time: the kernel splits a thread's exact CPU time between user and kernel mode by which mode its scheduler ticks (one each 1 to 10 ms, CONFIG_HZ) found it in, so a share of a few ticks is noise; the exact books of the kernel's work are the system-call and byte rows.",
        "~ tick 取樣，不是精確時間：核心依排程器的 tick（每 1 到 10 ms 一次，CONFIG_HZ）撞見執行緒處於哪個模式，把它精確的 CPU 時間分給使用者模式與核心模式，所以幾個 tick 的份量只是雜訊；核心工作的精確帳目是系統呼叫與位元組那幾列。",
    ),
    // bypass.
    (
        "First round trip of each (setting up the path): RDMA {} read/write calls the kernel counted, TCP {}",
        "各自的第一次來回（建立路徑）：核心計到的 read/write 呼叫，RDMA {0} 次，TCP {1} 次",
    ),
    (
        "RDMA: {} round trips of {}-byte SENDs in {} ms ({} messages)",
        "RDMA：{0} 次 {1} 位元組 SEND 的來回，耗時 {2} ms（{3} 則訊息）",
    ),
    (
        "TCP:  {} round trips of {} bytes in {} ms: {} write() and {} read() calls",
        "TCP： {0} 次 {1} 位元組的來回，耗時 {2} ms：{3} 次 write() 與 {4} 次 read() 呼叫",
    ),
    (
        "by, looking once a millisecond whether it is needed: its {} system calls in this run",
        "每毫秒看一次是否需要它：本次執行中它的 {0} 次系統呼叫",
    ),
    (
        "({} parks, {} futex waits, {} wakes, {} scheduler calls) stand for work a real NIC",
        "（{0} 次 park、{1} 次 futex 等待、{2} 次喚醒、{3} 次排程器呼叫）代表真實網卡",
    ),
    (
        "softverbs perf syscalls -n 20000 --base 2000   (the same count with perf or strace)",
        "softverbs perf syscalls -n 20000 --base 2000   （以 perf 或 strace 做同樣的計數）",
    ),
    // zero-copy.
    (
        "RDMA: {} RDMA WRITEs of {} bytes into the target's memory in {} ms",
        "RDMA：{0} 個 {1} 位元組的 RDMA WRITE 寫入目標端記憶體，耗時 {2} ms",
    ),
    (
        "TCP:  {} write() calls of {} bytes, {} read() calls by the target, in {} ms",
        "TCP： {0} 次 {1} 位元組的 write() 呼叫，目標端 {2} 次 read() 呼叫，耗時 {3} ms",
    ),
    (
        "The emulated NIC is a thread of each process, and it copies with the CPU: {} bytes",
        "模擬網卡是每個行程中的一個執行緒，它用 CPU 複製：每則訊息 {0} 位元組",
    ),
    (
        "into the target's MR), costing its threads {} ms of CPU. A real NIC reads the message once",
        "到目標端的 MR），花了它的執行緒 {0} ms 的 CPU。真實網卡以 DMA 讀取訊息一次，",
    ),
    (
        "The TCP bytes were copied by the kernel for the programs: {} ms of their CPU.",
        "TCP 的位元組由核心替程式複製：花了它們 {0} ms 的 CPU。",
    ),
    // one-sided: the four phases, names padded to line up as the English do.
    (
        "RDMA WRITE into the target {} MiB in {} ms; target loop {} M/s; target program {} ms CPU, its NIC {} ms; initiator {} ms, its NIC {} ms",
        "RDMA WRITE 寫入目標端 {0} MiB，耗時 {1} ms；目標端迴圈 {2} M/s；目標端程式 CPU {3} ms，其網卡 {4} ms；發起端 {5} ms，其網卡 {6} ms",
    ),
    (
        "RDMA READ of the target    {} MiB in {} ms; target loop {} M/s; target program {} ms CPU, its NIC {} ms; initiator {} ms, its NIC {} ms",
        "RDMA READ 讀取目標端  {0} MiB，耗時 {1} ms；目標端迴圈 {2} M/s；目標端程式 CPU {3} ms，其網卡 {4} ms；發起端 {5} ms，其網卡 {6} ms",
    ),
    (
        "TCP to the target          {} MiB in {} ms; target loop {} M/s; target program {} ms CPU, its NIC {} ms; initiator {} ms, its NIC {} ms",
        "TCP 傳到目標端           {0} MiB，耗時 {1} ms；目標端迴圈 {2} M/s；目標端程式 CPU {3} ms，其網卡 {4} ms；發起端 {5} ms，其網卡 {6} ms",
    ),
    (
        "TCP from the target        {} MiB in {} ms; target loop {} M/s; target program {} ms CPU, its NIC {} ms; initiator {} ms, its NIC {} ms",
        "TCP 從目標端傳來         {0} MiB，耗時 {1} ms；目標端迴圈 {2} M/s；目標端程式 CPU {3} ms，其網卡 {4} ms；發起端 {5} ms，其網卡 {6} ms",
    ),
    (
        "The target program used {} ms of CPU while {} MiB went each way by RDMA (answering",
        "以 RDMA 每個方向搬移 {1} MiB 時，目標端程式用了 {0} ms 的 CPU（用於回應",
    ),
    (
        "NIC thread in its process used {} ms, work a real NIC does in silicon; the TCP receiver",
        "網卡執行緒用了 {0} ms，那是真實網卡在晶片中做的工作；TCP 的接收端",
    ),
    (
        "(the target program itself) used {} ms for the same bytes. On a machine with few cores the",
        "（也就是目標端程式本身）為同樣的位元組用了 {0} ms。在核心數少的機器上，",
    ),
    // messages.
    (
        "RDMA: the target posted three receives of {} bytes; we post three SENDs of {}, {} and {} bytes.",
        "RDMA：目標端掛了三個 {0} 位元組的接收請求；我們送出三個 SEND，分別為 {1}、{2} 與 {3} 位元組。",
    ),
    (
        "target CQ: receive completion {}: byte_len {}; its buffer holds that message's bytes, as sent",
        "目標端 CQ：接收完成 {0}：byte_len {1}；它的緩衝區存著該訊息的位元組，與送出的相同",
    ),
    (
        "TCP: we call write() three times, with {}, {} and {} bytes; then the target reads with a {}-byte buffer.",
        "TCP：我們呼叫 write() 三次，分別 {0}、{1} 與 {2} 位元組；接著目標端以 {3} 位元組的緩衝區讀取。",
    ),
    ("target read() {}: returned {} bytes", "目標端 read() {0}：回傳 {1} 位元組"),
    // sge.
    (
        "RDMA: one SEND with {} SGEs ({} + {} + {} bytes); the target posted one receive with {} SGEs ({} + {} bytes).",
        "RDMA：一個帶 {0} 個 SGE 的 SEND（{1} + {2} + {3} 位元組）；目標端掛了一個帶 {4} 個 SGE 的接收請求（{5} + {6} 位元組）。",
    ),
    (
        "target CQ: one receive completion, byte_len {}; where each byte landed:",
        "目標端 CQ：一個接收完成，byte_len {0}；每個位元組落在哪裡：",
    ),
    (
        "message bytes {} from send SGE {} (our MR +{}) -> receive SGE {} (target MR +{}), verified",
        "訊息位元組 {0} 來自傳送 SGE {1}（我方 MR +{2}）-> 接收 SGE {3}（目標端 MR +{4}），已驗證",
    ),
    (
        "RDMA: ibv_post_send with {} SGEs, one more than max_sge {} (ibv_query_device):",
        "RDMA：ibv_post_send 帶 {0} 個 SGE，比 max_sge {1} 多一個（ibv_query_device）：",
    ),
    (
        "The gather and the scatter were done by the emulated NIC, with the CPU: {} bytes",
        "聚集與分散由模擬網卡用 CPU 完成：複製了 {0} 位元組",
    ),
    // qp-states.
    (
        "QP {} on {} was created in IBV_QPS_RESET; its peer is QP {} on {} (GID {}).",
        "{1} 上的 QP {0} 建立時處於 IBV_QPS_RESET；它的對端是 {3} 上的 QP {2}（GID {4}）。",
    ),
    (
        "1. RESET -> INIT: the port, the P_Key index and what remote peers may do to this QP's memory.",
        "1. RESET -> INIT：埠、P_Key 索引，以及遠端對端可以對這個 QP 的記憶體做什麼。",
    ),
    (
        "2. INIT -> RTR without IBV_QP_DEST_QPN: the responder would not know whom it answers.",
        "2. 少了 IBV_QP_DEST_QPN 的 INIT -> RTR：回應端會不知道它要回答誰。",
    ),
    (
        "3. RTR -> RTS: the first PSN it sends, its ACK timeout and retry counts.",
        "3. RTR -> RTS：它送出的第一個 PSN、ACK 逾時與重試次數。",
    ),
    (
        "4. {} receives posted, then the QP moved to ERR: each comes back flushed.",
        "4. 掛了 {0} 個接收請求，然後 QP 移到 ERR：每一個都以清空的狀態回來。",
    ),
    ("completion: wr_id {}, status {} ({}, {})", "完成：wr_id {0}，status {1}（{2}，\"{3}\"）"),
    (
        "5. ERR -> RESET, and forward again: the same QP number, a fresh QP.",
        "5. ERR -> RESET，再往前走：同樣的 QP 編號，一個全新的 QP。",
    ),
    ("6. A SEND over the revived QP:", "6. 經由復活的 QP 送一個 SEND："),
    (
        "sender: wr_id {} status {}; receiver: wr_id {} status {} byte_len {}: {}",
        "傳送端：wr_id {0} status {1}；接收端：wr_id {2} status {3} byte_len {4}：{5}",
    ),
    ("-> 0; ibv_query_qp says {}", "-> 0；ibv_query_qp 回報 {0}"),
    // mr.
    (
        "writable : addr {}, {} bytes, lkey {}, rkey {}, access {}",
        "可寫入   ：addr {0}，{1} 位元組，lkey {2}，rkey {3}，access {4}",
    ),
    (
        "read-only: addr {}, {} bytes, lkey {}, rkey {}, access {}",
        "唯讀     ：addr {0}，{1} 位元組，lkey {2}，rkey {3}，access {4}",
    ),
    (
        "1. An RDMA WRITE to the writable buffer, with its rkey:",
        "1. 用可寫入緩衝區的 rkey，對它做一次 RDMA WRITE：",
    ),
    (
        "2. The same WRITE to the read-only buffer, with its own (valid) rkey:",
        "2. 用唯讀緩衝區自己的（有效的）rkey，對它做同樣的 WRITE：",
    ),
    (
        "target's async event (ibv_get_async_event): {} on QP {}, the target's",
        "目標端的非同步事件（ibv_get_async_event）：{0}，發生在目標端的 QP {1} 上",
    ),
    (
        "3. Both QPs reset and reconnected; the writable buffer deregistered (ibv_dereg_mr), then its old rkey used:",
        "3. 兩個 QP 重設並重新連線；可寫入的緩衝區取消註冊（ibv_dereg_mr），然後使用它的舊 rkey：",
    ),
    (
        "initiator CQ: wr_id={} (opcode, byte_len: undefined unless IBV_WC_SUCCESS)",
        "發起端 CQ：wr_id={0}（opcode、byte_len：除非 IBV_WC_SUCCESS，否則沒有定義）",
    ),
    // vs-tcp: the method.
    (
        "How each side waits: RDMA keeps {} threads busy (both programs busy-poll their CQs, as perftest does, and each process has an emulated NIC thread); TCP's 2 programs block in read() until the kernel wakes them.",
        "兩邊如何等待：RDMA 讓 {0} 個執行緒保持忙碌（兩個程式都像 perftest 一樣忙著輪詢自己的 CQ，每個行程還有一個模擬網卡執行緒）；TCP 的 2 個程式則阻塞在 read() 中，直到核心喚醒它們。",
    ),
    (
        "This machine: {} cores, load average {} before the run: about {} free for {} busy RDMA threads.",
        "這台機器：{0} 個核心，執行前的平均負載 {1}：約有 {2} 個空閒核心給 {3} 個忙碌的 RDMA 執行緒。",
    ),
    (
        "Warning: fewer free cores than the {} busy RDMA threads, so the RDMA numbers measure the scheduler as much as RDMA. Adapted: the programs yield their core (sched_yield) after each empty poll, so the emulated NICs they wait for can run.",
        "警告：空閒核心比 {0} 個忙碌的 RDMA 執行緒少，所以 RDMA 的數字量到的排程器影響不亞於 RDMA 本身。已調整：程式每次輪詢落空後就讓出核心（sched_yield），好讓它們等待的模擬網卡能執行。",
    ),
    (
        "Each size is measured {} times, RDMA and TCP taking turns to go first; each cell is the median (min-max). Where the ranges overlap, no side is called better.",
        "每個大小量測 {0} 次，RDMA 與 TCP 輪流先跑；每格是中位數（最小-最大）。範圍重疊之處，不判定哪一邊較佳。",
    ),
    (
        "{}: {} samples of {} round trips and {} MiB one way, each by RDMA and by TCP",
        "{0}：{1} 個樣本，每個樣本 {2} 次來回與單向 {3} MiB，RDMA 與 TCP 各一次",
    ),
    (
        "it is what NVIDIA publishes for a ConnectX-6 adapter (200 Gb/s per port, sub-600 ns latency;",
        "它是 NVIDIA 為 ConnectX-6 網卡公布的數字（每埠 200 Gb/s、延遲低於 600 ns；",
    ),
];

/// Table row labels (trimmed) → 繁體中文. vs-tcp's rows start with a size (`256 B`), which
/// stays.
const LABELS: &[(&str, &str)] = &[
    // bypass.
    ("system calls per message, program threads", "每則訊息的系統呼叫，程式執行緒"),
    ("waking a sleeping emulated NIC thread", "喚醒睡眠中的模擬網卡執行緒"),
    ("the data path's own (the rest)", "資料路徑本身的（其餘）"),
    ("read/write calls the kernel counted", "核心計到的 read/write 呼叫"),
    ("voluntary context switches", "自願上下文切換"),
    ("involuntary context switches", "非自願上下文切換"),
    ("system calls per message, emulated NIC threads", "每則訊息的系統呼叫，模擬網卡執行緒"),
    ("half round trip (us)", "半個來回（us）"),
    ("program CPU per message (us)", "每則訊息的程式 CPU（us）"),
    ("of which in the kernel (us, a tick sample)", "其中在核心中的（us，tick 取樣）"),
    // zero-copy.
    ("bytes per message", "每則訊息的位元組"),
    ("copied by the programs (MR read/write)", "程式複製的（MR 讀寫）"),
    ("read from memory by the NIC (DMA read)", "網卡從記憶體讀出的（DMA 讀）"),
    ("copied by the emulation into packets/ring", "模擬複製進封包／環狀緩衝區的"),
    ("written to memory by the NIC (DMA write)", "網卡寫入記憶體的（DMA 寫）"),
    ("copied by the kernel for the programs (rchar+wchar)", "核心替程式複製的（rchar+wchar）"),
    ("read/written by the kernel for the NIC threads", "核心替網卡執行緒讀寫的"),
    ("packets the NIC sent again (go-back-N)", "網卡重送的封包（go-back-N）"),
    ("CPU of the program threads (ms)", "程式執行緒的 CPU（ms）"),
    ("of which in the kernel (ms, a tick sample)", "其中在核心中的（ms，tick 取樣）"),
    ("CPU of the emulated NIC threads (ms)", "模擬網卡執行緒的 CPU（ms）"),
    // one-sided.
    ("time for both ways (ms)", "兩個方向的時間（ms）"),
    ("target compute loop (M iterations/s)", "目標端計算迴圈（百萬次迭代/s）"),
    ("target compute loop's CPU (ms)", "目標端計算迴圈的 CPU（ms）"),
    ("target program CPU, apart from its loop (ms)", "目標端程式 CPU，迴圈以外（ms）"),
    ("target emulated NIC thread CPU (ms)", "目標端模擬網卡執行緒 CPU（ms）"),
    ("initiator program CPU (ms)", "發起端程式 CPU（ms）"),
    ("initiator emulated NIC thread CPU (ms)", "發起端模擬網卡執行緒 CPU（ms）"),
    // messages.
    ("messages sent (SENDs / write() calls)", "送出的訊息（SEND／write() 呼叫）"),
    ("what the receiver got (completions / reads)", "接收端得到的（完成／read）"),
    ("their sizes (bytes)", "它們的大小（位元組）"),
    ("bytes received", "收到的位元組"),
    // sge.
    ("calls to send the message (post_send / writev)", "送出訊息的呼叫（post_send／writev）"),
    ("gather entries", "聚集項目"),
    ("receive buffers filled", "填入的接收緩衝區"),
    ("bytes that landed where expected", "落在預期位置的位元組"),
    ("bytes the programs copied", "程式複製的位元組"),
    ("bytes the kernel copied (TCP: in and out)", "核心複製的位元組（TCP：進與出）"),
    ("bytes the emulated NIC copied with the CPU", "模擬網卡用 CPU 複製的位元組"),
    // vs-tcp (after the size).
    ("latency, half round trip (us)", "延遲，半個來回（us）"),
    ("bandwidth (MB/s)", "頻寬（MB/s）"),
    ("CPU per message, all threads (us)", "每則訊息的 CPU，所有執行緒（us）"),
    ("CPU per GB, all threads (ms)", "每 GB 的 CPU，所有執行緒（ms）"),
    ("program system calls per message", "每則訊息的程式系統呼叫"),
    ("bytes copied per message", "每則訊息複製的位元組"),
];

/// The verdict column's words and the heading's (`table.rs`'s `Verdict::show`), in the
/// order they are tried.
const WORDS: &[(&str, &str)] = &[
    ("which is better", "何者較佳"),
    ("published, ConnectX-6", "公開數據，ConnectX-6"),
    ("better: RDMA (other ~0)", "較佳：RDMA（另一方約為 0）"),
    ("better: TCP (other ~0)", "較佳：TCP（另一方約為 0）"),
    ("better: RDMA", "較佳：RDMA"),
    ("better: TCP", "較佳：TCP"),
    ("even (within 10%)", "相當（差距在 10% 內）"),
    ("unclear: ranges overlap", "不明：範圍重疊"),
];

/// Columns a string takes on a terminal: CJK and full-width characters two, others one.
fn width(s: &str) -> usize {
    s.chars()
        .map(|c| match c as u32 {
            0x1100..=0x115F | 0x2E80..=0xA4CF | 0xAC00..=0xD7A3 | 0xF900..=0xFAFF => 2,
            0xFE30..=0xFE4F | 0xFF00..=0xFF60 | 0xFFE0..=0xFFE6 => 2,
            _ => 1,
        })
        .sum()
}

/// `line` with the cell that starts with `en` at byte `at` (up to two spaces or the end) made
/// to start with `zh`, keeping what follows in its column: spaces are added after a narrower
/// cell, or taken from the run of spaces after a wider one (down to two).
fn swap(line: &str, at: usize, en: &str, zh: &str) -> String {
    let (head, rest) = line.split_at(at);
    let cell_end = rest.find("  ").unwrap_or(rest.len()).max(en.len());
    let (cell, after) = rest.split_at(cell_end);
    let new = format!("{zh}{}", &cell[en.len()..]);
    let spaces = after.len() - after.trim_start_matches(' ').len();
    let (w_en, w_zh) = (width(cell), width(&new));
    let keep = if w_zh <= w_en {
        spaces + (w_en - w_zh)
    } else {
        spaces.saturating_sub(w_zh - w_en).max(spaces.min(2))
    };
    let tail = after.trim_start_matches(' ');
    let keep = if tail.is_empty() { 0 } else { keep };
    format!("{head}{new}{}{tail}", " ".repeat(keep))
}

/// A table row or heading (`table.rs`'s layout) in 繁體中文: its label and verdict words
/// translated, numbers and columns kept; `None` when `line` is not a known table line.
pub fn row(line: &str) -> Option<String> {
    let start = line.len() - line.trim_start().len();
    let body = &line[start..];
    // vs-tcp's rows start with a size: `256 B `, `64 KiB `.
    let size = body
        .split_once(' ')
        .filter(|(n, _)| n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty())
        .and_then(|(n, rest)| {
            ["B ", "KiB ", "MiB ", "GiB "]
                .iter()
                .find(|u| rest.starts_with(**u))
                .map(|u| n.len() + 1 + u.len())
        })
        .unwrap_or(0);
    let label_at = start + size;
    let label = LABELS.iter().find(|(en, _)| {
        line[label_at..].strip_prefix(en).is_some_and(|r| r.is_empty() || r.starts_with("  "))
    });
    let mut out = match label {
        Some((en, zh)) => swap(line, label_at, en, zh),
        None if body.starts_with("RDMA ") && body.contains("which is better") => line.to_string(),
        None => return None,
    };
    for (en, zh) in WORDS {
        if let Some(at) = out.find(en) {
            out = swap(&out, at, en, zh);
        }
    }
    Some(out.trim_end().to_string())
}

/// `learn vs-tcp`'s takeaway (`vs_tcp::takeaway`) in 繁體中文: its two phrases of sizes are
/// rebuilt in Chinese word order, its closing sentence taken from a table.
pub fn takeaway(line: &str) -> Option<String> {
    const HEAD: &str = "Takeaway: in this run's table, latency: ";
    const ENDS: [(&str, &str); 2] = [
        (
            " Where TCP won, this machine contradicts RDMA hardware, where the primer's advantages hold: here the emulated NIC is CPU threads that compete with the programs for the cores, and TCP over loopback never leaves memory.",
            "TCP 勝出之處，這台機器與 RDMA 硬體的情形相反（在硬體上，入門教材所說的優勢成立）：這裡的模擬網卡是與程式搶核心的 CPU 執行緒，而走 loopback 的 TCP 從不離開記憶體。",
        ),
        (
            " RDMA hardware keeps these advantages for reasons this emulation does not share: its NIC is silicon, not CPU threads.",
            "RDMA 硬體保有這些優勢，理由是這個模擬所沒有的：它的網卡是晶片，不是 CPU 執行緒。",
        ),
    ];
    let rest = line.strip_prefix(HEAD)?;
    let (lat, rest) = rest.split_once(". Bandwidth: ")?;
    let (end_zh, bw) = ENDS.iter().find_map(|(en, zh)| Some((*zh, rest.strip_suffix(en)?)))?;
    let bw = bw.strip_suffix('.')?;
    Some(format!("重點：本次執行的表格中，延遲：{}。頻寬：{}。{end_zh}", phrase(lat)?, phrase(bw)?))
}

/// One phrase of `vs_tcp::phrase` (`RDMA lower at 256 B, 4 KiB; even at 1 MiB`) in Chinese.
fn phrase(p: &str) -> Option<String> {
    let sizes = |s: &str| s.replace(", ", "、");
    let parts: Option<Vec<String>> = p
        .split("; ")
        .map(|part| {
            for (side, word, zh) in [
                ("RDMA", "lower", "較低"),
                ("TCP", "lower", "較低"),
                ("RDMA", "higher", "較高"),
                ("TCP", "higher", "較高"),
            ] {
                if let Some(s) = part.strip_prefix(&format!("{side} {word} at ")) {
                    return Some(format!("{side} 在 {} {zh}", sizes(s)));
                }
            }
            if let Some(s) = part.strip_prefix("even at ") {
                return Some(format!("在 {} 相當", sizes(s)));
            }
            let s = part.strip_prefix("no clear winner at ")?;
            let s = s.strip_suffix(" (the samples' ranges overlap)")?;
            Some(format!("在 {} 沒有明確的勝者（樣本的範圍重疊）", sizes(s)))
        })
        .collect();
    Some(parts?.join("；"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_their_numbers_and_columns() {
        let en = "  bytes per message                                       65536     65536  -";
        let zh = row(en).unwrap();
        assert!(zh.starts_with("  每則訊息的位元組 "), "{zh}");
        assert_eq!(width(&zh), width(en), "{zh}");
        assert!(zh.ends_with("65536     65536  -"), "{zh}");
        let vs = "       256 B latency, half round trip (us)   2.0 (2.0-2.0)  30.0 (30.0-30.0)  better: RDMA 15.0×      < 0.6";
        let zh = row(vs).unwrap();
        assert!(zh.starts_with("       256 B 延遲，半個來回（us）"), "{zh}");
        assert!(zh.contains("較佳：RDMA 15.0×"), "{zh}");
        assert_eq!(width(&zh), width(vs), "{zh}");
        assert_eq!(row("  RDMA here travels"), None);
        assert_eq!(
            takeaway("Takeaway: in this run's table, latency: RDMA lower at 256 B; TCP lower at 4 KiB, 64 KiB. Bandwidth: RDMA higher at 256 B; no clear winner at 4 KiB (the samples' ranges overlap). RDMA hardware keeps these advantages for reasons this emulation does not share: its NIC is silicon, not CPU threads.").unwrap(),
            "重點：本次執行的表格中，延遲：RDMA 在 256 B 較低；TCP 在 4 KiB、64 KiB 較低。頻寬：RDMA 在 256 B 較高；在 4 KiB 沒有明確的勝者（樣本的範圍重疊）。RDMA 硬體保有這些優勢，理由是這個模擬所沒有的：它的網卡是晶片，不是 CPU 執行緒。"
        );
    }
}
