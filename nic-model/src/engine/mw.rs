//! Memory windows, as rxe has them (`rxe_mw.c`): the MW table, `ibv_alloc_mw` and
//! `ibv_dealloc_mw`, the bind a send queue executes (`IBV_WR_BIND_MW`, which `ibv_bind_mw`
//! posts for a type 1 window), invalidation (`IBV_WR_LOCAL_INV`, a SEND WITH INVALIDATE), and
//! what a window's rkey grants the responder (`rxe_lookup_mw`, `rxe_recheck_mr`).
//!
//! A window's key is made as an MR's (`index << 8 | key byte`), from an index space of its
//! own: as rxe splits its pool indices between MRs (the lower half) and MWs (the upper half),
//! an MW's index has bit 23 set and an MR's never does, so the key alone says which table
//! names it ([`is_mw_key`]), and a key of one never names the other.

use std::collections::BTreeMap;

use verbs_api::{AccessFlags, Error, MwBind, MwType, Result};

use super::mr::{Mr, MrTable, PdId};
use super::Nic;

/// The lowest MW index: the upper half of the 24-bit index space (see [`is_mw_key`]).
const MIN_MW_INDEX: u32 = 0x0080_0000;
/// The highest MW index.
const MAX_MW_INDEX: u32 = 0x00FF_FFFF;

/// The QP a type 2 window answers for once its QP is destroyed: no QP number is 32 bits wide.
const NO_QP: u32 = u32::MAX;

/// Whether `key` names a memory window rather than an MR (rxe's `rkey_is_mw`): its index is
/// in the MWs' half of the index space.
#[inline]
pub fn is_mw_key(key: u32) -> bool {
    key >> 8 >= MIN_MW_INDEX
}

/// A window's state (rxe's `enum rxe_mw_state`; a deallocated window leaves the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MwState {
    /// A type 2 window bound to nothing (allocated, or invalidated since).
    Free,
    /// A type 1 window (bound or not), or a bound type 2 window.
    Valid,
}

/// One memory window.
#[derive(Clone, Debug)]
pub struct Mw {
    /// The PD it was allocated on.
    pub pd: PdId,
    /// Type 1 or 2.
    pub ty: MwType,
    /// Its rkey now (each bind gives it the key byte the bind WR names).
    pub key: u32,
    /// Free or valid.
    pub state: MwState,
    /// The key of the MR it is bound to (none while unbound).
    pub mr_key: Option<u32>,
    /// The MR address of its first byte.
    pub addr: u64,
    /// Its length (0: unbound).
    pub length: u64,
    /// The remote rights it grants.
    pub access: AccessFlags,
    /// Peers name its bytes from 0 (`IBV_ACCESS_ZERO_BASED`, type 2).
    pub zero_based: bool,
    /// The QP a type 2 window was bound through: the only one that answers for it.
    pub qpn: Option<u32>,
}

impl Mw {
    fn unbind(&mut self) {
        self.mr_key = None;
        self.addr = 0;
        self.length = 0;
        self.access = AccessFlags::empty();
        self.zero_based = false;
        self.qpn = None;
    }
}

/// The MW table of one device: windows by index, keys made as [`MrTable`] makes them.
pub struct MwTable {
    mws: BTreeMap<u32, Mw>,
    next_index: u32,
    key_seed: u64,
    drawn: u64,
}

impl MwTable {
    /// An empty table whose key bytes and first index come from `entropy`.
    pub fn new(entropy: u64) -> MwTable {
        let key_seed = super::splitmix64(entropy ^ 0x4D57_5F4B_4559_5321);
        let span = u64::from(MAX_MW_INDEX - MIN_MW_INDEX + 1);
        MwTable {
            mws: BTreeMap::new(),
            next_index: MIN_MW_INDEX + (key_seed % span) as u32,
            key_seed,
            drawn: 0,
        }
    }

    fn next(index: u32) -> u32 {
        if index >= MAX_MW_INDEX {
            MIN_MW_INDEX
        } else {
            index + 1
        }
    }

    /// The window this key names (the whole key, key byte included).
    #[inline]
    pub fn get(&self, key: u32) -> Option<&Mw> {
        self.mws.get(&(key >> 8)).filter(|w| w.key == key)
    }

    /// Windows allocated.
    pub fn len(&self) -> usize {
        self.mws.len()
    }

    /// Whether none are allocated.
    pub fn is_empty(&self) -> bool {
        self.mws.is_empty()
    }

