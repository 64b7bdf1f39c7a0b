//! Control's API request bodies (admin and node enrollment) from any JSON: serde refuses or
//! takes it without a panic, whatever the nesting, sizes or escapes. The types are control's
//! own declarations, copied at build time (see build.rs and `hearth_fuzz::control`).
#![no_main]

use hearth_fuzz::control::*;
use libfuzzer_sys::fuzz_target;

fn parse<T: serde::de::DeserializeOwned>(data: &[u8]) -> bool {
    serde_json::from_slice::<T>(data).is_ok()
}

fuzz_target!(|data: &[u8]| {
    let taken = [
        parse::<SetupRequest>(data),
        parse::<LoginRequest>(data),
        parse::<TotpConfirm>(data),
        parse::<TotpDisable>(data),
        parse::<SettingsInput>(data),
        parse::<BulkRequest>(data),
        parse::<ExtendRequest>(data),
        parse::<RolloutRequest>(data),
        parse::<TokenRequest>(data),
        parse::<UserInput>(data),
        parse::<NodeInput>(data),
        parse::<GroupInput>(data),
        parse::<EnrollRequest>(data),
        parse::<EdgeInput>(data),
        parse::<EdgeChange>(data),
        parse::<WebhookInput>(data),
        parse::<AdminInput>(data),
    ];
    // A body any of them takes is JSON in its syntax. Checked with `IgnoredAny`, not `Value`:
    // serde_json skips an unknown field's string without decoding its escapes, so a body with
    // `"extra":"\udc00"` is taken (and the escape never read) though `Value` refuses it.
    if taken.iter().any(|taken| *taken) {
        serde_json::from_slice::<serde::de::IgnoredAny>(data).expect("a body taken is JSON");
    }
});
