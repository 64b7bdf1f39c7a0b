//! Who is asking: the owner, an admin of a role, by a session or an API token of a scope.

use serde::{Deserialize, Serialize};

pub(crate) use crate::store::admins::Role;

/// What a request may do, each level holding the ones below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Scope {
    /// Look.
    Read,
    /// Change users (an operator's reach).
    Users,
    /// Change users, nodes and groups.
    Operate,
    /// Everything, including tokens and settings.
    Admin,
}

impl Scope {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Users => "users",
            Scope::Operate => "operate",
            Scope::Admin => "admin",
        }
    }
    pub(crate) fn parse(name: &str) -> Option<Scope> {
        Some(match name {
            "read" => Scope::Read,
            "users" => Scope::Users,
            "operate" => Scope::Operate,
            "admin" => Scope::Admin,
            _ => return None,
        })
    }
}

impl Role {
    /// The most this role may do (a reseller's, only to their own users).
    pub(crate) fn scope(self) -> Scope {
        match self {
            Role::Owner | Role::Admin => Scope::Admin,
            Role::Operator | Role::Reseller => Scope::Users,
            Role::ReadOnly => Scope::Read,
        }
    }
}

/// The admin behind a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Account {
    /// The admin's id; `None` for the owner.
    pub(crate) id: Option<i64>,
    /// Their login (empty for the owner, named "owner" in the audit log).
    pub(crate) login: String,
    pub(crate) role: Role,
}

impl Account {
    pub(crate) fn owner() -> Account {
        Account { id: None, login: String::new(), role: Role::Owner }
    }

    /// How the audit log names this admin.
    pub(crate) fn name(&self) -> String {
        match self.id {
            None => "owner".to_owned(),
            Some(_) => format!("admin {}", self.login),
        }
    }
}

/// How a request is signed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// A browser session (its stored hash).
    Session([u8; 32]),
    /// An API token.
    Token {
        /// Its id.
        id: i64,
        /// Its name (for the audit log).
        name: String,
        /// Its scope (never more than its admin's role allows, whatever it says).
        scope: Scope,
    },
}

/// Who is asking: an admin, by a session or one of their tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Principal {
    pub(crate) account: Account,
    pub(crate) via: Via,
}

impl Principal {
    /// What this principal may do: its role's rights, cut to its token's scope.
    pub(crate) fn scope(&self) -> Scope {
        match &self.via {
            Via::Session(_) => self.account.role.scope(),
            Via::Token { scope, .. } => self.account.role.scope().min(*scope),
        }
    }

    /// The reseller asking, if it is one.
    pub(crate) fn reseller(&self) -> Option<i64> {
        if self.account.role == Role::Reseller { self.account.id } else { None }
    }

    /// The session asking, if it is one.
    pub(crate) fn session(&self) -> Option<[u8; 32]> {
        match self.via {
            Via::Session(hash) => Some(hash),
            Via::Token { .. } => None,
        }
    }

    /// The actor's name in the audit log: the admin, and the token if one was used.
    pub(crate) fn actor(&self) -> String {
        match (&self.via, self.account.id) {
            (Via::Session(_), _) => self.account.name(),
            (Via::Token { id, name, .. }, None) => format!("token {id} ({name})"),
            (Via::Token { id, name, .. }, Some(_)) => format!("token {id} ({name}) of {}", self.account.name()),
        }
    }
}

/// Whose sessions or tokens a call covers: everyone's (the owner's view), or one admin's
/// (`None`: the owner's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Whose {
    All,
    Of(Option<i64>),
}

impl Whose {
    /// The two SQL parameters of `(?a OR admin_id IS ?b)`.
    pub(crate) fn params(self) -> (bool, Option<i64>) {
        match self {
            Whose::All => (true, None),
            Whose::Of(admin) => (false, admin),
        }
    }
}

/// The principal of a row that joined `admins` (`a.login`, `a.role`) on its `admin_id`.
pub(crate) fn account_of(admin: Option<i64>, login: Option<String>, role: Option<String>) -> Option<Account> {
    match admin {
        None => Some(Account::owner()),
        Some(id) => Some(Account { id: Some(id), login: login?, role: Role::parse(&role?)? }),
    }
}