    /// Whether any window belongs to `pd`.
    pub fn any_in_pd(&self, pd: PdId) -> bool {
        self.mws.values().any(|w| w.pd == pd)
    }

    /// How many windows are bound to the MR with this key (rxe's `mr->num_mw`).
    pub fn bound_to(&self, mr_key: u32) -> usize {
        self.mws.values().filter(|w| w.mr_key == Some(mr_key)).count()
    }

    /// The QP `qpn` was destroyed: the type 2 windows bound through it stay bound but answer
    /// for no QP, not even a later one given the same number (rxe's window holds the
    /// destroyed QP, which no new QP is); they can still be invalidated or deallocated.
    pub(crate) fn qp_destroyed(&mut self, qpn: u32) {
        for w in self.mws.values_mut().filter(|w| w.qpn == Some(qpn)) {
            w.qpn = Some(NO_QP);
        }
    }

    fn insert(&mut self, pd: PdId, ty: MwType) -> u32 {
        let mut index = self.next_index;
        while self.mws.contains_key(&index) {
            index = MwTable::next(index);
        }
        self.next_index = MwTable::next(index);
        self.drawn += 1;
        let byte = (super::splitmix64(self.key_seed.wrapping_add(self.drawn)) & 0xff) as u32;
        let key = index << 8 | byte;
        let state = match ty {
            MwType::Type1 => MwState::Valid,
            MwType::Type2 => MwState::Free,
        };
        let w = Mw {
            pd,
            ty,
            key,
            state,
            mr_key: None,
            addr: 0,
            length: 0,
            access: AccessFlags::empty(),
            zero_based: false,
            qpn: None,
        };
        self.mws.insert(index, w);
        key
    }

    /// Executes a bind WR of a QP numbered `qpn` on PD `qp_pd` (rxe's `rxe_bind_mw`, its
    /// checks in the order of `rxe_check_bind_mw`); the reason it failed, which completes the
    /// WR with `IBV_WC_MW_BIND_ERR`.
    pub(crate) fn bind(
        &mut self,
        mrs: &MrTable,
        qp_pd: PdId,
        qpn: u32,
        b: &MwBind,
    ) -> std::result::Result<(), &'static str> {
        let w = match self.mws.get_mut(&(b.mw_rkey >> 8)) {
            Some(w) if w.key == b.mw_rkey => w,
            _ => return Err("the window's rkey names no window"),
        };
        let mr = match b.length {
            0 => None,
            _ => Some(mrs.get(b.mr_lkey).ok_or("the MR's lkey names no MR")?),
        };
        match w.ty {
            MwType::Type1 if b.zero_based => return Err("a type 1 window cannot be zero-based"),
            MwType::Type1 => {}
            MwType::Type2 if w.state != MwState::Free => {
                return Err("a type 2 window is bound already (invalidate it first)")
            }
            MwType::Type2 if w.pd != qp_pd => return Err("the QP's PD is not the window's"),
            MwType::Type2 if mr.is_none() => {
                return Err("a type 2 window needs an MR and a length")
            }
            MwType::Type2 => {}
        }
        if let Some(mr) = mr {
            check_mr(w, mr, b)?;
        }
        w.unbind();
        w.key = (w.key & !0xff) | (b.new_rkey & 0xff);
        w.state = MwState::Valid;
        if let Some(mr) = mr {
            w.mr_key = Some(mr.key);
            w.addr = b.addr;
            w.length = b.length;
            w.access = b.access;
            w.zero_based = b.zero_based;
        }
        if w.ty == MwType::Type2 {
            w.qpn = Some(qpn);
        }
        Ok(())
    }

    /// Invalidates the type 2 window `key` names (rxe's `rxe_invalidate_mw`): it is free
    /// again, bound to nothing. An MR's key, or a type 1 window's, cannot be invalidated (rxe
    /// invalidates only the kernel's fast-registration MRs).
    pub(crate) fn invalidate(&mut self, key: u32) -> std::result::Result<(), &'static str> {
        if !is_mw_key(key) {
            return Err("the key names an MR, which only a fast-registration MR allows");
        }
        let w = match self.mws.get_mut(&(key >> 8)) {
            Some(w) if w.key == key => w,
            _ => return Err("the key names no window"),
        };
        if w.ty == MwType::Type1 {
            return Err("a type 1 window cannot be invalidated");
        }
        if w.state != MwState::Valid {
            return Err("the window is not bound");
        }
        w.unbind();
        w.state = MwState::Free;
        Ok(())
    }

    /// What the window `rkey` names grants a responder (rxe's `rxe_lookup_mw` on a request's
    /// first packet, `qpn` the responder's QP; its `rxe_recheck_mr` on later ones, `qpn`
    /// None): the MR behind it and the window, whose own bounds and access are what the
    /// responder's rules check (`rights`). None: it grants nothing.
    #[inline]
    pub(crate) fn target<'m>(
        &self,
        mrs: &'m MrTable,
        rkey: u32,
        qpn: Option<u32>,
    ) -> Option<(&'m Mr, &Mw)> {
        let w = self.get(rkey)?;
        if w.state != MwState::Valid || w.length == 0 {
            return None;
        }
        if w.ty == MwType::Type2 && qpn.is_some() && w.qpn != qpn {
            return None;
        }
        Some((mrs.get(w.mr_key?)?, w))
    }
}

