//! Opening a device by name routes to the backend the name selects: `softverbsN` to `soft`,
//! `sim:<node>` to `sim`, anything else to `hw`, and a name no registered backend has fails
//! with `ENODEV` saying why. The providers here are stand-ins that record what was opened, so
//! the test sees the routing itself (the real backends have their own tests).

use std::any::Any;
use std::sync::{Arc, Mutex};

use verbs_api::provider::{CompChannelOps, ContextOps, CqOps, PdOps};
use verbs_api::*;

/// A provider with fixed device names that records every open.
struct Stub {
    name: &'static str,
    devices: Vec<&'static str>,
    opened: Mutex<Vec<String>>,
}

impl Stub {
    fn new(name: &'static str, devices: &[&'static str]) -> Arc<Stub> {
        Arc::new(Stub { name, devices: devices.to_vec(), opened: Mutex::new(Vec::new()) })
    }
    fn opened(&self) -> Vec<String> {
        self.opened.lock().expect("not poisoned").clone()
    }
}

impl Provider for Stub {
    fn name(&self) -> &'static str {
        self.name
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(self
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| DeviceInfo {
                name: d.to_string(),
                node_guid: i as u64,
                provider: self.name,
            })
            .collect())
    }
    fn open(&self, name: &str) -> Result<Arc<dyn ContextOps>> {
        self.opened.lock().expect("not poisoned").push(name.to_string());
        Ok(Arc::new(StubContext(name.to_string())))
    }
}

struct StubContext(String);

fn unsupported<T>() -> Result<T> {
    Err(Error::new(Errno::NotSup, "a stub device does nothing"))
}

impl ContextOps for StubContext {
    fn device_name(&self) -> String {
        self.0.clone()
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        unsupported()
    }
    fn query_port(&self, _port_num: u8) -> Result<PortAttr> {
        unsupported()
    }
    fn query_gid(&self, _port_num: u8, _index: u32) -> Result<Gid> {
        unsupported()
    }
    fn alloc_pd(&self) -> Result<Arc<dyn PdOps>> {
        unsupported()
    }
    fn create_comp_channel(&self) -> Result<Arc<dyn CompChannelOps>> {
        unsupported()
    }
    fn create_cq(
        &self,
        _cqe: u32,
        _channel: Option<&CompChannel>,
        _comp_vector: u32,
    ) -> Result<Arc<dyn CqOps>> {
        unsupported()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[test]
fn names_select_backends() {
    assert_eq!(backend_of("softverbs0"), "soft");
    assert_eq!(backend_of("softverbs17"), "soft");
    assert_eq!(backend_of("sim:node0"), "sim");
    assert_eq!(backend_of("mlx5_0"), "hw");
    assert_eq!(backend_of("rxe0"), "hw");
    // Only softverbs followed by a number is a soft device name.
    assert_eq!(backend_of("softverbs"), "hw");
    assert_eq!(backend_of("softverbsX"), "hw");
    assert_eq!(backend_of(""), "hw");
    assert_eq!(hw_provider().is_some(), cfg!(feature = "rdma-sys"));
}

/// One test, because the registry is global to this test binary.
#[test]
fn context_open_routes_by_name_and_explains_failures() {
    let soft = Stub::new("soft", &["softverbs0", "softverbs1"]);
    let sim = Stub::new("sim", &["sim:node0"]);
    // A program's own backend, registered under a name that no device name selects.
    let lab = Stub::new("lab", &["labdev0", "softverbs1"]);
    register_provider(soft.clone());
    register_provider(sim.clone());
    register_provider(lab.clone());

    let ctx = Context::open("softverbs1").expect("softverbs1 opens");
    assert_eq!(ctx.device_name(), "softverbs1");
    // The soft provider opened it, not the other provider that lists the same name.
    assert_eq!(soft.opened(), ["softverbs1"]);
    assert!(lab.opened().is_empty());

    assert_eq!(Context::open("sim:node0").expect("sim:node0 opens").device_name(), "sim:node0");
    assert_eq!(sim.opened(), ["sim:node0"]);

    // A name whose backend is not registered is found in any provider that lists it.
    assert_eq!(Context::open("labdev0").expect("labdev0 opens").device_name(), "labdev0");
    assert_eq!(lab.opened(), ["labdev0"]);

    // The devices of the backend the name selects are listed, and the others.
    let e = Context::open("softverbs7").expect_err("softverbs7 does not exist");
    assert_eq!(e.errno, Errno::NoDev);
    assert_eq!(
        e.message,
        "no soft device named \"softverbs7\" (soft devices: softverbs0, softverbs1; \
         other devices: sim:node0, labdev0, softverbs1)"
    );
    let e = Context::open("sim:node9").expect_err("sim:node9 does not exist");
    assert_eq!(e.errno, Errno::NoDev);
    assert!(e.message.starts_with("no sim device named \"sim:node9\" (sim devices: sim:node0;"));

    // A real device's name, with no hw provider registered, says what is missing.
    let e = Context::open("mlx5_0").expect_err("the hw backend is not registered");
    assert_eq!(e.errno, Errno::NoDev);
    assert!(e.message.starts_with("no RDMA device named \"mlx5_0\": "), "{e}");
    if cfg!(feature = "rdma-sys") {
        assert!(e.message.contains("the hw backend is not registered"), "{e}");
        assert!(e.message.contains("verbs_api::hw::provider()"), "{e}");
    } else {
        assert!(e.message.contains("this build has no hw backend"), "{e}");
        assert!(e.message.contains("--features verbs-api/rdma-sys"), "{e}");
    }
    assert!(
        e.message
            .ends_with("other devices: softverbs0, softverbs1, sim:node0, labdev0, softverbs1"),
        "{e}"
    );

    // find_device answers the same without opening anything.
    let d = find_device("softverbs0").expect("listed");
    assert_eq!((d.name(), d.provider(), d.guid()), ("softverbs0", "soft", 0));
    assert_eq!(soft.opened(), ["softverbs1"]);
    assert_eq!(find_device("nosuch").expect_err("absent").errno, Errno::NoDev);
}
