//! What control reads of an edge's device reports (HWID), and what the edge does with a
//! link's registry. Any bytes are refused or give a report that encodes back to exactly the
//! input, or a registry that opens only within its bounds; and devices admitted one after
//! another (any ids and headers, any limit, deletions) never take a registry past the limit
//! nor out of its bounds, and every registry seals and opens back to itself.
#![no_main]

use arbitrary::Unstructured;
use hearth_fuzz::take;
use hearth_shared::devices::{self, Admission, DeviceReport, Forgotten, HwidPolicy, Registry, Seen};
use hearth_shared::wire::SubToken;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(report) = DeviceReport::decode(data) {
        assert_eq!(report.encode(), data, "one encoding of every report");
    }
    let token = SubToken::from_bytes([7; 32]);
    if let Some(registry) = devices::open(data, &token) {
        assert!(registry.is_well_formed());
    }

    let mut u = Unstructured::new(data);
    let limit: u32 = u.int_in_range(0..=120).unwrap_or(0);
    let mut policy = HwidPolicy { limit, forgotten: Vec::new() };
    let mut registry = Registry::default();
    let mut now: u64 = 1;
    while !u.is_empty() {
        let hwid: String = take(&mut u);
        let model: String = take(&mut u);
        let os: String = take(&mut u);
        let agent: String = take(&mut u);
        now += u64::from(take::<u16>(&mut u));
        if take::<u8>(&mut u) == 0
            && let Some(device) = registry.devices.first()
        {
            policy.forgotten.push(Forgotten { key: device.key, before: now });
        }
        let headers = [("x-hwid", &hwid), ("x-device-model", &model), ("x-device-os", &os), ("user-agent", &agent)];
        let Some(seen) = Seen::from_headers(|name| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str()))
        else {
            continue;
        };
        let before = registry.devices.len();
        let (admission, changed) = registry.admit(&policy, &seen, now);
        let room = (limit as usize).min(devices::MAX_DEVICES);
        assert!(registry.devices.len() <= before.max(room), "never past the limit");
        assert!(registry.is_well_formed());
        match admission {
            Admission::Added => assert!(changed && registry.devices.iter().any(|d| d.key == seen.key)),
            Admission::Known => assert!(registry.devices.iter().any(|d| d.key == seen.key)),
            Admission::Refused => {
                assert!(registry.devices.len() >= room && registry.devices.iter().all(|d| d.key != seen.key))
            }
        }
        let sealed = devices::seal(&registry, &token);
        assert!(sealed.len() <= devices::MAX_SEALED);
        assert_eq!(devices::open(&sealed, &token).as_ref(), Some(&registry));
    }
});
