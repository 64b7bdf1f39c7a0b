//! A rule set indexed for matching ([`Matcher`]), so a new connection's route costs a handful
//! of lookups however many rules its set has.

use std::net::IpAddr;

use super::rule::{Address, Geo, Request, Rule};

/// A rule set indexed for matching: the rule [`super::route`] would pick, without trying every rule
/// in turn. Exact domains and suffixes (and `*.name` wildcards, a suffix with a label before
/// it) are looked up by each suffix of the request's domain; addresses and networks by the
/// request's addresses under each prefix length the set uses; the rest (other wildcards,
/// GeoIP, GeoSite, `all`) are tried in order, only up to the best rule found so far. A
/// connection's routing costs a handful of hash lookups at 1,000 rules, not 1,000 tries.
#[derive(Clone, Debug, Default)]
pub struct Matcher {
    rules: Vec<Rule>,
    /// Exact domains: the rules (by index, ascending).
    exact: std::collections::HashMap<String, Vec<u32>>,
    /// `suffix:` domains, and `*.name` wildcards (keyed by `.name`, which needs a label
    /// before it).
    suffix: std::collections::HashMap<String, Vec<u32>>,
    /// IPv4 networks by prefix length (addresses are /32).
    v4: Vec<(u8, std::collections::HashMap<u32, Vec<u32>>)>,
    /// IPv6 networks by prefix length (addresses are /128).
    v6: Vec<(u8, std::collections::HashMap<u128, Vec<u32>>)>,
    /// Other wildcards, by a label every domain they match has whole (`*.doubleclick.*`:
    /// `doubleclick`).
    labels: std::collections::HashMap<String, Vec<u32>>,
    /// Every other rule, ascending.
    rest: Vec<u32>,
}

/// A label that every domain `pattern` matches has whole, if the pattern names one: a piece
/// between two dots without a `*`, or its first label (last label) when it neither starts
/// (ends) with `*`. The longest such label, the rarest in practice.
fn required_label(pattern: &str) -> Option<&str> {
    let labels: Vec<&str> = pattern.split('.').collect();
    let last = labels.len().saturating_sub(1);
    labels
        .iter()
        .enumerate()
        .filter(|(i, label)| {
            let whole = !label.is_empty() && !label.contains('*');
            // Inside: dots on both sides. First or last: the pattern's own edge.
            whole && (*i > 0 || !pattern.starts_with('*')) && (*i < last || !pattern.ends_with('*'))
        })
        .map(|(_, label)| *label)
        .max_by_key(|label| label.len())
}

/// The map of networks of prefix length `bits` in `by_length`, made when the set first uses it.
fn slot<K>(
    by_length: &mut Vec<(u8, std::collections::HashMap<K, Vec<u32>>)>,
    bits: u8,
) -> &mut std::collections::HashMap<K, Vec<u32>> {
    let at = match by_length.iter().position(|(b, _)| *b == bits) {
        Some(at) => at,
        None => {
            by_length.push((bits, std::collections::HashMap::new()));
            by_length.len() - 1
        }
    };
    &mut by_length[at].1
}

fn mask4(ip: u32, bits: u8) -> u32 {
    ip & u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0)
}

fn mask6(ip: u128, bits: u8) -> u128 {
    ip & u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0)
}

