//! The TCP side of every lesson: a connection over loopback between the same two processes,
//! read and written with plain `read(2)`/`write(2)` (so the kernel's per-thread `syscr`/`syscw`
//! and `rchar`/`wchar` count every call and byte), and the lesson's own count of those calls.

use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;

/// What one side did on its TCP connection, counted by the lesson itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCount {
    /// `read` (or `readv`) calls.
    pub reads: u64,
    /// `write` (or `writev`) calls.
    pub writes: u64,
    /// Bytes the reads returned.
    pub read_bytes: u64,
    /// Bytes the writes took.
    pub written_bytes: u64,
}

impl TcpCount {
    /// System calls on the connection.
    pub fn calls(&self) -> u64 {
        self.reads + self.writes
    }
}

/// One end of the lesson's TCP connection.
pub struct Tcp {
    file: File,
    /// Calls and bytes so far.
    pub count: TcpCount,
}

fn from_stream(s: TcpStream) -> Result<Tcp, String> {
    s.set_nodelay(true).map_err(|e| format!("TCP_NODELAY: {e}"))?;
    Ok(Tcp { file: File::from(OwnedFd::from(s)), count: TcpCount::default() })
}

/// A listener on 127.0.0.1 and an ephemeral port.
pub fn listen() -> Result<(TcpListener, u16), String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("a TCP listener: {e}"))?;
    let port = l.local_addr().map_err(|e| format!("the listener's port: {e}"))?.port();
    Ok((l, port))
}

/// The listener's one connection.
pub fn accept(l: &TcpListener) -> Result<Tcp, String> {
    let (s, _) = l.accept().map_err(|e| format!("accepting the TCP connection: {e}"))?;
    from_stream(s)
}

/// Connects to `port` on 127.0.0.1.
pub fn connect(port: u16) -> Result<Tcp, String> {
    let s = TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connecting to 127.0.0.1:{port}: {e}"))?;
    from_stream(s)
}

impl Tcp {
    /// One `read(2)`; 0 is the peer closing.
    pub fn read_once(&mut self, buf: &mut [u8]) -> Result<usize, String> {
        let n = self.file.read(buf).map_err(|e| format!("TCP read: {e}"))?;
        self.count.reads += 1;
        self.count.read_bytes += n as u64;
        if n == 0 && !buf.is_empty() {
            return Err("the TCP peer closed the connection".into());
        }
        Ok(n)
    }

    /// Reads until `total` bytes came, into `buf` over and over; the size of each read.
    pub fn read_total(&mut self, total: u64, buf: &mut [u8]) -> Result<Vec<usize>, String> {
        let mut sizes = Vec::new();
        let mut got = 0u64;
        while got < total {
            let want = (total - got).min(buf.len() as u64) as usize;
            let n = self.read_once(&mut buf[..want])?;
            got += n as u64;
            sizes.push(n);
        }
        Ok(sizes)
    }

    /// Writes all of `data` (one `write(2)`, more if the kernel takes less).
    pub fn write_all(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            let n = self.file.write(data).map_err(|e| format!("TCP write: {e}"))?;
            self.count.writes += 1;
            self.count.written_bytes += n as u64;
            data = &data[n..];
        }
        Ok(())
    }

    /// One `writev(2)` of `parts` (gather); the bytes it took.
    pub fn writev(&mut self, parts: &[&[u8]]) -> Result<usize, String> {
        let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        let n = self.file.write_vectored(&slices).map_err(|e| format!("TCP writev: {e}"))?;
        self.count.writes += 1;
        self.count.written_bytes += n as u64;
        Ok(n)
    }
}
