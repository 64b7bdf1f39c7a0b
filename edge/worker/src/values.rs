//! The Control object's small named values (its `state` table: the trust, the last batch, the
//! feed's generation), read and written by the object and by the feed it keeps.

use serde::Deserialize;
use worker::{Result, SqlStorage, SqlStorageValue};

#[derive(Deserialize)]
struct ValueRow {
    value: serde_bytes::ByteBuf,
}

/// The value named `key`, if one is kept.
pub(crate) fn value(sql: &SqlStorage, key: &str) -> Result<Option<Vec<u8>>> {
    let rows: Vec<ValueRow> = sql.exec("SELECT value FROM state WHERE key = ?", vec![key.into()])?.to_array()?;
    Ok(rows.into_iter().next().map(|row| row.value.into_vec()))
}

/// Keeps `bytes` as the value named `key`.
pub(crate) fn put_value(sql: &SqlStorage, key: &str, bytes: Vec<u8>) -> Result<()> {
    sql.exec(
        "INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        vec![key.into(), SqlStorageValue::Blob(bytes)],
    )?;
    Ok(())
}
