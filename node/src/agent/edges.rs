//! Where the node goes when control does not answer: the edges its set lists, in control's
//! order, or the one edge it learned (enrolled with, or named by control since), the one
//! that answered last tried first. Plain data, no IO: the agent keeps the learned edge on
//! disk ([`super::state::EDGE_FILE`]) and logs what changed.

use hearth_shared::nodeauth;
use hearth_shared::wire::EdgeAddress;

/// Where a node request goes: control, or an edge, and the API prefix it answers under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Base {
    pub(crate) url: String,
    pub(crate) prefix: String,
}

impl Base {
    /// The host (and port) of the URL alone, for logs: never its path, which holds the API
    /// prefix, nor anything before an `@`.
    pub(crate) fn host(&self) -> String {
        let authority = nodeauth::authority_of_url(&self.url);
        authority.rsplit_once('@').map_or_else(|| authority.clone(), |(_, host)| host.to_owned())
    }
}

/// The edges a node falls back to.
#[derive(Debug)]
pub(crate) struct Edges {
    /// The edges the held set lists, in control's order.
    listed: Vec<EdgeAddress>,
    /// The edge enrolled with, or the one control named since, used when the set lists none.
    learned: Option<String>,
    /// The API prefix the learned edge answers under (the node's own, from `node.toml`).
    prefix: String,
    /// Which of the listed edges answered last.
    at: usize,
}

/// What to make of the edge control named in an answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Named {
    /// Not a web address: the one in use is kept.
    NotAUrl,
    /// The one in use already.
    Same,
    /// Another (`None`: control names none any more): to keep on disk, then to use.
    New(Option<String>),
}

impl Edges {
    /// The edges of a held set, the learned edge and the node's API prefix.
    pub(crate) fn new(listed: Vec<EdgeAddress>, learned: Option<String>, prefix: String) -> Edges {
        Edges { listed, learned, prefix, at: 0 }
    }

    /// The edges to fall back to, the one that answered last first, then the others in
    /// control's order: the set's list, else the one edge the node learned.
    pub(crate) fn fallbacks(&self) -> Vec<Base> {
        let mut bases: Vec<Base> = if self.listed.is_empty() {
            self.learned.iter().map(|url| Base { url: url.clone(), prefix: self.prefix.clone() }).collect()
        } else {
            self.listed.iter().map(|edge| Base { url: edge.url.clone(), prefix: edge.api_prefix.clone() }).collect()
        };
        if self.at < bases.len() {
            bases.rotate_left(self.at);
        }
        bases
    }

    /// Remembers that the listed edge at `url` answered: tried first next time.
    pub(crate) fn answered(&mut self, url: &str) {
        if let Some(index) = self.listed.iter().position(|edge| edge.url == url) {
            self.at = index;
        }
    }

    /// Takes the edges a new set lists; returns whether they changed (then control's first
    /// is tried first).
    pub(crate) fn take_listed(&mut self, listed: &[EdgeAddress]) -> bool {
        if self.listed.as_slice() == listed {
            return false;
        }
        self.listed = listed.to_vec();
        self.at = 0;
        true
    }

    /// What to make of the edge control `named` in an answer ("": none).
    pub(crate) fn named(&self, named: &str) -> Named {
        let named = named.trim();
        if !named.is_empty() && !hearth_shared::is_web_address(named) {
            return Named::NotAUrl;
        }
        let named = Some(named.to_owned()).filter(|url| !url.is_empty());
        if self.learned == named { Named::Same } else { Named::New(named) }
    }

    /// Uses `edge` as the learned edge from now on.
    pub(crate) fn learn(&mut self, edge: Option<String>) {
        self.learned = edge;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(url: &str, prefix: &str) -> EdgeAddress {
        EdgeAddress { url: url.into(), api_prefix: prefix.into() }
    }

    fn urls(edges: &Edges) -> Vec<String> {
        edges.fallbacks().into_iter().map(|base| base.url).collect()
    }

    #[test]
    fn the_edge_that_answered_last_is_asked_first_then_the_others_in_controls_order() {
        let mut edges = Edges::new(Vec::new(), Some("https://learned.example".into()), "own".into());
        assert_eq!(edges.fallbacks(), [Base { url: "https://learned.example".into(), prefix: "own".into() }]);
        let listed =
            [edge("https://a.example", "pa"), edge("https://b.example", "pb"), edge("https://c.example", "pc")];
        assert!(edges.take_listed(&listed));
        assert!(!edges.take_listed(&listed));
        // A listed edge answers under its own prefix; the learned one is not asked.
        assert_eq!(edges.fallbacks()[1], Base { url: "https://b.example".into(), prefix: "pb".into() });
        edges.answered("https://c.example");
        assert_eq!(urls(&edges), ["https://c.example", "https://a.example", "https://b.example"]);
        // An edge the list does not hold changes nothing.
        edges.answered("https://learned.example");
        assert_eq!(urls(&edges)[0], "https://c.example");
        // A new list starts at control's first; a shorter one never skips past its end.
        edges.answered("https://b.example");
        assert!(edges.take_listed(&listed[..2]));
        assert_eq!(urls(&edges), ["https://a.example", "https://b.example"]);
        assert!(edges.take_listed(&[]));
        assert_eq!(urls(&edges), ["https://learned.example"]);
    }

    #[test]
    fn an_edge_control_names_is_taken_only_when_it_is_a_new_web_address() {
        let mut edges = Edges::new(Vec::new(), None, "own".into());
        assert_eq!(edges.named(""), Named::Same);
        assert_eq!(edges.named("not a url"), Named::NotAUrl);
        assert_eq!(edges.named(" https://edge.example "), Named::New(Some("https://edge.example".into())));
        edges.learn(Some("https://edge.example".into()));
        assert_eq!(edges.named("https://edge.example"), Named::Same);
        assert_eq!(edges.named(""), Named::New(None));
        edges.learn(None);
        assert!(edges.fallbacks().is_empty());
    }
}
