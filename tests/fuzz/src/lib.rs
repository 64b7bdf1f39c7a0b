//! What the fuzz targets share: inputs built from the fuzzer's bytes, and the request bodies
//! of control's APIs.

use arbitrary::{Arbitrary, Unstructured};
use hearth_shared::wire::{Endpoint, PortRange, Profile, ResetStrategy, Snapshot, Status};

/// Control's admin and node API request bodies, copied from control's sources at build time
/// (see build.rs): the same fields, types and serde options.
#[allow(dead_code, missing_docs)]
pub mod control {
    use hearth_shared::{Rate, RateError};
    use serde::{Deserialize, Serialize};

    include!(concat!(env!("OUT_DIR"), "/control_bodies.rs"));
}

/// Runs a future that never waits on anything but its input (a reader over a slice) to its end.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime =
            tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// A value of an enum that postcard numbers `0..`, from one byte of input (any variant there
/// is, without listing them here), or `fallback` when the number is past the last variant.
pub fn variant<T: serde::de::DeserializeOwned>(u: &mut Unstructured<'_>, fallback: T) -> T {
    let index = u.arbitrary::<u8>().unwrap_or(0) % 16;
    postcard::from_bytes(&[index]).unwrap_or(fallback)
}

fn endpoint(u: &mut Unstructured<'_>) -> arbitrary::Result<Endpoint> {
    Ok(Endpoint {
        name: u.arbitrary()?,
        host: u.arbitrary()?,
        port: u.arbitrary()?,
        hop: if u.arbitrary()? { Some(PortRange { start: u.arbitrary()?, end: u.arbitrary()? }) } else { None },
        sni: u.arbitrary()?,
        cert_sha256: u.arbitrary()?,
        spki_sha256: u.arbitrary()?,
        insecure: u.arbitrary()?,
        obfs: u.arbitrary()?,
        identity: hearth_shared::wire::Identity {
            certificate: u.arbitrary()?,
            name: u.arbitrary()?,
            unverified: u.arbitrary()?,
        },
    })
}

/// A snapshot: the postcard encoding Hearth seals when the input is one (the corpus holds real
/// ones), else one built field by field from the input.
pub fn snapshot(data: &[u8]) -> Snapshot {
    if let Ok(snapshot) = hearth_shared::wire::decode_authenticated::<Snapshot>(data, "snapshot") {
        return snapshot;
    }
    let mut u = Unstructured::new(data);
    let status = variant(&mut u, Status::Active);
    let reset = variant(&mut u, ResetStrategy::Never);
    let built = (|| -> arbitrary::Result<Snapshot> {
        let count = u.int_in_range(0..=8)?;
        let mut endpoints = Vec::with_capacity(count);
        for _ in 0..count {
            endpoints.push(endpoint(&mut u)?);
        }
        Ok(Snapshot {
            user: u.arbitrary()?,
            name: u.arbitrary()?,
            status,
            used_up: u.arbitrary()?,
            used_down: u.arbitrary()?,
            quota: u.arbitrary()?,
            expires_at: u.arbitrary()?,
            reset,
            credential: u.arbitrary()?,
            endpoints,
            profile: Profile {
                title: u.arbitrary()?,
                announce: u.arbitrary()?,
                support_url: u.arbitrary()?,
                web_page_url: u.arbitrary()?,
                update_interval_hours: u.arbitrary()?,
            },
            hwid: Default::default(),
            alias: None,
            telegram: None,
        })
    })();
    built.unwrap_or_else(|_| empty_snapshot(status, reset))
}

fn empty_snapshot(status: Status, reset: ResetStrategy) -> Snapshot {
    Snapshot {
        user: 0,
        name: String::new(),
        status,
        used_up: 0,
        used_down: 0,
        quota: 0,
        expires_at: 0,
        reset,
        credential: String::new(),
        endpoints: Vec::new(),
        profile: Profile {
            title: String::new(),
            announce: None,
            support_url: None,
            web_page_url: None,
            update_interval_hours: 0,
        },
        hwid: Default::default(),
        alias: None,
        telegram: None,
    }
}

/// Any value `arbitrary` can make, or its default when the input runs out first.
pub fn take<'a, T: Arbitrary<'a> + Default>(u: &mut Unstructured<'a>) -> T {
    u.arbitrary().unwrap_or_default()
}
