//! `softverbs run -- PROGRAM ARGS...`: run an unmodified C verbs program on the soft devices,
//! by putting softverbs' `libibverbs.so.1` (the `softverbs-ibverbs` crate, cabi/ibverbs) first
//! on its library search path and handing it the fabric (docs/c.md).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::CliError;

/// What `softverbs run` takes.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The program and its arguments (after `--`), e.g. `-- ibv_rc_pingpong -g 0`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub command: Vec<OsString>,
}

/// The library file cargo builds for `softverbs-ibverbs`.
const LIB_FILE: &str = "libsoftverbs_ibverbs.so";

/// Where the built library is: `SOFTVERBS_IBVERBS_LIB` if set, else beside this executable (as
/// cargo builds both into `target/<profile>/`), or in `deps/` there (where `cargo test` leaves
/// it); the newer of the two.
pub fn find_library() -> Result<PathBuf, CliError> {
    if let Some(p) = std::env::var_os("SOFTVERBS_IBVERBS_LIB") {
        let p = PathBuf::from(p);
        return match p.is_file() {
            true => Ok(p),
            false => Err(CliError::usage(format!(
                "SOFTVERBS_IBVERBS_LIB names {}, which is not a file",
                p.display()
            ))),
        };
    }
    let exe = std::env::current_exe()
        .map_err(|e| CliError::failed(format!("cannot tell where softverbs is: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let lib = dir.join(LIB_FILE);
    let newest = [lib.clone(), dir.join("deps").join(LIB_FILE)]
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max();
    if let Some((_, p)) = newest {
        return Ok(p);
    }
    let release = dir.ends_with("release");
    Err(CliError::failed(format!(
        "softverbs' libibverbs.so.1 is not built: no {} (build it with `cargo build{} -p \
         softverbs-ibverbs`, or name the file in SOFTVERBS_IBVERBS_LIB)",
        lib.display(),
        if release { " --release" } else { "" }
    )))
}

/// A directory holding `libibverbs.so.1` → the built library: `ibverbs/` beside it, made once.
fn library_dir(lib: &Path) -> Result<PathBuf, CliError> {
    let dir = lib.parent().unwrap_or(Path::new(".")).join("ibverbs");
    let link = dir.join("libibverbs.so.1");
    let fail = |e: std::io::Error| {
        CliError::failed(format!("cannot make {} for the library: {e}", link.display()))
    };
    std::fs::create_dir_all(&dir).map_err(fail)?;
    place_link(lib, &link).map_err(fail)?;
    // softverbs' librdmacm.so.1 (cabi/rdmacm), when built beside it: programs that connect by
    // address (rping, perftest -R) then use softverbs' CM instead of the kernel's.
    let cm = lib.with_file_name("libsoftverbs_rdmacm.so");
    if cm.is_file() {
        place_link(&cm, &dir.join("librdmacm.so.1")).map_err(fail)?;
    }
    Ok(dir)
}

/// Makes `link` a symbolic link to `target` unless it is one already. Several processes may
/// do this at once (`labs check`s in parallel, two `softverbs run`s): the new link is made
/// under a name of this call's own and renamed over `link`, which is atomic, so none of them
/// fails with `EEXIST` and a program starting meanwhile never finds the link missing.
fn place_link(target: &Path, link: &Path) -> std::io::Result<()> {
    if std::fs::read_link(link).ok().as_deref() == Some(target) {
        return Ok(());
    }
    let name = link.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = link.with_file_name(format!(".{name}.{}.{n}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, link).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The command `softverbs run` runs: `program args`, its `LD_LIBRARY_PATH` led by the
/// library's directory and `SOFTVERBS_FABRIC` set to `fabric` when one was given (else the
/// program uses the same default as every softverbs process). `labs check` spawns it too.
pub fn command(
    fabric: Option<&Path>,
    program: &std::ffi::OsStr,
    args: &[OsString],
) -> Result<std::process::Command, CliError> {
    let lib = find_library()?;
    let dir = library_dir(&lib)?;
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env("LD_LIBRARY_PATH", path);
    if let Some(f) = fabric {
        cmd.env("SOFTVERBS_FABRIC", f);
    }
    Ok(cmd)
}

/// UCX's switch for the destination-GID check of its UD transport on Ethernet ports.
const UCX_DGID_CHECK: &str = "UCX_UD_VERBS_ETH_DGID_CHECK";

/// `softverbs run`: replace this process with `PROGRAM ARGS...` as [`command`] sets it up.
/// Returns only on failure.
pub fn run(fabric: Option<&Path>, args: &RunArgs) -> Result<(), CliError> {
    let (program, rest) = args.command.split_first().expect("clap requires PROGRAM");
    let mut cmd = command(fabric, program, rest)?;
    show_devices()?;
    // UCX's UD transport drops every datagram whose GRH destination it cannot find among the
    // port's GIDs; it learns where the destination sits in the 40-byte GRH area from the
    // completion's `sl`, which only mlx5 fills with the packet type. Over rxe, and so over
    // softverbs (`sl` 0, as rxe reports it), the IPv4 address is read from the wrong bytes and
    // nothing gets through (docs/decisions.md, "Device nodes and sysfs in a namespace of the
    // program's own"): turn the check off unless the caller chose.
    if std::env::var_os(UCX_DGID_CHECK).is_none() {
        cmd.env(UCX_DGID_CHECK, "n");
    }
    let e = cmd.exec();
    Err(CliError::usage(format!("cannot run {}: {e}", Path::new(program).display())))
}

/// Makes the soft devices visible where programs look for a device (`/dev/infiniband`,
/// `/sys/class/infiniband`: [`super::devnodes`]) for the program about to be executed, unless
/// `SOFTVERBS_NAMESPACE=off`. Where no namespace can be made (user namespaces disabled), the
/// program runs as before, without those entries, after a warning saying what it will miss; a
/// failure half-way into a user namespace is an error (the program would run with its uid
/// unmapped).
fn show_devices() -> Result<(), CliError> {
    match std::env::var("SOFTVERBS_NAMESPACE").as_deref() {
        Ok("off") | Ok("0") => return Ok(()),
        Ok("on") | Ok("1") | Ok("") | Err(std::env::VarError::NotPresent) => {}
        Ok(v) => {
            return Err(CliError::usage(format!("SOFTVERBS_NAMESPACE={v:?}: expected on or off")))
        }
        Err(e) => return Err(CliError::usage(format!("SOFTVERBS_NAMESPACE: {e}"))),
    }
    // A bad environment (SOFTVERBS_DEVICES) is the program's own error to give, when it lists
    // the devices: run it without the entries.
    let Ok(names) = super::devnodes::soft_devices() else { return Ok(()) };
    let netdev = super::devnodes::NetdevGids::from_env();
    let tree = super::devnodes::tree_on(&names, netdev.as_ref());
    if super::devnodes::present(&tree) {
        return Ok(());
    }
    use super::devnodes::EnterError;
    let why = match super::devnodes::enter(&tree) {
        Ok(()) => return Ok(()),
        Err(EnterError::Fatal(e)) => {
            return Err(CliError::failed(format!(
                "cannot show the soft devices to the program: {e}"
            )))
        }
        Err(EnterError::Unavailable(e)) => format!("no namespace of its own can be made ({e})"),
        Err(EnterError::Undone(e)) => e,
    };
    eprintln!(
        "softverbs run: warning: {why}; the program runs without /dev/infiniband and \
         /sys/class/infiniband entries for the soft devices, so UCX (and Open MPI's pml ucx) \
         will not list them and pyverbs skips its RDMA-CM tests (SOFTVERBS_NAMESPACE=off \
         silences this)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::place_link;

    /// Many processes (here threads) setting up the same library link at once all succeed,
    /// and the link ends pointing at the library (a remove-then-create raced into `EEXIST`:
    /// two `labs check`s of one test run once failed so).
    #[test]
    fn the_library_link_is_placed_by_many_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("libsoftverbs_ibverbs.so");
        std::fs::write(&target, b"").expect("target");
        let link = dir.path().join("libibverbs.so.1");
        // An older build's link, so that every thread finds it to replace.
        std::os::unix::fs::symlink(dir.path().join("old.so"), &link).expect("old link");
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| s.spawn(|| (0..50).try_for_each(|_| place_link(&target, &link))))
                .collect();
            for h in handles {
                h.join().expect("thread").expect("placed");
            }
        });
        assert_eq!(std::fs::read_link(&link).expect("a link"), target);
        let left: Vec<_> =
            std::fs::read_dir(dir.path()).expect("dir").map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "no temporary link left behind: {left:?}");
    }
}
