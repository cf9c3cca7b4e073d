//! The engine's log events, captured by a subscriber of the test's own while the simulator runs
//! the sample scenarios: a lossy link logs retransmissions with their cause, and a connection
//! cut for good logs its retries running out, the QP's move to ERR and the error completion,
//! each with the device, QP number and PSN as structured fields.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use softverbs_sim::world::scenario::{run, RunOptions, Scenario};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One event: its level, target and fields (the message under `message`).
#[derive(Debug, Clone)]
struct Record {
    level: Level,
    target: String,
    fields: BTreeMap<String, String>,
}

impl Record {
    fn message(&self) -> &str {
        self.fields.get("message").map_or("", String::as_str)
    }
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// A layer that keeps every event.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Record>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl<S: Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let meta = event.metadata();
        let r = Record { level: *meta.level(), target: meta.target().to_string(), fields };
        self.0.lock().unwrap().push(r);
    }
}

/// Run a sample scenario with every event captured; returns whether it passed and the events.
fn run_logged(name: &str, seed: Option<u64>) -> (bool, Vec<Record>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name);
    let sc = Scenario::load(&path).unwrap();
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let report = tracing::subscriber::with_default(subscriber, || {
        run(&sc, &RunOptions { seed, ..RunOptions::default() }).unwrap()
    });
    let records = capture.0.lock().unwrap().clone();
    (report.passed, records)
}

fn is_hex(s: &str) -> bool {
    s.strip_prefix("0x").is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
}

#[test]
fn a_lossy_link_logs_retransmissions_with_their_cause() {
    // Seed 2: its losses include a burst's tail, which waits for the local ACK timeout (seed 1
    // NAKs every loss).
    let (passed, records) = run_logged("lossy-link.toml", Some(2));
    assert!(passed);
    let retries: Vec<&Record> =
        records.iter().filter(|r| r.message().starts_with("retransmitting")).collect();
    assert!(!retries.is_empty(), "no retransmission logged in {} events", records.len());
    for r in &retries {
        assert_eq!(
            (r.level, r.target.as_str()),
            (Level::DEBUG, "nic_model::engine::comp"),
            "{r:?}"
        );
        assert!(is_hex(r.field("qpn")) && is_hex(r.field("psn")), "{r:?}");
        assert!(!r.field("device").is_empty() && !r.field("retry_left").is_empty(), "{r:?}");
    }
    // Losses of requests show as sequence gaps (a NAK or a later response) and as timeouts
    // (the last packets of a burst, or their ACKs, lost).
    for cause in ["sequence", "timeout"] {
        assert!(retries.iter().any(|r| r.field("cause") == cause), "no {cause} retry: {retries:?}");
    }
    let naks = records.iter().filter(|r| r.message().starts_with("sequence error NAK sent"));
    assert!(naks.clone().count() > 0, "the responder NAKs a gap");
    assert!(naks.clone().all(|r| r.field("opcode").starts_with("RC ")), "opcode names");
    assert!(
        records
            .iter()
            .any(|r| r.message() == "NAK received" && r.field("code") == "PsnSequenceError"),
        "the requester logs the NAKs it gets"
    );
    // Recovered: nothing a user must see.
    let warnings: Vec<_> = records.iter().filter(|r| r.level <= Level::WARN).collect();
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn retries_running_out_log_the_cause_the_move_to_err_and_the_error_completion() {
    let (passed, records) = run_logged("partition-heals.toml", None);
    assert!(passed);
    let exhausted = records
        .iter()
        .position(|r| r.message() == "transport retries exhausted")
        .expect("retries exhausted is logged");
    let e = &records[exhausted];
    assert_eq!(e.level, Level::WARN);
    assert_eq!((e.field("cause"), e.field("retry_cnt")), ("timeout", "3"), "{e:?}");
    assert!(is_hex(e.field("qpn")) && is_hex(e.field("psn")), "{e:?}");
    let (device, qpn) = (e.field("device"), e.field("qpn"));
    // Before it, the cut connection's retries, all on a timeout, each spending one.
    let before: Vec<&str> = records[..exhausted]
        .iter()
        .filter(|r| r.message().starts_with("retransmitting") && r.field("qpn") == qpn)
        .map(|r| r.field("retry_left"))
        .collect();
    assert_eq!(before, ["2", "1", "0"], "{:?}", &records[..exhausted]);
    // After it: the error completion, then the QP's move to ERR, then the flush.
    let after: Vec<(Level, &str, String)> = records[exhausted + 1..]
        .iter()
        .filter(|r| r.field("device") == device && r.field("qpn") == qpn)
        .take(3)
        .map(|r| {
            let detail = match r.message() {
                "error completion" => r.field("status").to_string(),
                m if m.starts_with("QP state change") => {
                    format!("{} -> {}", r.field("from"), r.field("to"))
                }
                _ => String::new(),
            };
            (r.level, r.message(), detail)
        })
        .collect();
    assert_eq!(
        after,
        [
            (Level::WARN, "error completion", "RetryExcErr".to_string()),
            (Level::WARN, "QP state change: an error moves it to ERR", "Rts -> Err".to_string()),
            (Level::DEBUG, "flushing the QP's work requests with WR_FLUSH_ERR", String::new()),
        ]
    );
}
