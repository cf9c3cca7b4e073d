//! `softverbs devices` and `softverbs devinfo`: what RDMA devices this process sees, as
//! `ibv_devices` and `ibv_devinfo` print them.

use std::io::Write;

use verbs_api::{Context, DeviceAttr, Errno, GidEntry, GidType, LinkLayer, PortAttr};

use super::{find_device, gid_ntop, output_error, CliError};

/// Print provider errors as notes on stderr: one provider failing must not hide the others.
/// A closed stderr (`2>&1 | head`) loses the note rather than panicking.
fn note_provider_errors(errors: &[(&'static str, verbs_api::Error)]) {
    for (provider, e) in errors {
        let _ = writeln!(std::io::stderr(), "note: the {provider} provider lists no devices: {e}");
    }
}

/// `softverbs devices`: one line per device with its node GUID, as `ibv_devices` prints them.
pub fn devices(out: &mut dyn Write) -> Result<(), CliError> {
    let (devices, errors) = verbs_api::device_list_detailed();
    note_provider_errors(&errors);
    if devices.is_empty() {
        return Err(no_devices(&errors));
    }
    (|| {
        writeln!(out, "    {:<16}\t   node GUID", "device")?;
        writeln!(out, "    {:<16}\t----------------", "------")?;
        for d in &devices {
            writeln!(out, "    {:<16}\t{:016x}", d.name(), d.guid())?;
        }
        Ok(())
    })()
    .map_err(output_error)
}

fn no_devices(errors: &[(&'static str, verbs_api::Error)]) -> CliError {
    let why: Vec<String> = errors.iter().map(|(p, e)| format!("{p}: {e}")).collect();
    let why = if why.is_empty() { "no provider is registered".to_string() } else { why.join("; ") };
    CliError::usage(format!("no RDMA devices: {why}"))
}

/// Options of `softverbs devinfo` (those of `ibv_devinfo`).
#[derive(clap::Args, Debug, Clone)]
pub struct DevinfoArgs {
    /// Show this device only (default: every device).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,
    /// Show this port only (default: every port).
    #[arg(short = 'i', long = "ib-port", value_name = "PORT",
          value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: Option<u8>,
    /// Only list the names of the devices.
    #[arg(short = 'l', long = "list")]
    pub list: bool,
    /// Also print the device's limits and every port attribute.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
}

/// Values line up where `ibv_devinfo` puts them: device fields (indent 1) at column 40, port
/// fields (indent 3) at column 48, with tab stops every 8 columns.
fn field(out: &mut dyn Write, indent: usize, label: &str, value: &str) -> std::io::Result<()> {
    let target = if indent <= 1 { 40 } else { 48 };
    let end = indent * 8 + label.len();
    let tabs = if end < target { target / 8 - end / 8 } else { 1 };
    writeln!(out, "{}{label}{}{value}", "\t".repeat(indent), "\t".repeat(tabs))
}

/// `ibv_devinfo`'s GUID form: four groups of four hex digits.
fn guid_str(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (guid >> 48) & 0xffff,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

/// `softverbs devinfo`: every device (or `-d DEV`) with its attributes and ports, as
/// `ibv_devinfo` prints them.
pub fn devinfo(args: &DevinfoArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let (devices, errors) = verbs_api::device_list_detailed();
    // With -d, the device's own backend explains a failure; without it, every provider's.
    if args.ib_dev.is_none() || args.list {
        note_provider_errors(&errors);
        if devices.is_empty() {
            return Err(no_devices(&errors));
        }
    }
    if args.list {
        let n = devices.len();
        writeln!(out, "{n} HCA{} found:", if n == 1 { "" } else { "s" }).map_err(output_error)?;
        for d in &devices {
            writeln!(out, "\t{}", d.name()).map_err(output_error)?;
        }
        return Ok(());
    }
    let chosen: Vec<verbs_api::Device> = match &args.ib_dev {
        None => devices,
        Some(name) => vec![find_device(name)?],
    };
    let mut any_soft = false;
    for (i, d) in chosen.iter().enumerate() {
        if i > 0 {
            writeln!(out).map_err(output_error)?;
        }
        let ctx = d.open().map_err(|e| CliError::failed(format!("opening {}: {e}", d.name())))?;
        any_soft |= d.provider() == "soft";
        print_device(&ctx, d.provider(), args, out)?;
    }
    if any_soft && std::env::var_os("SOFTVERBS_NETDEV").is_some_and(|v| !v.is_empty()) {
        writeln!(
            out,
            "\n# softverbs: the ports are RoCE v2 devices on network interface $SOFTVERBS_NETDEV: \
             their GIDs are its addresses\n# (index 1 its IPv4 address), as rxe's on it would be."
        )
        .map_err(output_error)?;
    } else if any_soft {
        writeln!(
            out,
            "\n# softverbs: a port gets its slot N on the fabric, and with it its IPv4 address \
             10.0.0.N and GIDs, when a process opens\n# the device; the GIDs above (-v) are what \
             this process got. Every process has its own ports and addresses."
        )
        .map_err(output_error)?;
    }
    Ok(())
}

fn print_device(
    ctx: &Context,
    provider: &str,
    args: &DevinfoArgs,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let name = ctx.device_name();
    let attr = ctx
        .query_device()
        .map_err(|e| CliError::failed(format!("ibv_query_device on {name}: {e}")))?;
    let ports: Vec<u8> = match args.ib_port {
        Some(p) if p > attr.phys_port_cnt => {
            return Err(CliError::usage(format!(
                "{name} has no port {p} (phys_port_cnt {})",
                attr.phys_port_cnt
            )))
        }
        Some(p) => vec![p],
        None => (1..=attr.phys_port_cnt).collect(),
    };
    let netdev = std::env::var("SOFTVERBS_NETDEV").ok().filter(|v| !v.is_empty());
    let transport = if provider == "soft" {
        match netdev {
            Some(iface) => format!("softverbs (RoCEv2 over UDP on {iface})"),
            None => "softverbs (RoCEv2 over shared memory)".to_string(),
        }
    } else {
        "InfiniBand (0)".to_string()
    };
    (|| {
        writeln!(out, "hca_id:\t{name}")?;
        field(out, 1, "transport:", &transport)?;
        if !attr.fw_ver.is_empty() {
            field(out, 1, "fw_ver:", &attr.fw_ver)?;
        }
        field(out, 1, "node_guid:", &guid_str(attr.node_guid))?;
        field(out, 1, "sys_image_guid:", &guid_str(attr.sys_image_guid))?;
        field(out, 1, "vendor_id:", &format!("0x{:04x}", attr.vendor_id))?;
        field(out, 1, "vendor_part_id:", &attr.vendor_part_id.to_string())?;
        field(out, 1, "hw_ver:", &format!("0x{:X}", attr.hw_ver))?;
        field(out, 1, "phys_port_cnt:", &attr.phys_port_cnt.to_string())?;
        if args.verbose {
            print_caps(&attr, out)?;
        }
        Ok(())
    })()
    .map_err(output_error)?;
    for port in ports {
        let pa = ctx
            .query_port(port)
            .map_err(|e| CliError::failed(format!("ibv_query_port on {name} port {port}: {e}")))?;
        // The GID table with -v, as `ibv_devinfo -v` prints it: every entry that holds a GID
        // (`ibv_query_gid_ex`; an empty one is ENODATA and left out).
        let mut gids = Vec::new();
        for index in 0..if args.verbose { pa.gid_tbl_len } else { 0 } {
            match ctx.query_gid_entry(port, index) {
                Ok(entry) => gids.push(entry),
                Err(e) if e.errno == Errno::NoData => {}
                // A provider without ibv_query_gid_ex: the GID alone, untyped.
                Err(e) if e.errno == Errno::NotSup => {
                    let gid = ctx.query_gid(port, index).map_err(|e| {
                        CliError::failed(format!(
                            "ibv_query_gid on {name} port {port} index {index}: {e}"
                        ))
                    })?;
                    if !gid.is_zero() {
                        gids.push(GidEntry { gid, gid_index: index, ..GidEntry::default() });
                    }
                }
                Err(e) => {
                    return Err(CliError::failed(format!(
                        "ibv_query_gid_ex on {name} port {port} index {index}: {e}"
                    )))
                }
            }
        }
        print_port(port, &pa, &gids, args.verbose, out).map_err(output_error)?;
    }
    Ok(())
}

fn print_caps(a: &DeviceAttr, out: &mut dyn Write) -> std::io::Result<()> {
    field(out, 1, "max_mr_size:", &format!("0x{:x}", a.max_mr_size))?;
    field(out, 1, "max_qp:", &a.max_qp.to_string())?;
    field(out, 1, "max_qp_wr:", &a.max_qp_wr.to_string())?;
    field(out, 1, "max_sge:", &a.max_sge.to_string())?;
    field(out, 1, "max_cq:", &a.max_cq.to_string())?;
    field(out, 1, "max_cqe:", &a.max_cqe.to_string())?;
    field(out, 1, "max_mr:", &a.max_mr.to_string())?;
    field(out, 1, "max_pd:", &a.max_pd.to_string())?;
    field(out, 1, "max_qp_rd_atom:", &a.max_qp_rd_atom.to_string())?;
    field(out, 1, "max_qp_init_rd_atom:", &a.max_qp_init_rd_atom.to_string())?;
    let atomic = if a.atomic_hca { "ATOMIC_HCA (1)" } else { "ATOMIC_NONE (0)" };
    field(out, 1, "atomic_cap:", atomic)?;
    field(out, 1, "max_srq:", &a.max_srq.to_string())?;
    field(out, 1, "max_srq_wr:", &a.max_srq_wr.to_string())?;
    field(out, 1, "max_srq_sge:", &a.max_srq_sge.to_string())?;
    field(out, 1, "max_ah:", &a.max_ah.to_string())?;
    field(out, 1, "max_pkeys:", &a.max_pkeys.to_string())?;
    field(out, 1, "max_inline_data:", &a.max_inline_data.to_string())?;
    field(out, 1, "max_msg_sz:", &format!("0x{:x}", a.max_msg_sz))
}

fn width_str(w: u8) -> String {
    match w {
        1 => "1X (1)".into(),
        2 => "4X (2)".into(),
        4 => "8X (4)".into(),
        8 => "12X (8)".into(),
        16 => "2X (16)".into(),
        _ => format!("invalid width ({w})"),
    }
}

fn speed_str(s: u8) -> String {
    let gbps = match s {
        1 => "2.5",
        2 => "5.0",
        4 | 8 => "10.0",
        16 => "14.0",
        32 => "25.0",
        64 => "50.0",
        128 => "100.0",
        _ => return format!("invalid speed ({s})"),
    };
    format!("{gbps} Gbps ({s})")
}

fn phys_state_str(s: u8) -> String {
    let name = match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    };
    format!("{name} ({s})")
}

fn print_port(
    port: u8,
    pa: &PortAttr,
    gids: &[GidEntry],
    verbose: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    writeln!(out, "\t\tport:\t{port}")?;
    field(out, 3, "state:", &format!("{} ({})", pa.state.as_str(), pa.state as u32))?;
    field(out, 3, "max_mtu:", &format!("{} ({})", pa.max_mtu.bytes(), pa.max_mtu as u32))?;
    field(out, 3, "active_mtu:", &format!("{} ({})", pa.active_mtu.bytes(), pa.active_mtu as u32))?;
    field(out, 3, "sm_lid:", &pa.sm_lid.to_string())?;
    field(out, 3, "port_lid:", &pa.lid.to_string())?;
    field(out, 3, "port_lmc:", &format!("0x{:02x}", pa.lmc))?;
    let link = match pa.link_layer {
        LinkLayer::InfiniBand => "InfiniBand",
        LinkLayer::Ethernet => "Ethernet",
    };
    field(out, 3, "link_layer:", link)?;
    if verbose {
        field(out, 3, "max_msg_sz:", &format!("0x{:x}", pa.max_msg_sz))?;
        field(out, 3, "port_cap_flags:", &format!("0x{:08x}", pa.port_cap_flags))?;
        field(out, 3, "pkey_tbl_len:", &pa.pkey_tbl_len.to_string())?;
        field(out, 3, "gid_tbl_len:", &pa.gid_tbl_len.to_string())?;
        field(out, 3, "active_width:", &width_str(pa.active_width))?;
        field(out, 3, "active_speed:", &speed_str(pa.active_speed))?;
        field(out, 3, "phys_state:", &phys_state_str(pa.phys_state))?;
    }
    for entry in gids {
        field(out, 3, &format!("GID[{:3}]:", entry.gid_index), &gid_line(entry, pa.link_layer))?;
    }
    Ok(())
}

/// A GID table entry as `ibv_devinfo -v` prints it: a RoCE v2 GID as an IP address
/// (`inet_ntop`: `fe80::aff:fe00:3`, `::ffff:10.0.0.3`), any other as eight groups of four
/// hex digits; on an Ethernet port followed by its type (`, RoCE v2`).
fn gid_line(entry: &GidEntry, link_layer: LinkLayer) -> String {
    let gid = if entry.gid_type == GidType::RoceV2 {
        gid_ntop(&entry.gid)
    } else {
        entry.gid.to_string()
    };
    match link_layer {
        LinkLayer::Ethernet => format!("{gid}, {}", entry.gid_type.as_str()),
        LinkLayer::InfiniBand => gid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs_api::Gid;

    #[test]
    fn fields_line_up_as_ibv_devinfo_does() {
        let mut v = Vec::new();
        field(&mut v, 1, "transport:", "x").unwrap();
        field(&mut v, 1, "fw_ver:", "x").unwrap();
        field(&mut v, 1, "max_qp_init_rd_atom:", "x").unwrap();
        field(&mut v, 3, "state:", "x").unwrap();
        field(&mut v, 3, "max_mtu:", "x").unwrap();
        field(&mut v, 3, "GID[  0]:", "x").unwrap();
        let s = String::from_utf8(v).unwrap();
        assert_eq!(
            s,
            "\ttransport:\t\t\tx\n\tfw_ver:\t\t\t\tx\n\tmax_qp_init_rd_atom:\t\tx\n\
             \t\t\tstate:\t\t\tx\n\t\t\tmax_mtu:\t\tx\n\t\t\tGID[  0]:\t\tx\n"
        );
    }

    #[test]
    fn guid_and_gid_forms() {
        assert_eq!(guid_str(0x0200_5eff_fe00_0001), "0200:5eff:fe00:0001");
        assert_eq!(gid_ntop(&Gid([0; 16])), "::");
        assert_eq!(gid_ntop(&Gid::from_ipv4([10, 0, 0, 1])), "::ffff:10.0.0.1");
    }

    #[test]
    fn gid_lines_are_ibv_devinfos() {
        let v2 = GidEntry {
            gid: Gid::link_local(0x0000_0aff_fe00_0003),
            gid_type: GidType::RoceV2,
            ..GidEntry::default()
        };
        assert_eq!(gid_line(&v2, LinkLayer::Ethernet), "fe80::aff:fe00:3, RoCE v2");
        let v1 = GidEntry { gid_type: GidType::RoceV1, ..v2 };
        assert_eq!(
            gid_line(&v1, LinkLayer::Ethernet),
            "fe80:0000:0000:0000:0000:0aff:fe00:0003, RoCE v1"
        );
        let ib = GidEntry { gid_type: GidType::Ib, ..v2 };
        assert_eq!(gid_line(&ib, LinkLayer::InfiniBand), "fe80:0000:0000:0000:0000:0aff:fe00:0003");
    }
}