impl Matcher {
    /// Indexes `rules` (as [`parse`] gives them, in order).
    pub fn new(rules: Vec<Rule>) -> Matcher {
        let mut matcher = Matcher::default();
        for (index, rule) in rules.iter().enumerate() {
            let index = index as u32;
            let mut network = |ip: IpAddr, bits: u8| match ip {
                IpAddr::V4(v4) => {
                    slot(&mut matcher.v4, bits).entry(mask4(u32::from(v4), bits)).or_default().push(index)
                }
                IpAddr::V6(v6) => {
                    slot(&mut matcher.v6, bits).entry(mask6(u128::from(v6), bits)).or_default().push(index)
                }
            };
            match &rule.address {
                Address::Domain(name) => matcher.exact.entry(name.clone()).or_default().push(index),
                Address::Suffix(name) => matcher.suffix.entry(name.clone()).or_default().push(index),
                Address::Wildcard(pattern)
                    if pattern.starts_with("*.") && !pattern[2..].contains('*') && pattern.len() > 2 =>
                {
                    matcher.suffix.entry(pattern[1..].to_owned()).or_default().push(index)
                }
                Address::Wildcard(pattern) if required_label(pattern).is_some() => {
                    let label = required_label(pattern).expect("checked").to_owned();
                    matcher.labels.entry(label).or_default().push(index)
                }
                Address::Ip(ip) => network(*ip, if ip.is_ipv4() { 32 } else { 128 }),
                Address::Cidr(ip, bits) => network(*ip, *bits),
                _ => matcher.rest.push(index),
            }
        }
        matcher.rules = rules;
        matcher
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The first rule that matches `request`: what [`super::route`] answers for the same rules.
    pub fn route(&self, request: &Request<'_>, geo: &impl Geo) -> Option<&Rule> {
        let mut best = u32::MAX;
        let try_list = |list: &[u32], best: &mut u32| {
            for &index in list.iter().take_while(|index| **index < *best) {
                if self.rules[index as usize].matches(request, geo) {
                    *best = index;
                    return;
                }
            }
        };
        if let Some(domain) = request.domain {
            if let Some(list) = self.exact.get(domain) {
                try_list(list, &mut best);
            }
            if !self.suffix.is_empty() {
                // The domain itself (`suffix:`), then each `.name` it ends with.
                if let Some(list) = self.suffix.get(domain) {
                    try_list(list, &mut best);
                }
                for (at, _) in domain.match_indices('.') {
                    if let Some(list) = self.suffix.get(&domain[at..]) {
                        try_list(list, &mut best);
                    }
                    if let Some(list) = self.suffix.get(&domain[at + 1..]) {
                        try_list(list, &mut best);
                    }
                }
            }
        }
        if let Some(domain) = request.domain
            && !self.labels.is_empty()
        {
            for label in domain.split('.') {
                if let Some(list) = self.labels.get(label) {
                    try_list(list, &mut best);
                }
            }
        }
        for ip in request.ips {
            // An IPv4-mapped IPv6 address is tried as itself and as the IPv4 address it maps
            // (IPv4 networks hold it, as `Rule::matches` says).
            let (v4, v6) = match ip {
                IpAddr::V4(v4) => (Some(*v4), None),
                IpAddr::V6(v6) => (v6.to_ipv4_mapped(), Some(*v6)),
            };
            if let Some(v4) = v4 {
                for (bits, map) in &self.v4 {
                    if let Some(list) = map.get(&mask4(u32::from(v4), *bits)) {
                        try_list(list, &mut best);
                    }
                }
            }
            if let Some(v6) = v6 {
                for (bits, map) in &self.v6 {
                    if let Some(list) = map.get(&mask6(u128::from(v6), *bits)) {
                        try_list(list, &mut best);
                    }
                }
            }
        }
        try_list(&self.rest, &mut best);
        self.rules.get(best as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::super::rule::wildcard;
    use super::*;

    #[test]
    fn a_wildcard_is_indexed_by_a_label_its_domains_have_whole() {
        assert_eq!(required_label("*.doubleclick.*"), Some("doubleclick"));
        assert_eq!(required_label("ads.*"), Some("ads"));
        assert_eq!(required_label("*.ads"), Some("ads"));
        assert_eq!(required_label("*ads.example.*"), Some("example"));
        assert_eq!(required_label("*ads*"), None);
        assert_eq!(required_label("a*.b*"), None);
        assert_eq!(required_label("*.x.longer.*"), Some("longer"));
        for (pattern, domain) in
            [("*.doubleclick.*", "ad.doubleclick.net"), ("ads.*", "ads.example"), ("*.ads", "x.ads")]
        {
            assert!(wildcard(pattern.as_bytes(), domain.as_bytes()));
            let label = required_label(pattern).unwrap();
            assert!(domain.split('.').any(|l| l == label), "{pattern} {domain}");
        }
    }
}
