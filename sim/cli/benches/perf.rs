//! `cargo bench -p softverbs`: the 8-byte SEND ping-pong latency and the 1 MiB RDMA WRITE
//! bandwidth between two processes, printed as `softverbs perf lat` and `softverbs perf bw`
//! print them. The bench binary is also its own peer process (spawned with `--peer`).

use clap::Parser;

#[derive(Parser)]
struct PeerCli {
    #[command(flatten)]
    perf: softverbs::cmd::perf::PerfArgs,
}

fn main() -> std::process::ExitCode {
    if std::env::args().any(|a| a == "--peer") {
        return softverbs::cmd::perf::run(PeerCli::parse().perf, &[]);
    }
    match softverbs::cmd::perf::bench(&[]) {
        Ok((lat, bw)) => {
            println!(
                "bench summary: 8 B SEND half round trip median {:.3} us (p99 {:.3} us); 1 MiB RDMA WRITE {:.3} GB/s",
                lat.median_ns / 1e3,
                lat.p99_ns / 1e3,
                bw.median_gbps
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("softverbs perf bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
