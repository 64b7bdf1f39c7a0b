//! Batch numbers for pushes: every push to an edge is a signed batch manifest whose version
//! the edge takes only above the last it took, so a number must never be given twice, across
//! restarts and power cuts. They are reserved a block at a time with one synced write.

use crate::error::Error;
use crate::store::{self, Db};

/// Batch numbers reserved at once: the database holds the end of the block in use, so a
/// number is never given twice, across restarts and power cuts, for one synced write a block
/// instead of one a push.
const BATCH_BLOCK: i64 = 1000;

/// The batch numbers reserved and not given yet (`next..=end`; none when `next > end`).
#[derive(Debug, Default)]
pub(crate) struct BatchNumbers(std::sync::Mutex<(u64, u64)>);

impl BatchNumbers {
    /// The next number of the block, if it has one left.
    fn take(&self) -> Option<u64> {
        let mut block = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (next, end) = *block;
        (next != 0 && next <= end).then(|| {
            block.0 += 1;
            next
        })
    }

    /// Takes a block reserved in the database (`from..=to`) unless one further on is in use
    /// already (another push reserved at once), then its next number.
    fn refill(&self, from: u64, to: u64) -> u64 {
        let mut block = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if to > block.1 {
            *block = (from.max(block.0), to);
        }
        let next = block.0;
        block.0 += 1;
        next
    }
}

/// The number of the next batch: from the block reserved, or a new block reserved with a
/// synced write first (a batch an edge took is never numbered again, whatever happens after).
pub(crate) async fn next(db: &Db, numbers: &BatchNumbers) -> Result<u64, Error> {
    if let Some(next) = numbers.take() {
        return Ok(next);
    }
    let (from, to) = db
        .write(|tx| {
            let at = store::get_state(tx, "batch")?;
            store::set_state(tx, "batch", at + BATCH_BLOCK)?;
            Ok((at + 1, at + BATCH_BLOCK))
        })
        .await?;
    let positive = |n: i64| u64::try_from(n).map_err(|_| Error::Internal("a negative batch number".into()));
    Ok(numbers.refill(positive(from)?, positive(to)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestControl;

    /// Batch numbers come from a block the database holds the end of: one write a block, and
    /// a control started again on the same database (after a crash, say) gives none it gave.
    #[tokio::test]
    async fn batch_numbers_are_never_given_twice_across_restarts() {
        let control = TestControl::new(false);
        let db = &control.app.db;
        let numbers = BatchNumbers::default();
        let mut given = Vec::new();
        for _ in 0..5 {
            given.push(next(db, &numbers).await.unwrap());
        }
        assert_eq!(given, [1, 2, 3, 4, 5]);
        let stored = db.read(|c| store::get_state(c, "batch")).await.unwrap();
        assert_eq!(stored, BATCH_BLOCK, "the block's end, written once");
        // Started again (nothing reserved in memory): what the first gave, and the rest of
        // its block, are never given.
        let restarted = BatchNumbers::default();
        assert_eq!(next(db, &restarted).await.unwrap(), BATCH_BLOCK as u64 + 1);
        assert_eq!(db.read(|c| store::get_state(c, "batch")).await.unwrap(), 2 * BATCH_BLOCK);
        // Two pushes that reserve at once keep the block further on; numbers only go up.
        let numbers = BatchNumbers::default();
        assert_eq!(numbers.take(), None);
        assert_eq!(numbers.refill(2001, 3000), 2001);
        assert_eq!(numbers.refill(1001, 2000), 2002, "an older block does not replace a newer one");
        assert_eq!(numbers.take(), Some(2003));
    }
}