/// The MR's part of a bind (`rxe_check_bind_mw` after the window's own checks).
fn check_mr(w: &Mw, mr: &Mr, b: &MwBind) -> std::result::Result<(), &'static str> {
    if mr.pd != w.pd {
        return Err("the MR belongs to another PD than the window");
    }
    if !mr.access.contains(AccessFlags::MW_BIND) {
        return Err("the MR was registered without IBV_ACCESS_MW_BIND");
    }
    let writes = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    if b.access.intersects(writes) && !mr.access.contains(AccessFlags::LOCAL_WRITE) {
        return Err("a writable window on an MR without IBV_ACCESS_LOCAL_WRITE");
    }
    let mr_len = mr.memory.len() as u64;
    let inside = match b.zero_based {
        true => b.length <= mr_len && b.addr >= mr.iova && b.addr - mr.iova + b.length <= mr_len,
        false => {
            b.addr >= mr.iova
                && b.addr.checked_add(b.length).is_some_and(|end| end <= mr.iova + mr_len)
        }
    };
    if !inside {
        return Err("the window's range is outside the MR");
    }
    Ok(())
}

impl Nic {
    /// `ibv_alloc_mw`: a window of type `ty` on `pd`; returns its rkey.
    pub fn alloc_mw(&mut self, pd: PdId, ty: MwType) -> Result<u32> {
        if !self.hca.pds.contains_key(&pd) {
            return Err(Error::inval(format!("ibv_alloc_mw: PD {pd} does not exist")));
        }
        let max = self.hca.cfg.limits.max_mr;
        if self.hca.mws.len() >= max as usize {
            return Err(Error::nomem(format!(
                "ibv_alloc_mw: the device's max_mw {max} is reached"
            )));
        }
        Ok(self.hca.mws.insert(pd, ty))
    }

    /// `ibv_dealloc_mw`: a bound window is unbound as it goes (rxe's `rxe_mw_cleanup`). `key`
    /// is any key the window has had: its index names it.
    pub fn dealloc_mw(&mut self, key: u32) -> Result<()> {
        match self.hca.mws.mws.remove(&(key >> 8)) {
            Some(_) if is_mw_key(key) => Ok(()),
            _ => Err(Error::inval(format!("ibv_dealloc_mw: no window with rkey {key:#x}"))),
        }
    }

