//! The link bases the commands print links at, as `serve` has them.

use anyhow::Result;

use crate::app::{self, LinkBase};
use crate::config::Config;
use crate::store::{self, Db};

/// Every edge's link base, and the primary one, as `serve` has them.
pub(super) fn links_of(config: &Config, db: &Db) -> Result<(Vec<LinkBase>, String)> {
    let bases = app::link_bases(config, &config.sub_url, db.read_blocking(store::edges::list)?);
    let primary = app::primary(&bases).unwrap_or_else(|| config.sub_url.clone());
    Ok((bases, primary))
}
