//! Control's errors: each has a stable code for the API and a message safe to show anyone.

/// An error of control. The message never holds a secret.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The request is malformed or breaks a rule (400).
    #[error("{message}")]
    Invalid {
        /// A stable machine-readable code.
        code: &'static str,
        /// What was wrong, for a person.
        message: String,
    },
    /// Not found (404).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The request conflicts with what exists (409): a name already taken (`conflict`), or
    /// another state that forbids it, each with its own code (`setup_done`...).
    #[error("{message}")]
    Conflict {
        /// A stable machine-readable code.
        code: &'static str,
        /// What was wrong, for a person.
        message: String,
    },
    /// Names that cannot be used (400 for names repeated in one request, 409 for names taken),
    /// listed for the person who typed them.
    #[error("{message}")]
    Names {
        /// A stable machine-readable code: `duplicate_names` or `names_taken`.
        code: &'static str,
        /// What was wrong, for a person.
        message: String,
        /// The names (the first 20).
        names: Vec<String>,
    },
    /// A rule set that does not check (400 `bad_rules`): which, and where in it.
    #[error("rule set {set}: {error}")]
    Rules {
        /// The rule set's name.
        set: String,
        /// What is wrong, and its line and column.
        error: hearth_shared::acl::AclError,
    },
    /// Too many attempts (429); retry after this many seconds.
    #[error("too many attempts; try again in {0} s")]
    TooMany(u64),
    /// The database failed.
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
    /// Anything else that is not the caller's fault.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// A 400 with `code`.
    pub(crate) fn invalid(code: &'static str, message: impl Into<String>) -> Error {
        Error::Invalid { code, message: message.into() }
    }

    /// A 409 with `code`: the request conflicts with what exists (`conflict`: a name taken).
    pub(crate) fn conflict(code: &'static str, message: impl Into<String>) -> Error {
        Error::Conflict { code, message: message.into() }
    }

    /// Maps a unique-constraint failure to a conflict, anything else to itself.
    pub(crate) fn unique(self, what: &str) -> Error {
        match &self {
            Error::Db(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::ConstraintViolation => {
                Error::conflict("conflict", format!("{what} already exists"))
            }
            _ => self,
        }
    }
}

impl From<anyhow::Error> for Error {
    fn from(e: anyhow::Error) -> Error {
        Error::Internal(format!("{e:#}"))
    }
}
