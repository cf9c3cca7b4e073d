//! `softverbs demo` across two hosts: `demo --server` runs the target alone, on this host's
//! device, and waits on a TCP port for an initiator; `demo --connect ADDR` is the initiator,
//! whose target is that server. The two speak the same lines over TCP (addresses, READY,
//! DONE, what the target saw) as the local demo speaks to its target process over a pipe;
//! the RDMA traffic goes over the devices' wire (with `--netdev`, RoCE v2 over UDP 4791).

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use softverbs_sim::peer::Peer;

use super::{run_target, w, Target};
use crate::cmd::{self, gid_ntop, CliError};

/// The TCP port of the demo's exchange when none is given.
pub const DEFAULT_PORT: u16 = 18516;

/// Bound on connecting to the server.
const CONNECT: Duration = Duration::from_secs(10);

/// What the target sends the initiator, also printed here: the server shows its side.
struct Tee<'a> {
    sock: TcpStream,
    echo: &'a mut dyn Write,
}

impl Write for Tee<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sock.write_all(buf)?;
        let _ = self.echo.write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.echo.flush();
        self.sock.flush()
    }
}

/// `demo --server`: the target on `ib_dev`, for one initiator that connects to TCP `port`.
pub fn serve(
    fabric: Option<&Path>,
    ib_dev: &str,
    gid_idx: Option<u32>,
    port: u16,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    cmd::register_fabric(fabric)?;
    let ctx = cmd::open_device(ib_dev)?;
    let addr = cmd::port_address(&ctx, gid_idx)?;
    let listener = TcpListener::bind(("0.0.0.0", port))
        .map_err(|e| CliError::failed(format!("listening on TCP port {port}: {e}")))?;
    w(
        out,
        &format!(
            "softverbs demo --server: the target, on {ib_dev} (GID {}), waits for an initiator \
             (softverbs demo --connect THIS_HOST) on TCP port {port}.",
            gid_ntop(&addr.gid)
        ),
    );
    let _ = out.flush();
    let (stream, from) = listener
        .accept()
        .map_err(|e| CliError::failed(format!("accepting on TCP port {port}: {e}")))?;
    w(out, &format!("The initiator connected from {from}. What the target tells it:"));
    let input = stream
        .try_clone()
        .map_err(|e| CliError::failed(format!("the connection from {from}: {e}")))?;
    let mut input = BufReader::new(input);
    let mut output = Tee { sock: stream, echo: out };
    run_target(&ctx, gid_idx, &mut input, &mut output)
        .map_err(|e| CliError::failed(format!("target: {e}")))
}

/// `demo --connect HOST`: the initiator's link to the target that `demo --server` runs on
/// `host` (TCP `port`).
pub(super) fn connect(
    host: &str,
    port: u16,
    ib_dev: &str,
    out: &mut dyn Write,
) -> Result<Target, CliError> {
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| CliError::usage(format!("--connect {host}: {e}")))?
        .collect();
    let mut last = None;
    let stream = addrs.iter().find_map(|a| match TcpStream::connect_timeout(a, CONNECT) {
        Ok(s) => Some(s),
        Err(e) => {
            last = Some(e);
            None
        }
    });
    let stream = stream.ok_or_else(|| {
        let why = last.map_or("no address".to_string(), |e| e.to_string());
        CliError::failed(format!(
            "--connect {host}: TCP port {port}: {why} (is `softverbs demo --server` running there?)"
        ))
    })?;
    let peer = Peer::stream(&format!("the target on {host}"), stream)?;
    w(out, "softverbs demo: RDMA between two hosts, packet by packet.\n");
    w(
        out,
        &format!(
            "This process (pid {}) is the initiator, on {ib_dev}. The target is `softverbs demo \
             --server` on {host}, on its own {ib_dev}:\nthe addresses go over TCP port {port}, \
             the RDMA packets over the devices' wire.",
            std::process::id()
        ),
    );
    Ok(Target { peer, device: format!("{ib_dev} on {host}") })
}
