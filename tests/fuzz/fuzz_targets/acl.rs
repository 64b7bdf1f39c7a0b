//! Routing rules in the official server's ACL syntax: any text parses or is refused with a
//! line inside it, within the size limits; a parsed set matches any request without a panic,
//! and the first rule that matches is the one routing picks, by the list and by the index.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arbitrary::Unstructured;
use hearth_fuzz::take;
use hearth_shared::acl::{self, NoGeo, Proto, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let text: String = take(&mut u);
    let rules = match acl::parse(&text, &["warp", "home"]) {
        Ok(rules) => rules,
        Err(error) => {
            assert!(error.line <= text.lines().count(), "{error} of {} lines", text.lines().count());
            return;
        }
    };
    assert!(rules.len() <= acl::MAX_RULES);
    let lines = text.lines().count();
    assert!(rules.windows(2).all(|pair| pair[0].line < pair[1].line) && rules.iter().all(|r| r.line <= lines));
    let matcher = acl::Matcher::new(rules.clone());
    // Requests from the rest of the input.
    for _ in 0..4 {
        let domain: Option<String> = take(&mut u);
        let domain = domain.map(|d| d.to_lowercase());
        let ips: Vec<IpAddr> = (0..u.int_in_range(0..=2).unwrap_or(0))
            .map(|_| match take::<bool>(&mut u) {
                true => IpAddr::V4(Ipv4Addr::from(take::<u32>(&mut u))),
                false => IpAddr::V6(Ipv6Addr::from(take::<u128>(&mut u))),
            })
            .collect();
        let proto = if take::<bool>(&mut u) { Proto::Tcp } else { Proto::Udp };
        let request = Request { domain: domain.as_deref(), ips: &ips, proto, port: take(&mut u) };
        let first = rules.iter().position(|rule| rule.matches(&request, &NoGeo));
        let routed = acl::route(&rules, &request, &NoGeo).map(|rule| rule.line);
        assert_eq!(routed, first.map(|i| rules[i].line));
        // The index picks the rule the list does.
        assert_eq!(matcher.route(&request, &NoGeo).map(|rule| rule.line), routed, "{request:?}");
    }
});
