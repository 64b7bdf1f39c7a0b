//! Reading an answer from control or the edge with a cap on its size: [`hearth_io::capped`],
//! which control shares, and what the node makes of an answer refused for its size.

pub(crate) use hearth_io::capped::{ReadError, message, read};

/// Whether a request failed because its answer was longer than it can be: the peer's doing,
/// said at warn (a peer out of reach is usual, behind NAT, and said at debug).
pub(crate) fn refused_for_size(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref(), Some(ReadError::TooLarge { .. }))
}
