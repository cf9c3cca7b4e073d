//! The language of the lessons' explanatory lines (`--lang en|zh-TW`): one message table,
//! English line → Traditional Chinese line, applied line by line as the output passes, so the
//! lessons keep printing English and a run stays live. Only lines found in the table change:
//! wire lines, verbs names, measured lines and the `RESULT` line are never in it. Nothing here
//! names a lesson, so `softverbs demo` can wrap its output the same way.
//!
//! The table is keyed on whole printed lines, so `sim/cli/tests/learn_lang.rs` holds it to
//! what the lessons, the demo and the drills print, in both directions: every key must still
//! be a line some run prints (a reworded or rewrapped English line fails there instead of
//! silently losing its Chinese), and every *explanatory* line printed must have its translation. A line
//! (without its indentation) is explanatory unless it is empty or the `RESULT` line; carries a
//! number (an ASCII digit: measurements, sizes, PSNs, QPNs, addresses, device names); names a
//! verbs constant (`IBV_`); is a command (`softverbs learn|demo|perf|devinfo …`, `man …`), a
//! wire or verbs result line (`wire `, `-> `, `=> `) or a table's column heading; or is listed
//! there as English by choice (the lines of a paragraph that quotes the run's numbers, and the
//! live run's narration).

use std::io::{self, Write};

use super::{lang_demo, lang_lessons, lang_live, lang_new};

/// A language the explanatory lines can be printed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Lang {
    /// English, as the lessons are written.
    #[default]
    En,
    /// Traditional Chinese as written in Taiwan (繁體中文).
    ZhTw,
}

/// The `--lang` values, in the order the error names them.
pub const CHOICES: [&str; 2] = ["en", "zh-TW"];

/// Parses `--lang`; an unknown value's error names the choices (clap makes it exit 2).
pub fn parse(s: &str) -> Result<Lang, String> {
    match s {
        "en" => Ok(Lang::En),
        "zh-TW" => Ok(Lang::ZhTw),
        _ => Err(format!("no language {s:?}; the choices are {}", CHOICES.join(", "))),
    }
}

