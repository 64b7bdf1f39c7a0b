//! User-Agent matching with any operator rules: the first rule that matches decides, a
//! sing-box client never gets a schema older than Hearth writes, and `?format=` never panics.
#![no_main]

use arbitrary::Unstructured;
use hearth_fuzz::take;
use hearth_shared::agent::{RuleTarget, UaRule, Wants, format_override, match_user_agent};
use hearth_shared::render::{Format, SingBoxVersion};
use libfuzzer_sys::fuzz_target;

const TARGETS: [RuleTarget; 6] = [
    RuleTarget::Base64,
    RuleTarget::Mihomo,
    RuleTarget::SingBox,
    RuleTarget::Surge,
    RuleTarget::Loon,
    RuleTarget::Page,
];

fuzz_target!(|data: &[u8]| {
    // The whole input as a User-Agent and a query, with no rules: the common case.
    let text = String::from_utf8_lossy(data);
    check(&text, &[]);
    let _ = format_override(&text);

    // Rules from the input, then the User-Agent.
    let mut u = Unstructured::new(data);
    let count = u.int_in_range(0..=4).unwrap_or(0);
    let rules: Vec<UaRule> = (0..count)
        .map(|_| UaRule { contains: take(&mut u), target: TARGETS[usize::from(take::<u8>(&mut u)) % TARGETS.len()] })
        .collect();
    let user_agent: String = take(&mut u);
    check(&user_agent, &rules);
});

fn check(user_agent: &str, rules: &[UaRule]) {
    let wants = match_user_agent(user_agent, rules);
    if let Wants::Profile(Format::SingBox(version)) = wants {
        assert!(version >= SingBoxVersion::OLDEST);
    }
    let lower = user_agent.to_lowercase();
    let first =
        rules.iter().find(|rule| !rule.contains.is_empty() && contains_ascii_caseless(user_agent, &rule.contains));
    if let Some(rule) = first {
        let agrees = matches!(
            (rule.target, wants),
            (RuleTarget::Base64, Wants::Profile(Format::Base64))
                | (RuleTarget::Mihomo, Wants::Profile(Format::Mihomo))
                | (RuleTarget::SingBox, Wants::Profile(Format::SingBox(_)))
                | (RuleTarget::Surge, Wants::Profile(Format::Surge))
                | (RuleTarget::Loon, Wants::Profile(Format::Loon))
                | (RuleTarget::Page, Wants::Page)
        );
        assert!(agrees, "the first matching rule decides: {rule:?} for {lower:?} gave {wants:?}");
    }
}

/// Whether `haystack` contains `needle`, ASCII letters compared without case (as documented
/// for operator rules).
fn contains_ascii_caseless(haystack: &str, needle: &str) -> bool {
    haystack.to_ascii_lowercase().contains(&needle.to_ascii_lowercase())
}
