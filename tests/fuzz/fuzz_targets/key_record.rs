//! Key records and chains, as a node or the edge takes them. Any bytes (one record, a chain in
//! its header form, a stored trust) are refused or taken without a panic; and chains of
//! records signed here by a small pool of keys (a root rotation, signing and release records,
//! wrong streams, kinds, thresholds, expiries, bytes flipped or cut) reach every branch of
//! `accept_key_record`. A refused chain leaves the trust as it was; a taken one is handed on
//! (`Trust::chain`) as records the same trust takes again unchanged, and survives storing.
#![no_main]

use std::sync::LazyLock;

use arbitrary::Unstructured;
use hearth_fuzz::take;
use hearth_shared::envelope::{Audience, Draft, Envelope, Kind, MAGIC};
use hearth_shared::keys::{Role, SecretKey};
use hearth_shared::trust::{KeyRecord, RoleKeys, Trust, chain_from_header};
use hearth_shared::wire::{self, stream};
use libfuzzer_sys::fuzz_target;

const NOW: u64 = 1_800_000_000;

/// The keys records are signed with and name: the first is the root a trust starts from.
static KEYS: LazyLock<Vec<SecretKey>> = LazyLock::new(|| {
    [(Role::Root, 1), (Role::Root, 5), (Role::Signing, 2), (Role::Release, 3), (Role::Signing, 6)]
        .into_iter()
        .map(|(role, seed)| SecretKey::from_seed(role, &[seed; 32]))
        .collect()
});

fn fresh() -> Trust {
    Trust::new(RoleKeys::single(KEYS[0].public()))
}

/// Some of the pool's keys, chosen by the bits of a byte.
fn pick(u: &mut Unstructured<'_>) -> Vec<&'static SecretKey> {
    let mask: u8 = take(u);
    KEYS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, key)| key).collect()
}

/// One record built from the input: mostly well formed, sometimes wrong in one respect.
fn record(u: &mut Unstructured<'_>) -> Vec<u8> {
    const ROLES: [Role; 5] = [Role::Root, Role::Signing, Role::Release, Role::Node, Role::Recovery];
    let role = ROLES[usize::from(take::<u8>(u)) % 5];
    let named = pick(u);
    let keys = RoleKeys { keys: named.iter().map(|key| key.public()).collect(), threshold: take::<u8>(u) % 4 };
    let flags: u8 = take(u);
    let version = u64::from(take::<u8>(u) % 5);
    let draft = Draft {
        kind: if flags & 1 != 0 { Kind::Snapshot } else { Kind::KeyRecord },
        stream: if flags & 2 != 0 { stream::keys(ROLES[(usize::from(flags) >> 5) % 3]) } else { stream::keys(role) },
        version,
        epoch: 1,
        issued: NOW - 10,
        expires: if flags & 4 != 0 { NOW - 1 } else { NOW + 3600 },
        audience: if flags & 8 != 0 { Audience::Edge } else { Audience::Any },
        prev: [take::<u8>(u) % 2; 32],
    };
    let body = if flags & 16 != 0 { take::<Vec<u8>>(u) } else { wire::encode(&KeyRecord { role, keys }) };
    let mut bytes = draft.sign(body, &pick(u)).encode();
    // Now and then, damage it: a byte changed, or the end cut off.
    match take::<u8>(u) % 8 {
        0 if !bytes.is_empty() => {
            let at = usize::from(take::<u16>(u)) % bytes.len();
            bytes[at] ^= take::<u8>(u) | 1;
        }
        1 => bytes.truncate(usize::from(take::<u16>(u)) % (bytes.len() + 1)),
        _ => {}
    }
    bytes
}

fn check_taken(trust: &Trust) {
    let chain: Vec<Vec<u8>> = trust.chain().into_iter().map(<[u8]>::to_vec).collect();
    let mut again = trust.clone();
    assert_eq!(again.accept_chain(&chain, NOW), Ok(false), "a trust takes the chain it hands on, unchanged");
    let stored = Trust::from_stored(&wire::encode(trust)).expect("a stored trust reads back");
    assert_eq!(&stored, trust);
}

fn accept(trust: &mut Trust, records: &[Vec<u8>]) {
    let before = trust.clone();
    match trust.accept_chain(records, NOW) {
        Ok(changed) => {
            assert_eq!(changed, *trust != before);
            check_taken(trust);
        }
        Err(_) => assert_eq!(*trust, before, "a refused chain changes nothing"),
    }
}

fuzz_target!(|data: &[u8]| {
    if data.starts_with(&MAGIC) {
        // Bytes as they arrive: one record, then the same bytes as a stored trust.
        let mut trust = fresh();
        let before = trust.clone();
        match trust.accept_key_record(data, NOW) {
            Ok(_) => check_taken(&trust),
            Err(_) => assert_eq!(trust, before),
        }
        let _ = Envelope::decode(data, Kind::KeyRecord.max_len());
        let _ = Trust::from_stored(data);
        return;
    }
    if let Some(chain) = chain_from_header(&String::from_utf8_lossy(data)) {
        accept(&mut fresh(), &chain);
    }
    let _ = Trust::from_stored(data);

    // Chains signed here, taken in up to three pushes by one trust.
    let mut u = Unstructured::new(data);
    let mut trust = fresh();
    for _ in 0..3 {
        let count = u.int_in_range(0..=4).unwrap_or(0);
        let records: Vec<Vec<u8>> = (0..count).map(|_| record(&mut u)).collect();
        accept(&mut trust, &records);
        if u.is_empty() {
            break;
        }
    }
});
