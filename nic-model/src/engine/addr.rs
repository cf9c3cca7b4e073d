//! Addressing: how softverbs maps a port's LID to its IPv4 address and back, and where an
//! address vector (`ibv_ah_attr`) points.

use verbs_api::{Error, Result};

/// The IPv4 address softverbs gives the port with this LID (`10.0.x.y`, `x.y` = the LID).
pub fn ip_of_lid(lid: u16) -> [u8; 4] {
    [10, 0, (lid >> 8) as u8, lid as u8]
}

/// The LID of a softverbs port address (inverse of [`ip_of_lid`]; 0 for foreign addresses).
pub fn lid_of_ip(ip: [u8; 4]) -> u16 {
    if ip[0] == 10 && ip[1] == 0 {
        u16::from_be_bytes([ip[2], ip[3]])
    } else {
        0
    }
}

/// Where an address vector (`ibv_ah_attr`) points: the IPv4 address of a softverbs port, from
/// its GID when `is_global`, else from its LID; otherwise what is wrong with it.
pub(super) fn av_destination(av: &verbs_api::AhAttr) -> std::result::Result<[u8; 4], String> {
    if av.is_global {
        av.dgid.to_ipv4().ok_or_else(|| {
            format!("dgid {} is not an IPv4-mapped GID of a softverbs port", av.dgid)
        })
    } else if av.dlid == 0 {
        Err("dlid 0 without a GRH (is_global) names no port".into())
    } else {
        Ok(ip_of_lid(av.dlid))
    }
}

/// `ibv_create_ah`'s checks, for backends whose address handles live outside the engine: the
/// vector must name a softverbs port, on port 1.
pub fn check_ah(attr: &verbs_api::AhAttr) -> Result<()> {
    av_destination(attr).map_err(|why| Error::inval(format!("ibv_create_ah: {why}")))?;
    if attr.port_num > 1 {
        return Err(Error::inval(format!(
            "ibv_create_ah: port_num {} does not exist (the device has port 1)",
            attr.port_num
        )));
    }
    Ok(())
}