    /// The window `key` names (tests and tools).
    pub fn mw(&self, key: u32) -> Option<&Mw> {
        self.hca.mws.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::mr::MrMemory;

    const RW: AccessFlags = AccessFlags::REMOTE_WRITE.union(AccessFlags::REMOTE_READ);

    /// An MR table with one 4 KiB MR at iova 0x10000 on PD 1, registered with `access`.
    fn mrs(access: AccessFlags) -> (MrTable, u32) {
        let mut t = MrTable::new(5);
        let key = t.insert(1, MrMemory::allocate(4096).unwrap(), 0x10000, access);
        (t, key)
    }

    fn bind(w: &Mw, mr_lkey: u32, addr: u64, length: u64) -> MwBind {
        MwBind {
            mw_rkey: w.key,
            new_rkey: verbs_api::inc_rkey(w.key),
            mr_lkey,
            addr,
            length,
            access: RW,
            zero_based: false,
        }
    }

    #[test]
    fn window_keys_and_mr_keys_never_meet() {
        let (mut mrs, mr) = mrs(AccessFlags::LOCAL_WRITE);
        let mut mws = MwTable::new(5);
        assert!(!is_mw_key(mr));
        for _ in 0..100 {
            let k = mws.insert(1, MwType::Type2);
            assert!(is_mw_key(k) && mrs.get(k).is_none(), "{k:#x}");
            let m = mrs.insert(1, MrMemory::allocate(8).unwrap(), 0x1000, AccessFlags::empty());
            assert!(!is_mw_key(m) && mws.get(m).is_none(), "{m:#x}");
        }
    }

    #[test]
    fn a_type_2_window_binds_once_answers_its_qp_alone_and_is_invalidated() {
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND;
        let (mrs, mr) = mrs(all);
        let mut mws = MwTable::new(9);
        let key = mws.insert(1, MwType::Type2);
        // Nothing to grant before the bind.
        assert!(mws.target(&mrs, key, Some(7)).is_none());
        let b = bind(mws.get(key).unwrap(), mr, 0x10100, 256);
        // The QP's PD must be the window's.
        assert!(mws.bind(&mrs, 2, 7, &b).is_err());
        mws.bind(&mrs, 1, 7, &b).unwrap();
        let new = b.new_rkey;
        assert!(mws.get(key).is_none(), "the old key names nothing");
        let (m, w) = mws.target(&mrs, new, Some(7)).unwrap();
        assert_eq!((m.key, w.addr, w.length, w.qpn), (mr, 0x10100, 256, Some(7)));
        assert!(mws.target(&mrs, new, Some(8)).is_none(), "another QP");
        assert!(mws.target(&mrs, new, None).is_some(), "a later packet (no QP check)");
        assert_eq!(mws.bound_to(mr), 1);
        // Bound already: a second bind fails until it is invalidated.
        let again = bind(mws.get(new).unwrap(), mr, 0x10000, 64);
        assert!(mws.bind(&mrs, 1, 7, &again).is_err());
        assert!(mws.invalidate(b.mw_rkey).is_err(), "the old key");
        // Its QP destroyed, it answers for no QP, not even one given the same number.
        mws.qp_destroyed(7);
        assert!(mws.target(&mrs, new, Some(7)).is_none());
        mws.invalidate(new).unwrap();
        assert!(mws.invalidate(new).is_err(), "free already");
        assert!(mws.target(&mrs, new, Some(7)).is_none());
        assert_eq!(mws.bound_to(mr), 0);
        mws.bind(&mrs, 1, 7, &again).unwrap();
    }

    #[test]
    fn binds_are_checked_as_rxe_checks_them() {
        let mut mws = MwTable::new(3);
        // An MR without MW_BIND; one without LOCAL_WRITE under a writable window.
        for access in [AccessFlags::LOCAL_WRITE, AccessFlags::MW_BIND] {
            let (mrs, mr) = mrs(access);
            let key = mws.insert(1, MwType::Type1);
            let b = bind(mws.get(key).unwrap(), mr, 0x10000, 64);
            assert!(mws.bind(&mrs, 1, 7, &b).is_err(), "{access:?}");
        }
        let (mrs, mr) = mrs(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
        let key = mws.insert(1, MwType::Type1);
        let w = mws.get(key).unwrap().clone();
        // Outside the MR, on either side.
        assert!(mws.bind(&mrs, 1, 7, &bind(&w, mr, 0xffff, 8)).is_err());
        assert!(mws.bind(&mrs, 1, 7, &bind(&w, mr, 0x10ff9, 8)).is_err());
        assert!(mws.bind(&mrs, 1, 7, &bind(&w, 0x1234_5600, 0x10000, 8)).is_err(), "no MR");
        // Zero-based type 1: refused.
        let zb = MwBind { zero_based: true, ..bind(&w, mr, 0x10000, 8) };
        assert!(mws.bind(&mrs, 1, 7, &zb).is_err());
        // A type 1 bind of length 0 unbinds; type 1 cannot be invalidated.
        let b = bind(&w, mr, 0x10000, 4096);
        mws.bind(&mrs, 1, 7, &b).unwrap();
        assert!(mws.invalidate(b.new_rkey).is_err());
        let w = mws.get(b.new_rkey).unwrap().clone();
        assert_eq!(w.qpn, None, "a type 1 window answers on any QP");
        mws.bind(&mrs, 1, 7, &bind(&w, 0, 0, 0)).unwrap();
        assert!(mws.target(&mrs, verbs_api::inc_rkey(w.key), None).is_none());
        assert_eq!(mws.bound_to(mr), 0);
        // An MR's key is never invalidated.
        assert!(mws.invalidate(mr).is_err());
    }
}