/// English line (without its indentation) → 繁體中文. Each paragraph keeps its number of lines,
/// so a translated paragraph reads in order however the lesson cut it.
const ZH_TW: &[(&str, &str)] = &[
    ("What to watch:", "要注意什麼："),
    (
        "The live run (two processes on the soft backend, and a TCP connection between the same two):",
        "即時執行（soft 後端上的兩個行程，以及同樣兩個行程之間的一條 TCP 連線）：",
    ),
    ("Measured in this run:", "本次執行的量測："),
    ("What is emulated:", "哪些是模擬的："),
    ("Try:", "試試看："),
    // messages: what to watch.
    (
        "An RDMA SEND is a message: the receiver gets one completion per SEND, and its byte_len",
        "RDMA 的 SEND 是一則訊息：接收端每個 SEND 得到一個完成，其 byte_len",
    ),
    (
        "is the SEND's length, however the bytes were cut into packets. TCP is a stream: the",
        "就是該 SEND 的長度，不論位元組被切成幾個封包。TCP 是位元組流：",
    ),
    (
        "receiver's read() returns whatever has arrived, joined or split as it happens.",
        "接收端的 read() 回傳當下已到達的資料，可能被合併，也可能被切開。",
    ),
    // messages: what is emulated.
    (
        "The target's NIC is a thread of the target process; it put each SEND into the next",
        "目標端的網卡是目標行程中的一個執行緒；它把每個 SEND 放進下一個",
    ),
    (
        "posted receive and wrote one completion per message, as a real NIC does in silicon.",
        "已掛好的接收請求，每則訊息寫一個完成，就像真實網卡在晶片中做的一樣。",
    ),
    (
        "The TCP bytes went through the kernel's loopback; how read() cuts them depends on timing.",
        "TCP 的位元組經過核心的 loopback；read() 怎麼切它們取決於時機。",
    ),
    // zero-copy: what to watch.
    (
        "With RDMA the NIC reads the message from the sender's registered memory and writes it",
        "RDMA 由網卡從傳送端的已註冊記憶體讀出訊息，再寫入",
    ),
    (
        "into the target's: the programs copy nothing, and the kernel is not asked to. With TCP",
        "目標端的記憶體：程式什麼都不複製，也不必請核心幫忙。TCP 則由",
    ),
    (
        "the kernel copies every byte twice: into the socket on write(), out of it on read().",
        "核心把每個位元組複製兩次：write() 時複製進 socket，read() 時再複製出來。",
    ),
    // bypass: what to watch.
    (
        "An RDMA program posts work and polls for completions in its own memory: no system call",
        "RDMA 程式在自己的記憶體中送出工作並輪詢完成：資料路徑上",
    ),
    (
        "on the data path, so the kernel is bypassed. A TCP program asks the kernel for every",
        "沒有系統呼叫，因此繞過了核心。TCP 程式每一則訊息",
    ),
    (
        "message: at least a write() to send it and a read() to receive it, and a read() that",
        "都要請核心處理：至少一次 write() 送出、一次 read() 接收，而 read()",
    ),
    (
        "finds nothing yet puts the thread to sleep (a voluntary context switch).",
        "若還沒有資料，執行緒就會睡眠（一次自願的上下文切換）。",
    ),
    // one-sided: what to watch.
    (
        "RDMA WRITE and READ are one-sided: the target's NIC executes them against memory the",
        "RDMA WRITE 與 READ 是單邊操作：由目標端的網卡對目標端",
    ),
    (
        "target registered, and the target program takes no part. Watch its compute loop keep",
        "已註冊的記憶體執行，目標端程式完全不參與。請看它的計算迴圈維持",
    ),
    (
        "its pace and its program thread use no CPU while the data moves; then watch TCP, where",
        "原本的速度，資料搬移時程式執行緒不用 CPU；再看 TCP，",
    ),
    (
        "the target program itself must call read() and write() for every byte.",
        "目標端程式必須為每個位元組自己呼叫 read() 與 write()。",
    ),
    // sge: what to watch and what is emulated.
    (
        "A work request names its memory as a list of scatter/gather entries (SGEs): address,",
        "工作請求以一串分散／聚集項目（SGE）指出它的記憶體：位址、",
    ),
    (
        "length, lkey. The NIC gathers a SEND's bytes from every entry in order and scatters",
        "長度、lkey。網卡依序從每個項目聚集 SEND 的位元組，再依序分散到",
    ),
    (
        "them into the receive's entries in order; the program copies nothing together.",
        "接收請求的各個項目；程式不必自己把資料拼在一起。",
    ),
    // vs-tcp: what to watch and what is emulated.
    (
        "The primer's three advantages, measured: lower latency, higher bandwidth, more CPU left",
        "入門講義的三項優勢，實際量測：更低的延遲、更高的頻寬、留給",
    ),
    (
        "for the program. Each size runs a ping-pong and a one-way stream, by RDMA and by TCP,",
        "程式更多 CPU。每種大小各跑一次乒乓與一次單向串流，RDMA 與 TCP 各一次，",
    ),
    (
        "between the same two processes. On one machine both go through memory, so the emulated",
        "在同樣的兩個行程之間。在同一台機器上兩者都經過記憶體，所以模擬",
    ),
    (
        "NIC's CPU is part of the RDMA column: read the rows for where the time goes.",
        "網卡的 CPU 也算在 RDMA 欄中：請看各列，了解時間花在哪裡。",
    ),
    (
        "The RDMA column includes the emulated NICs: threads that copy with the CPU out of the",
        "RDMA 欄包含模擬網卡：這些執行緒用 CPU 從",
    ),
    (
        "sender's memory, into packets and ring slots of shared memory, and into the target's",
        "傳送端記憶體複製到封包與共享記憶體的環狀緩衝區槽位，再複製到目標端",
    ),
    (
        "memory (the copies row counts each), where a real NIC reads and writes memory by DMA",
        "記憶體（複製那一列逐一計數），而真實網卡用 DMA 讀寫記憶體，",
    ),
    (
        "How this emulator compares with real NICs: docs/performance.md.",
        "這個模擬器與真實網卡的比較：docs/performance.md。",
    ),
    // The takeaways, one per lesson.
    (
        "Takeaway: RDMA takes the programs and the kernel out of the copying; with TCP the kernel copies every byte in and out.",
        "重點：RDMA 讓程式與核心都不必複製資料；TCP 則由核心把每個位元組複製進來、再複製出去。",
    ),
    (
        "Takeaway: RDMA's data path makes no system call; TCP's makes at least two per message, and sleeps in read().",
        "重點：RDMA 的資料路徑不做系統呼叫；TCP 每則訊息至少兩次，而且會在 read() 中睡眠。",
    ),
    (
        "Takeaway: one-sided operations move data without the target program: its CPU stays with its own work.",
        "重點：單邊操作搬移資料時不需要目標端程式：它的 CPU 留給自己的工作。",
    ),
    (
        "Takeaway: with RDMA the receiver sees the sender's messages; with TCP it must find their ends itself.",
        "重點：RDMA 的接收端看到的是傳送端的訊息；TCP 的接收端必須自己找出訊息的結尾。",
    ),
    // qp-states and mr: one process, two devices.
    (
        "The live run (two devices of this process on the in-process loopback wire):",
        "即時執行（本行程的兩個裝置，經由行程內的 loopback 線路）：",
    ),
    (
        "A QP is a state machine the program drives with ibv_modify_qp: RESET -> INIT -> RTR",
        "QP 是一個狀態機，由程式用 ibv_modify_qp 驅動：RESET -> INIT -> RTR",
    ),
    (
        "(ready to receive) -> RTS (ready to send). Each step must carry exactly the attributes",
        "（可以接收）-> RTS（可以傳送）。每一步都必須恰好帶著 IBA 對它要求的",
    ),
    (
        "the IBA requires for it, named by the attribute mask; a missing one is refused and the",
        "屬性，由屬性遮罩指出；少了一個就會被拒絕，",
    ),
    (
        "QP does not move. ERR flushes every posted work request; RESET clears the QP for reuse.",
        "QP 也不會移動。ERR 清空每個已送出的工作請求；RESET 把 QP 清乾淨以便重新使用。",
    ),
    (
        "Nothing on the control path: ibv_modify_qp checks the IBA's table of required and",
        "控制路徑上沒有任何東西是模擬的：ibv_modify_qp 依 IBA 的表格檢查每個轉換",
    ),
    (
        "optional attributes per transition (verbs-api's qp_state.rs), as a real NIC's driver",
        "必要與選用的屬性（verbs-api 的 qp_state.rs），就像真實網卡的驅動程式",
    ),
    (
        "does; the flush completions are made by the emulated NIC as a real one makes them.",
        "所做的；清空產生的完成由模擬網卡產生，就像真實網卡一樣。",
    ),
    (
        "Takeaway: a QP moves only by ibv_modify_qp with the attributes its next state needs; ERR",
        "重點：QP 只會因帶著下一個狀態所需屬性的 ibv_modify_qp 而移動；ERR",
    ),
    ("flushes, RESET makes it new.", "會清空，RESET 讓它煥然一新。"),
    (
        "Registering memory gives it two keys: the lkey, which this side's work requests name,",
        "註冊記憶體會得到兩把金鑰：lkey，由本端的工作請求指名使用；",
    ),
    (
        "and the rkey, which a peer puts in an RDMA WRITE, READ or atomic. The NIC checks every",
        "以及 rkey，由對方放進 RDMA WRITE、READ 或原子操作中。網卡會拿每一次",
    ),
    (
        "remote access against the region's bounds and access flags, with no CPU involved: a",
        "遠端存取比對區域的範圍與存取旗標，完全不需要 CPU：對一塊",
    ),
    (
        "WRITE to memory registered without IBV_ACCESS_REMOTE_WRITE is refused on the wire.",
        "沒有以 IBV_ACCESS_REMOTE_WRITE 註冊的記憶體做 WRITE，會在線路上被拒絕。",
    ),
    (
        "The key, bounds and access checks are the target NIC's, made by the emulated NIC before",
        "金鑰、範圍與存取檢查屬於目標端網卡，由模擬網卡在碰觸記憶體之前完成，",
    ),
    (
        "it touches memory, as a real NIC makes them in hardware; the target program did nothing.",
        "就像真實網卡在硬體中做的一樣；目標端程式什麼都沒做。",
    ),
    (
        "Takeaway: an rkey is a capability: it opens exactly the registered range for exactly the",
        "重點：rkey 是一種權限憑證：它只開放恰好註冊的範圍，只允許恰好",
    ),
    ("access flags given, and it dies with ibv_dereg_mr.", "給定的存取旗標，並隨 ibv_dereg_mr 失效。"),
];

