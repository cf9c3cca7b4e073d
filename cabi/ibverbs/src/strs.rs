//! The `ibv_*_str` helpers: the text libibverbs gives each completion status, node type, port
//! state and async event type.

use std::ffi::{c_char, c_int};

/// A NUL-terminated static string for C.
macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

/// `ibv_wc_status_str`.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const S: [&str; 24] = [
        "success\0",
        "local length error\0",
        "local QP operation error\0",
        "local EE context operation error\0",
        "local protection error\0",
        "Work Request Flushed Error\0",
        "memory management operation error\0",
        "bad response error\0",
        "local access error\0",
        "remote invalid request error\0",
        "remote access error\0",
        "remote operation error\0",
        "transport retry counter exceeded\0",
        "RNR retry counter exceeded\0",
        "local RDD violation error\0",
        "remote invalid RD request\0",
        "operation aborted\0",
        "invalid EE context number\0",
        "invalid EE context state\0",
        "fatal error\0",
        "response timeout error\0",
        "general error\0",
        "TM error\0",
        "TM software rendezvous\0",
    ];
    S.get(status as usize).map_or(cstr!("unknown"), |s| s.as_ptr() as *const c_char)
}

/// `ibv_node_type_str`.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    const S: [&str; 7] = [
        "unknown\0",
        "InfiniBand channel adapter\0",
        "InfiniBand switch\0",
        "InfiniBand router\0",
        "iWARP NIC\0",
        "usNIC\0",
        "usNIC UDP\0",
    ];
    S.get(t as usize).map_or(cstr!("unknown"), |s| s.as_ptr() as *const c_char)
}

/// `ibv_port_state_str`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(s: c_int) -> *const c_char {
    const S: [&str; 6] =
        ["no state change (NOP)\0", "down\0", "init\0", "armed\0", "active\0", "active deferred\0"];
    S.get(s as usize).map_or(cstr!("unknown"), |s| s.as_ptr() as *const c_char)
}

/// `ibv_event_type_str`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(e: c_int) -> *const c_char {
    const S: [&str; 20] = [
        "CQ error\0",
        "local work queue catastrophic error\0",
        "invalid request local work queue error\0",
        "local access violation work queue error\0",
        "communication established\0",
        "send queue drained\0",
        "path migrated\0",
        "path migration request error\0",
        "local catastrophic error\0",
        "port active\0",
        "port error\0",
        "LID change\0",
        "P_Key change\0",
        "SM change\0",
        "SRQ catastrophic error\0",
        "SRQ limit reached\0",
        "last WQE reached\0",
        "client reregistration\0",
        "GID table change\0",
        "WQ fatal\0",
    ];
    S.get(e as usize).map_or(cstr!("unknown"), |s| s.as_ptr() as *const c_char)
}
