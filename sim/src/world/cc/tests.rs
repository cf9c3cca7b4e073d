use proptest::prelude::*;

use super::*;

fn dcqcn(line: f64) -> Dcqcn {
    Dcqcn::new(DcqcnParams::default(), line, 0)
}

#[test]
fn a_cnp_cuts_the_rate_by_half_alpha_and_raises_alpha() {
    let mut f = dcqcn(100.0);
    f.advance(10);
    f.on_cnp(10);
    // alpha starts at 1: Rc = 100 * (1 - 1/2), Rt the old Rc, alpha = (1-g) + g = 1.
    assert_eq!(f.rate_gbps(), 50.0);
    assert_eq!(f.target_gbps(), 100.0);
    assert!((f.alpha() - 1.0).abs() < 1e-12);
}

#[test]
fn alpha_decays_by_one_minus_g_per_period_without_cnp() {
    let p = DcqcnParams::default();
    let mut f = dcqcn(100.0);
    f.on_cnp(0);
    f.advance(3 * 55_000);
    let want = (1.0 - p.g).powi(3);
    assert!((f.alpha() - want).abs() < 1e-12, "{} vs {want}", f.alpha());
}

#[test]
fn fast_recovery_halves_the_distance_to_the_target_each_timer_tick() {
    let mut f = dcqcn(100.0);
    f.on_cnp(0); // Rc 50, Rt 100
    f.advance(55_000);
    assert_eq!(f.rate_gbps(), 75.0);
    f.advance(110_000);
    assert_eq!(f.rate_gbps(), 87.5);
    assert_eq!(f.target_gbps(), 100.0);
}

#[test]
fn additive_then_hyper_increase_move_the_target() {
    let p =
        DcqcnParams { fast_recovery: 1, rai_mbps: 1000.0, rhai_mbps: 2000.0, ..Default::default() };
    let mut f = Dcqcn::new(p.clone(), 100.0, 0);
    f.on_cnp(0);
    f.on_cnp(0); // Rc 25, Rt 50
    assert_eq!((f.rate_gbps(), f.target_gbps()), (25.0, 50.0));
    f.advance(55_000); // timer 1 >= F 1, bytes 0: additive: Rt 51, Rc 38
    assert_eq!((f.target_gbps(), f.rate_gbps()), (51.0, 38.0));
    f.on_sent(55_000, p.byte_counter as usize); // bytes 1: additive again
    f.on_sent(55_000, p.byte_counter as usize); // bytes 2, timer 1: still additive (min 1)
    assert_eq!(f.target_gbps(), 53.0);
    f.advance(110_000); // timer 2, bytes 2: hyper, i = 1: Rt += 2
    assert_eq!(f.target_gbps(), 55.0);
}

#[test]
fn the_rate_never_falls_below_the_minimum() {
    let mut f = dcqcn(100.0);
    for _ in 0..200 {
        f.on_cnp(0);
    }
    assert_eq!(f.rate_gbps(), DcqcnParams::default().min_rate_mbps / 1000.0);
}

#[test]
fn red_marking_is_zero_below_kmin_linear_to_pmax_and_one_above_kmax() {
    let m = EcnMarking::DCQCN_PAPER;
    assert_eq!(m.probability(5_000), 0.0);
    assert!((m.probability(102_500) - 0.005).abs() < 1e-12);
    assert!((m.probability(200_000) - 0.01).abs() < 1e-12);
    assert_eq!(m.probability(200_001), 1.0);
    assert!(EcnMarking { kmin_bytes: 2, kmax_bytes: 1, pmax: 0.1 }.check().is_err());
    assert!(EcnMarking { kmin_bytes: 1, kmax_bytes: 2, pmax: 1.5 }.check().is_err());
}

