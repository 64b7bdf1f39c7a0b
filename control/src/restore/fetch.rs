//! Reading what the edge holds for a restore: every page of its export (the envelopes control
//! signed, and the key records), and the encrypted state archive, with the push token from the
//! owner's `edge.toml`.

use std::collections::BTreeSet;

use anyhow::{Context as _, Result, bail};
use hearth_shared::envelope::Kind;
use hearth_shared::sha256;
use hearth_shared::wire::{self, ExportItem, ExportPage};

use crate::config::EdgeSettings as EdgeToml;

/// What the edge holds.
pub(super) struct Fetched {
    pub(super) items: Vec<ExportItem>,
    pub(super) batch: u64,
    pub(super) chain: Vec<Vec<u8>>,
    pub(super) archive: Option<Vec<u8>>,
}

/// Reads the edge's export, page by page, and its archive (none when the edge holds none).
pub(super) fn fetch(edge_url: &str, edge: &EdgeToml) -> Result<Fetched> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .user_agent(concat!("hearth-control/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(std::time::Duration::from_secs(15))
            .timeout(std::time::Duration::from_secs(300))
            .build()?;
        let base = format!("{}/{}", edge_url.trim_end_matches('/'), edge.api_prefix);
        // The body of an answer (`what`, at most `max` bytes), or the status of a refusal and
        // what it said.
        let get = |url: String, max: usize, what: &'static str| {
            let request = client.get(url).bearer_auth(&edge.push_token);
            async move {
                let response = request
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("the edge did not answer: {}", hearth_io::capped::without_url(&e)))?;
                let status = response.status();
                if !status.is_success() {
                    return Ok(Err((status, hearth_io::capped::message(response).await)));
                }
                let body = hearth_io::capped::read(response, max, what)
                    .await
                    .with_context(|| format!("reading {what} from the edge"))?;
                Ok::<_, anyhow::Error>(Ok(body))
            }
        };
        let mut fetched = Fetched { items: Vec::new(), batch: 0, chain: Vec::new(), archive: None };
        // The export ends: within as many pages as an edge can hold, each at a cursor not
        // given before (kept by their digests).
        let mut after = String::new();
        let mut given = BTreeSet::from([sha256(after.as_bytes())]);
        for pages in 1.. {
            if pages > ExportPage::MAX_PAGES {
                bail!(
                    "the edge's export goes on past {} pages, more than an edge can hold: stopped",
                    ExportPage::MAX_PAGES
                );
            }
            let body =
                match get(format!("{base}/export?after={after}"), ExportPage::MAX_LEN, "a page of the export").await? {
                    Ok(body) => body,
                    Err((reqwest::StatusCode::UNAUTHORIZED, _)) => {
                        bail!("the edge refused the push token in the edge settings")
                    }
                    Err((status, said)) => bail!("the edge answered {status} to an export: {said}"),
                };
            let page: ExportPage = wire::decode(&body, "export page").context("the edge's export is malformed")?;
            if let Some(keys) = &page.keys {
                fetched.chain = hearth_shared::trust::chain_from_header(keys)
                    .context("the key records the edge holds are malformed")?;
            }
            fetched.batch = fetched.batch.max(page.batch);
            fetched.items.extend(page.items);
            match page.next {
                None => break,
                Some(next) if !given.insert(sha256(next.as_bytes())) => bail!(
                    "the edge's export does not advance: page {pages} gives a cursor an earlier page gave: stopped"
                ),
                Some(next) => after = next,
            }
        }
        match get(format!("{base}/archive"), Kind::Archive.max_len(), "the archive").await? {
            Ok(body) => fetched.archive = Some(body),
            Err((reqwest::StatusCode::NOT_FOUND, _)) => {}
            Err((status, _)) => bail!("the edge answered {status} for the archive"),
        }
        Ok(fetched)
    })
}