/// Every English line the table translates (the lessons' and the demo's), for the test that
/// holds the table to what the runs print.
pub fn english_lines() -> impl Iterator<Item = &'static str> {
    ZH_TW
        .iter()
        .chain(lang_demo::ZH_TW)
        .chain(lang_new::ZH_TW)
        .chain(lang_lessons::EXACT)
        .map(|(en, _)| *en)
}

/// `line` in `lang`: its translation, indentation kept, or the line itself.
pub fn line(lang: Lang, line: &str) -> String {
    let text = line.trim_start();
    let indent = &line[..line.len() - text.len()];
    match lang {
        Lang::En => line.to_string(),
        Lang::ZhTw => match ZH_TW
            .iter()
            .chain(lang_demo::ZH_TW)
            .chain(lang_new::ZH_TW)
            .chain(lang_lessons::EXACT)
            .find(|(en, _)| *en == text)
        {
            Some((_, zh)) => format!("{indent}{zh}"),
            // A line with the run's numbers in it: by its template.
            // A line with the run's numbers in it: by its template; a table's row or heading
            // by its label and verdict words; vs-tcp's takeaway by its phrases.
            None => match lang_live::translate(text).or_else(|| lang_lessons::takeaway(text)) {
                Some(zh) => format!("{indent}{zh}"),
                None => lang_lessons::row(line).unwrap_or_else(|| line.to_string()),
            },
        },
    }
}