#[test]
fn setting_ecn_keeps_the_ip_checksum_and_the_icrc_valid() {
    let mut d = build_cnp([10, 0, 0, 2], [10, 0, 0, 1], 0x1234, 49152);
    // A CNP is 20 + 8 + 12 + 16 + 4 bytes, as NICs send it.
    assert_eq!(d.len(), 60);
    assert_eq!(d[28], 0x81);
    assert_eq!(d[32] & 0x40, 0x40, "BECN set");
    assert_eq!(&d[28 + 5..28 + 8], &[0, 0x12, 0x34]);
    assert!(d[40..56].iter().all(|&b| b == 0), "16 reserved bytes");
    set_ecn(&mut d, ECN_CE);
    assert_eq!(ecn_of(&d), Some(ECN_CE));
    let (_, pkt) = packet::parse_datagram(&d).expect("still a valid datagram: checksum, ICRC");
    assert_eq!(pkt.bth.opcode, Opcode::CNP);
    assert_eq!(pkt.bth.dest_qp, 0x1234);
}

#[test]
fn a_pacer_lets_through_the_rate_and_no_more() {
    let mut p = Pacer::new(4096, 0);
    assert!(p.try_take(4096));
    assert!(!p.try_take(1));
    // 10 Gbit/s: 4096 bytes take 3277 ns.
    assert_eq!(p.ready_at(4096, 10.0), 3277);
    p.refill(3276, 10.0);
    assert!(!p.try_take(4096));
    p.refill(3277, 10.0);
    assert!(p.try_take(4096));
}

fn events() -> impl Strategy<Value = Vec<FlowEvent>> {
    let e = prop_oneof![
        (0u64..200_000).prop_map(FlowEvent::Wait),
        (1usize..=4160).prop_map(FlowEvent::Send),
        Just(FlowEvent::Cnp),
    ];
    proptest::collection::vec(e, 0..300)
}

fn params() -> impl Strategy<Value = DcqcnParams> {
    (0.0f64..=1.0, 1.0f64..500.0, 1.0f64..500.0, 1u64..20_000_000, 0u32..10, 0.0f64..5000.0)
        .prop_map(|(g, k, t, b, f, rai)| DcqcnParams {
            g,
            alpha_timer_us: k,
            rate_timer_us: t,
            byte_counter: b,
            fast_recovery: f,
            rai_mbps: rai,
            rhai_mbps: rai * 2.0,
            ..DcqcnParams::default()
        })
}

proptest! {
    /// DCQCN's invariants under any sequence of waits, sends and CNPs, with any parameters:
    /// the rate stays within [min, line], the limiter's credit never goes negative, and the
    /// flow never sends more than the line allows.
    #[test]
    fn dcqcn_keeps_its_rate_in_bounds_and_its_credit_non_negative(
        p in params(), line in 1.0f64..400.0, ev in events()
    ) {
        let min = (p.min_rate_mbps / 1000.0).min(line);
        check_flow(&DcqcnAlgorithm(p), line, min, 16 * 1024, &ev).map_err(TestCaseError::fail)?;
    }
}

/// A broken algorithm (its rate goes above the line) fails the same check: the check is one a
/// user's own algorithm can be held to.
#[test]
fn check_flow_catches_an_algorithm_that_exceeds_the_line() {
    #[derive(Debug)]
    struct Greedy(f64);
    impl RateControl for Greedy {
        fn rate_gbps(&self) -> f64 {
            self.0
        }
        fn advance(&mut self, _: u64) {}
        fn on_sent(&mut self, _: u64, _: usize) {}
        fn on_cnp(&mut self, _: u64) {
            self.0 *= 2.0;
        }
    }
    #[derive(Debug)]
    struct GreedyAlg;
    impl CcAlgorithm for GreedyAlg {
        fn name(&self) -> &str {
            "greedy"
        }
        fn new_flow(&self, line: f64, _: u64) -> Box<dyn RateControl> {
            Box::new(Greedy(line))
        }
    }
    let err = check_flow(&GreedyAlg, 10.0, 0.01, 4096, &[FlowEvent::Cnp]).unwrap_err();
    assert!(err.contains("outside"), "{err}");
}
