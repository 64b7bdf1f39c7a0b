//! Credential sets (every format: with and without speed limits, edges, device limits, rule
//! sets and sealed routing): the strict decoder on any bytes, and diff/apply between two sets built from
//! the input (a diff takes the old set to the new one, and does not apply to a set it was not
//! made from unless that set gives the same result).
#![no_main]

use arbitrary::Unstructured;
use hearth_fuzz::take;
use hearth_shared::wire::{CredEntry, CredentialSet, EdgeAddress, SpeedLimit};
use libfuzzer_sys::fuzz_target;

/// A set from the input: few distinct users and hashes, so that two sets share users.
fn set(u: &mut Unstructured<'_>) -> CredentialSet {
    let node = take(u);
    let count = u.int_in_range(0..=12).unwrap_or(0);
    let mut users: Vec<CredEntry> = (0..count)
        .map(|_| {
            let extra = take::<u8>(u);
            CredEntry {
                limit: SpeedLimit { up: u64::from(take::<u8>(u) % 3), down: u64::from(take::<u8>(u) % 3) },
                devices: (extra & 1 != 0).then_some(u32::from(extra >> 6)),
                kick: u32::from(extra >> 1 & 1),
                guard: hearth_shared::wire::Guard { torrent: extra & 4 != 0, smtp: extra & 8 != 0 },
                rules: u16::from(extra >> 4 & 1) * 7,
                ..CredEntry::new(u64::from(take::<u8>(u) % 16), [take::<u8>(u) % 3; 32])
            }
        })
        .collect();
    users.sort_by_key(|entry| entry.user);
    users.dedup_by_key(|entry| entry.user);
    let edges = (0..take::<u8>(u) % 3)
        .map(|i| EdgeAddress { url: format!("https://edge{i}.example"), api_prefix: "p".repeat(16 + usize::from(i)) })
        .collect();
    let policy = if take::<u8>(u) % 2 == 0 {
        hearth_shared::wire::DevicePolicy::Refuse
    } else {
        hearth_shared::wire::DevicePolicy::DropOldest
    };
    let routing = (take::<u8>(u) % 3 == 0).then(|| vec![take::<u8>(u); usize::from(take::<u8>(u) % 40)]);
    CredentialSet::new(node, users)
        .expect("users made unique")
        .with_edges(edges)
        .expect("well-formed edges")
        .with_policy(policy)
        .with_routing(routing)
        .expect("small routing")
}

fuzz_target!(|data: &[u8]| {
    if let Ok(decoded) = CredentialSet::decode(data) {
        assert_eq!(decoded.encode(), data);
        assert!(decoded.users().windows(2).all(|pair| pair[0].user < pair[1].user));
        let rebuilt = CredentialSet::new(decoded.node, decoded.users().to_vec())
            .and_then(|set| set.with_edges(decoded.edges().to_vec()))
            .map(|set| set.with_policy(decoded.policy()))
            .and_then(|set| set.with_routing(decoded.routing().map(<[u8]>::to_vec)));
        assert_eq!(rebuilt.as_ref(), Ok(&decoded));
        assert!(decoded.diff(&decoded).is_empty());
    }

    let mut u = Unstructured::new(data);
    let (old, new, other) = (set(&mut u), set(&mut u), set(&mut u));
    // A diff carries users: the node's edges, device policy and routing stay as they were.
    let new = CredentialSet::new(old.node, new.users().to_vec())
        .and_then(|set| set.with_edges(old.edges().to_vec()))
        .and_then(|set| set.with_routing(old.routing().map(<[u8]>::to_vec)))
        .expect("sorted and unique")
        .with_policy(old.policy());
    let diff = old.diff(&new);
    assert_eq!(old.apply(&diff).as_ref(), Ok(&new), "a diff takes the old set to the new one");
    assert_eq!(diff.is_empty(), old == new);
    assert_eq!(CredentialSet::decode(&new.encode()).as_ref(), Ok(&new));
    if let Ok(applied) = other.apply(&diff) {
        assert!(applied.users().windows(2).all(|pair| pair[0].user < pair[1].user));
    }
});