/// A writer that translates each whole line written through it (a line is written when its
/// `\n` arrives; [`Translating::finish`] writes a last unterminated one).
pub struct Translating<'a> {
    inner: &'a mut dyn Write,
    lang: Lang,
    pending: Vec<u8>,
}

impl<'a> Translating<'a> {
    /// Wraps `inner`, translating into `lang`.
    pub fn new(inner: &'a mut dyn Write, lang: Lang) -> Self {
        Translating { inner, lang, pending: Vec::new() }
    }

    /// Writes what is left of an unterminated last line, and flushes.
    pub fn finish(mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            let rest = String::from_utf8_lossy(&self.pending).into_owned();
            self.inner.write_all(line(self.lang, &rest).as_bytes())?;
            self.pending.clear();
        }
        self.inner.flush()
    }
}

impl Write for Translating<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let l: Vec<u8> = self.pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&l[..end]);
            writeln!(self.inner, "{}", line(self.lang, &text))?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_translate_with_their_indent_and_others_pass_unchanged() {
        assert_eq!(line(Lang::ZhTw, "  Try:"), "  試試看：");
        assert_eq!(line(Lang::En, "Try:"), "Try:");
        let wire = "    target CQ: receive completion 1: byte_len 10";
        assert_eq!(line(Lang::ZhTw, wire), wire);
        assert!(parse("xx").unwrap_err().contains("en, zh-TW"));
        let mut out = Vec::new();
        let mut t = Translating::new(&mut out, Lang::ZhTw);
        t.write_all(b"What to ").unwrap();
        t.write_all(b"watch:\nRESULT a=1").unwrap();
        t.finish().unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "要注意什麼：\nRESULT a=1");
        // Each English line has one translation.
        for (i, (en, _)) in ZH_TW.iter().enumerate() {
            assert!(ZH_TW[..i].iter().all(|(e, _)| e != en), "{en:?} twice");
        }
        // The demo's lines: each once, and none a lesson's (which would win).
        for (i, (en, _)) in lang_demo::ZH_TW.iter().enumerate() {
            assert!(lang_demo::ZH_TW[..i].iter().all(|(e, _)| e != en), "{en:?} twice");
            assert!(ZH_TW.iter().all(|(e, _)| e != en), "{en:?} also a lesson's");
        }
        assert_eq!(
            line(Lang::ZhTw, "  Why, and how to fix it in a real program:"),
            "  為什麼，以及在真實程式中如何修正："
        );
    }
}
