//! An id's own name in the CM directory: a link to the socket of the channel the id is on now.
//! A connecting or accepting id gives it as the address its peer replies to, so the peer, the
//! cross-host gateway (wire.rs, `Conn::local`) and this process's clock (watch.rs) send the
//! id's messages there; `rdma_migrate_id` re-points it and moves what already waits for the id
//! on the old channel, as the kernel moves an id's events to its new file at once
//! (`RDMA_USER_CM_CMD_MIGRATE_ID`), whoever reads the old channel, or destroys it.
use std::path::PathBuf;

use crate::state::*;

/// The name of this process's id `token`: `ch-PID-TOKEN.id` (a `ch-PID-` name, so that
/// `channel_pid` knows its process and `new_channel` sweeps it once that process is gone).
fn name_of(token: u64) -> PathBuf {
    cm_dir().join(format!("ch-{}-{token}.id", std::process::id()))
}

/// What the id's peer is told to reply to: the id's own name, made (a link to its channel's
/// socket) the first time; its channel's socket if the name cannot be made or would not fit a
/// socket address (the id then cannot move with its events, as before).
pub fn reply_name(id: &Id, st: &mut St) -> PathBuf {
    let chan = &channel_of(id).path;
    if st.named {
        return name_of(id.token);
    }
    let name = name_of(id.token);
    // `Msg::reply` and `sockaddr_un.sun_path` hold 107 bytes.
    let fits = name.as_os_str().len() < 108;
    if fits && std::os::unix::fs::symlink(chan, &name).is_ok() {
        st.named = true;
        return name;
    }
    chan.clone()
}

/// Where the clock's messages for `id` go (its DREQ timeout, TIMEWAIT_EXIT, a dead peer's
/// GONE): its own name once it has one, so they follow it to whichever channel it is on then;
/// else its channel's socket.
pub fn home(id: &Id, st: &St) -> PathBuf {
    if st.named {
        name_of(id.token)
    } else {
        channel_of(id).path.clone()
    }
}

/// The id goes (`rdma_destroy_id`): its name with it. A message sent there later finds nobody,
/// as one for a destroyed id found nobody on its channel before.
pub fn forget(id: &Id, st: &St) {
    if st.named {
        let _ = std::fs::remove_file(name_of(id.token));
    }
}

/// `rdma_migrate_id`'s move of id `id` (already on `new`) from `old`: its name re-pointed at
/// `new` in one step (from then on what its peer, the gateway and the clock send lands there),
/// and the messages for it that wait on `old` moved to `new`, in their order; the other ids'
/// messages stay on `old`, in theirs. The old channel is read before and after the name moves,
/// so that what came just before the move also follows the id.
///
/// What is not covered: a message for the id that lands on `old` in the moment between the
/// name's move and the second read can be overtaken on `new` by one sent after the move; and
/// another id's message that lands on `old` while this reads it comes before the ones read and
/// put back. Both need two messages within microseconds; the kernel keeps a queue per id and
/// has neither.
pub fn migrate(id: &Id, old: &Channel, new: &Channel) {
    if std::ptr::eq(old, new) {
        return;
    }
    let mut kept = take_for(id.token, old, new);
    if id.st.lock().expect("id").named {
        let _ = replace_link(&new.path.to_string_lossy(), &name_of(id.token));
        kept.extend(take_for(id.token, old, new));
    }
    for m in kept {
        send(old, &old.path, &m);
    }
}

/// Read every message waiting on `old` now (never blocking): those for id `token` are sent on
/// to `new` in order; the others are handed back, in order.
fn take_for(token: u64, old: &Channel, new: &Channel) -> Vec<Msg> {
    use std::os::fd::AsRawFd;
    let mut kept = Vec::new();
    let mut buf = [0u8; size_of::<Msg>()];
    loop {
        // SAFETY: our socket and buffer; MSG_DONTWAIT leaves a blocking channel's mode alone.
        let n = unsafe {
            libc::recv(old.sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT)
        };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        let Ok(n) = usize::try_from(n) else { break };
        let Some(m) = Msg::from_bytes(&buf[..n]) else { continue };
        if m.to == token {
            send(new, &new.path, &m);
        } else {
            kept.push(m);
        }
    }
    kept
}
