//! The memory region (`struct ibv_mr`): the trait a backend implements and the handle a program
//! holds, whose memory is read and written by copying.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::types::{AccessFlags, Sge};

/// A memory region (`struct ibv_mr`), as a backend implements it; programs hold a
/// [`MemoryRegion`]. Its memory is read and written by copying, because the NIC (a remote
/// WRITE, say) may change it at any time.
pub trait MrOps: Send + Sync {
    /// `lkey`.
    fn lkey(&self) -> u32;
    /// `rkey`.
    fn rkey(&self) -> u32;
    /// `addr`: the virtual address of the first byte, as SGEs and peers name it.
    fn addr(&self) -> u64;
    /// `length` in bytes.
    fn len(&self) -> usize;
    /// Whether the MR is zero bytes long.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The access flags it was registered with.
    fn access(&self) -> AccessFlags;
    /// Copy `buf.len()` bytes out of the MR from `offset`.
    fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()>;
    /// Copy `data` into the MR at `offset`.
    fn write(&self, offset: usize, data: &[u8]) -> Result<()>;
    /// `ibv_dereg_mr`: the keys stop working at once; WRs that still name them fail with a protection error.
    fn dereg(&self) -> Result<()>;
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// A registered memory region (`struct ibv_mr`).
#[derive(Clone)]
pub struct MemoryRegion {
    pub(super) ops: Arc<dyn MrOps>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MemoryRegion(addr={:#x}, len={}, lkey={:#x}, rkey={:#x})",
            self.addr(),
            self.len(),
            self.lkey(),
            self.rkey()
        )
    }
}

impl MemoryRegion {
    /// The backend object.
    pub fn ops(&self) -> &Arc<dyn MrOps> {
        &self.ops
    }
    /// `mr->lkey`.
    pub fn lkey(&self) -> u32 {
        self.ops.lkey()
    }
    /// `mr->rkey`.
    pub fn rkey(&self) -> u32 {
        self.ops.rkey()
    }
    /// `mr->addr`.
    pub fn addr(&self) -> u64 {
        self.ops.addr()
    }
    /// `mr->length`.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// Whether the MR is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.ops.len() == 0
    }
    /// The access flags.
    pub fn access(&self) -> AccessFlags {
        self.ops.access()
    }
    /// An SGE for `length` bytes at `offset` in this MR.
    pub fn sge(&self, offset: usize, length: u32) -> Sge {
        Sge { addr: self.addr() + offset as u64, length, lkey: self.lkey() }
    }
    /// Copy bytes out of the MR.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.ops.read(offset, buf)
    }
    /// Copy `len` bytes out of the MR into a new vector.
    pub fn read_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.ops.read(offset, &mut v)?;
        Ok(v)
    }
    /// Copy bytes into the MR.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.ops.write(offset, data)
    }
    /// Read a native-endian u64 at `offset` (what an atomic on this host sees).
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.ops.read(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }
    /// Write a native-endian u64 at `offset`.
    pub fn write_u64(&self, offset: usize, v: u64) -> Result<()> {
        self.ops.write(offset, &v.to_ne_bytes())
    }
    /// `ibv_dereg_mr`.
    pub fn dereg(self) -> Result<()> {
        self.ops.dereg()
    }
}
