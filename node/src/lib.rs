//! The parts of `hearth-node` that read what strangers send, as a library: the Hysteria2
//! wire formats ([`proto`]) and Salamander ([`salamander`]), and the GeoIP and GeoSite lists
//! routing rules name ([`geo`], files downloaded from elsewhere). The binary uses them from
//! here; the fuzz targets (`tests/fuzz`) reach them the same way.

pub mod geo;
pub mod proto;
pub mod salamander;
