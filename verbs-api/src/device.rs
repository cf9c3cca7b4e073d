//! Finding and opening devices by name: the registry of providers, `ibv_get_device_list`, and
//! the one place that maps a device name to its backend (`softverbs<N>` to `soft`, `sim:<node>`
//! to `sim`, any other name to `hw`).
//!
//! The `soft` and `sim` backends live in other crates (`nic-model`, `softverbs-sim`) and are
//! registered by the program with [`register_provider`]; the `hw` backend is compiled into this
//! crate with the `rdma-sys` feature and is reached only through [`hw_provider`].

use std::fmt;
use std::sync::{Arc, RwLock};

use crate::error::{Errno, Error, Result};
use crate::object::Context;
use crate::provider::{DeviceInfo, Provider};

static PROVIDERS: RwLock<Vec<Arc<dyn Provider>>> = RwLock::new(Vec::new());

/// Register a backend. Registering a provider name twice keeps the first.
pub fn register_provider(p: Arc<dyn Provider>) {
    let mut list = PROVIDERS.write().unwrap_or_else(|e| e.into_inner());
    if !list.iter().any(|q| q.name() == p.name()) {
        list.push(p);
    }
}

/// The registered providers, in registration order.
pub fn providers() -> Vec<Arc<dyn Provider>> {
    PROVIDERS.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The backend a device name selects, as [`crate::Context::open`] routes it: `softverbs<N>`
/// is a `soft` device, `sim:<node>` a `sim` device, and any other name (`mlx5_0`, `rxe0`, ...)
/// a libibverbs device of the `hw` backend.
pub fn backend_of(name: &str) -> &'static str {
    let soft_index = name.strip_prefix("softverbs");
    if soft_index.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
        "soft"
    } else if name.starts_with("sim:") {
        "sim"
    } else {
        "hw"
    }
}

/// The `hw` provider (libibverbs) if this build of `verbs-api` has the `rdma-sys` feature,
/// else `None`. Lets a program register real devices without `cfg` of its own: a feature
/// enabled as `--features verbs-api/rdma-sys` is visible here but not in the program's crate.
pub fn hw_provider() -> Option<Arc<dyn Provider>> {
    #[cfg(feature = "rdma-sys")]
    return Some(crate::hw::provider());
    #[cfg(not(feature = "rdma-sys"))]
    None
}

/// A device on the list (`struct ibv_device`).
#[derive(Clone)]
pub struct Device {
    info: DeviceInfo,
    provider: Arc<dyn Provider>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("info", &self.info).finish()
    }
}

impl Device {
    /// `ibv_get_device_name`.
    pub fn name(&self) -> &str {
        &self.info.name
    }
    /// `ibv_get_device_guid`.
    pub fn guid(&self) -> u64 {
        self.info.node_guid
    }
    /// The backend that owns it (`soft`, `sim`, `hw`).
    pub fn provider(&self) -> &'static str {
        self.info.provider
    }
    /// `ibv_open_device`.
    pub fn open(&self) -> Result<Context> {
        Ok(Context::from_ops(self.provider.open(&self.info.name)?))
    }
}

/// The devices of every registered provider, and the errors of providers that could list none.
pub fn device_list_detailed() -> (Vec<Device>, Vec<(&'static str, Error)>) {
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    for p in providers() {
        match p.devices() {
            Ok(list) => {
                devices.extend(list.into_iter().map(|info| Device { info, provider: p.clone() }))
            }
            Err(e) => errors.push((p.name(), e)),
        }
    }
    (devices, errors)
}

/// `ibv_get_device_list`: every device of every registered provider. Fails only if there are none,
/// with the providers' reasons ("no RDMA devices: ...").
pub fn device_list() -> Result<Vec<Device>> {
    let (devices, errors) = device_list_detailed();
    if devices.is_empty() {
        let why: Vec<String> = errors.iter().map(|(p, e)| format!("{p}: {e}")).collect();
        let why =
            if why.is_empty() { "no provider is registered".to_string() } else { why.join("; ") };
        return Err(Error::new(Errno::NoDev, format!("no RDMA devices: {why}")));
    }
    Ok(devices)
}

/// Find a device by name among the registered providers, without opening it
/// (`ibv_get_device_list` and a match on `ibv_get_device_name`). The name selects the backend
/// ([`backend_of`]): `softverbs0` is looked up in the `soft` provider, `sim:node0` in `sim`, any
/// other name in `hw`; a provider registered under another name is searched last.
///
/// `ENODEV` when there is no such device, with a message that names it and says why: the
/// devices its backend has, or the backend's own reason for having none (for `hw` on a machine
/// without RDMA: "no RDMA devices: " and libibverbs' reason), or that its backend is not
/// registered or not built.
pub fn find_device(name: &str) -> Result<Device> {
    let providers = providers();
    let backend = backend_of(name);
    if let Some(p) = providers.iter().find(|p| p.name() == backend) {
        let listed = p.devices().map_err(|e| {
            let others = other_devices(&providers, backend);
            Error::new(e.errno, format!("{} (looking for {name:?}{others})", e.message))
        })?;
        if let Some(info) = listed.iter().find(|d| d.name == name) {
            return Ok(Device { info: info.clone(), provider: p.clone() });
        }
        let known: Vec<&str> = listed.iter().map(|d| d.name.as_str()).collect();
        return Err(Error::new(
            Errno::NoDev,
            format!(
                "no {backend} device named {name:?} ({backend} devices: {}{})",
                known.join(", "),
                other_devices(&providers, backend)
            ),
        ));
    }
    // A provider of another name (a program's own backend) may have it.
    for p in &providers {
        if let Ok(listed) = p.devices() {
            if let Some(info) = listed.into_iter().find(|d| d.name == name) {
                return Ok(Device { info, provider: p.clone() });
            }
        }
    }
    let why = match backend {
        "soft" => {
            "the soft backend is not registered (register nic_model::soft::Soft with \
             verbs_api::register_provider)"
        }
        "sim" => {
            "the sim backend is not registered (register the provider of a SimWorld with \
             verbs_api::register_provider)"
        }
        _ if hw_provider().is_none() => {
            "this build has no hw backend for real RDMA devices \
             (build with --features verbs-api/rdma-sys)"
        }
        _ => {
            "the hw backend is not registered (register verbs_api::hw::provider() with \
             verbs_api::register_provider)"
        }
    };
    let others = other_devices(&providers, backend);
    Err(Error::new(Errno::NoDev, format!("no RDMA device named {name:?}: {why}{others}")))
}

/// "; other devices: a, b" listing the devices of the providers other than `backend`, or nothing.
fn other_devices(providers: &[Arc<dyn Provider>], backend: &str) -> String {
    let names: Vec<String> = providers
        .iter()
        .filter(|p| p.name() != backend)
        .filter_map(|p| p.devices().ok())
        .flatten()
        .map(|d| d.name)
        .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!("; other devices: {}", names.join(", "))
    }
}

// Here rather than beside `Context` in `object/context.rs`: opening by name is the registry's
// business, and the object rooms stand below this one.
impl Context {
    /// Open a device by name on whichever backend the name selects (`ibv_get_device_list` +
    /// `ibv_open_device`): `softverbs0`, `sim:node0`, `mlx5_0`. This is the one way to open a
    /// device by name; the providers must be registered first ([`register_provider`]).
    /// `ENODEV` when there is no such device, explained as by [`find_device`].
    pub fn open(name: &str) -> Result<Context> {
        find_device(name)?.open()
    }
}
