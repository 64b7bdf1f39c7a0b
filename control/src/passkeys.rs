//! Passkeys (WebAuthn, with webauthn-rs): adding one to an admin's account, signing in with
//! one alone (a discoverable credential: no login typed), and confirming a password sign-in
//! with one (the second factor). The relying party is control's `public_url`: its host is the
//! RP ID, so passkeys need a domain name there (browsers refuse IP addresses), served over
//! HTTPS (or `http://localhost`).
//!
//! A ceremony's state stays in memory, here, from its start to its finish: at most
//! [`MAX_PENDING`] at once, each for [`PENDING_FOR`], each finished once. A ceremony started
//! and never finished costs a slot until it expires; strangers can start sign-ins only within
//! the unauthenticated request budget.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use webauthn_rs::prelude::{
    CredentialID, DiscoverableAuthentication, Passkey, PasskeyAuthentication, PasskeyRegistration, PublicKeyCredential,
    RegisterPublicKeyCredential, Url, Uuid, Webauthn, WebauthnBuilder,
};

use crate::error::Error;

/// The most ceremonies under way at once.
pub(crate) const MAX_PENDING: usize = 256;
/// How long a ceremony may take, from its options to the browser's answer.
pub(crate) const PENDING_FOR: Duration = Duration::from_secs(300);

/// A ceremony under way.
enum Pending {
    /// Adding a passkey to an admin's account (`None`: the owner's).
    Add { admin: Option<i64>, name: String, user_handle: [u8; 16], state: PasskeyRegistration },
    /// Signing in with a passkey alone.
    SignIn(DiscoverableAuthentication),
    /// Confirming a password sign-in of an admin's (their password was right).
    Confirm { admin: Option<i64>, state: PasskeyAuthentication },
}

/// The relying party and the ceremonies under way.
pub(crate) struct Passkeys {
    /// `None` when `public_url` cannot be a relying party (an IP address, say): why.
    webauthn: Result<Webauthn, String>,
    pending: Mutex<HashMap<String, (Instant, Pending)>>,
}

/// A passkey sign-in that checked out: whose, by which stored passkey, and the passkey with its
/// new counter when it moved.
pub(crate) struct Verified {
    pub(crate) admin: Option<i64>,
    pub(crate) id: i64,
    pub(crate) updated: Option<Passkey>,
}

impl Passkeys {
    pub(crate) fn new(public_url: &str, title: &str) -> Passkeys {
        let webauthn = (|| {
            let origin = Url::parse(public_url).map_err(|e| format!("public_url {public_url:?}: {e}"))?;
            let Some(domain) = origin.domain() else {
                return Err(format!(
                    "passkeys need control's public_url to name a domain, not {:?} (set public_url)",
                    origin.host_str().unwrap_or_default()
                ));
            };
            WebauthnBuilder::new(domain, &origin)
                .and_then(|builder| builder.rp_name(title).build())
                .map_err(|e| format!("passkeys cannot use public_url {public_url:?}: {e}"))
        })();
        Passkeys { webauthn, pending: Mutex::new(HashMap::new()) }
    }

    /// Whether passkeys can be used here (control's public URL names a domain).
    pub(crate) fn available(&self) -> bool {
        self.webauthn.is_ok()
    }

    fn webauthn(&self) -> Result<&Webauthn, Error> {
        self.webauthn.as_ref().map_err(|why| Error::conflict("passkeys_unavailable", why.clone()))
    }

    /// Keeps a ceremony's state; its ticket.
    fn hold(&self, pending: Pending) -> Result<String, Error> {
        let mut map = self.pending.lock().expect("passkeys lock");
        let now = Instant::now();
        map.retain(|_, (started, _)| now.duration_since(*started) < PENDING_FOR);
        if map.len() >= MAX_PENDING {
            return Err(Error::TooMany(PENDING_FOR.as_secs()));
        }
        let ticket = crate::secrets::random_token();
        map.insert(ticket.clone(), (now, pending));
        Ok(ticket)
    }

    /// Takes a ceremony's state (once), if it has not expired.
    fn take(&self, ticket: &str) -> Option<Pending> {
        let mut map = self.pending.lock().expect("passkeys lock");
        map.remove(ticket).filter(|(started, _)| started.elapsed() < PENDING_FOR).map(|(_, pending)| pending)
    }

    /// Starts adding a passkey: the options for the browser's `navigator.credentials.create`,
    /// asking for a discoverable credential (so it can sign in without the login) verified by
    /// the device (PIN, fingerprint, face), and the ticket to finish with.
    pub(crate) fn start_add(
        &self,
        admin: Option<i64>,
        login: &str,
        name: String,
        user_handle: [u8; 16],
        existing: Vec<CredentialID>,
    ) -> Result<(String, Value), Error> {
        let user = Uuid::from_bytes(user_handle);
        let (options, state) = self
            .webauthn()?
            .start_passkey_registration(user, login, login, Some(existing))
            .map_err(|e| Error::Internal(format!("a passkey registration could not start: {e}")))?;
        let mut options = serde_json::to_value(options).map_err(|e| Error::Internal(e.to_string()))?;
        // What the browser is asked for; the device's answer is checked by the state kept here.
        options["publicKey"]["authenticatorSelection"]["residentKey"] = "required".into();
        options["publicKey"]["authenticatorSelection"]["requireResidentKey"] = true.into();
        let ticket = self.hold(Pending::Add { admin, name, user_handle, state })?;
        Ok((ticket, options))
    }

    /// Finishes adding a passkey to `admin`'s account: its name, user handle and the passkey.
    pub(crate) fn finish_add(
        &self,
        ticket: &str,
        admin: Option<i64>,
        credential: &RegisterPublicKeyCredential,
    ) -> Result<(String, [u8; 16], Passkey), Error> {
        let Some(Pending::Add { admin: started_by, name, user_handle, state }) = self.take(ticket) else {
            return Err(expired());
        };
        if started_by != admin {
            return Err(expired());
        }
        let passkey = self
            .webauthn()?
            .finish_passkey_registration(credential, &state)
            .map_err(|e| Error::invalid("bad_passkey", format!("the passkey was not added: {e}")))?;
        Ok((name, user_handle, passkey))
    }

    /// Starts a sign-in with a passkey alone: options for `navigator.credentials.get` and the
    /// ticket.
    pub(crate) fn start_sign_in(&self) -> Result<(String, Value), Error> {
        let (options, state) = self
            .webauthn()?
            .start_discoverable_authentication()
            .map_err(|e| Error::Internal(format!("a passkey sign-in could not start: {e}")))?;
        let mut options = serde_json::to_value(options).map_err(|e| Error::Internal(e.to_string()))?;
        // Asked by a button, not offered in the login field's autofill.
        if let Some(object) = options.as_object_mut() {
            object.remove("mediation");
        }
        let ticket = self.hold(Pending::SignIn(state))?;
        Ok((ticket, options))
    }

    /// Starts confirming a password sign-in of `admin`'s with one of their `passkeys`.
    pub(crate) fn start_confirm(&self, admin: Option<i64>, passkeys: &[Passkey]) -> Result<(String, Value), Error> {
        let (options, state) = self
            .webauthn()?
            .start_passkey_authentication(passkeys)
            .map_err(|e| Error::Internal(format!("a passkey check could not start: {e}")))?;
        let options = serde_json::to_value(options).map_err(|e| Error::Internal(e.to_string()))?;
        let ticket = self.hold(Pending::Confirm { admin, state })?;
        Ok((ticket, options))
    }

    /// Finishes a sign-in (alone, or confirming a password): whose passkey signed, checked
    /// against `stored`, the passkey kept for the credential's id (none: refused).
    pub(crate) fn finish_sign_in(
        &self,
        ticket: &str,
        credential: &PublicKeyCredential,
        stored: Option<crate::store::passkeys::Stored>,
    ) -> Result<Verified, Error> {
        let webauthn = self.webauthn()?;
        let refused = || Error::invalid("bad_passkey", "that passkey was not accepted");
        let pending = self.take(ticket).ok_or_else(expired)?;
        let stored = stored.ok_or_else(refused)?;
        let result = match pending {
            Pending::SignIn(state) => {
                let (user, _) = webauthn.identify_discoverable_authentication(credential).map_err(|_| refused())?;
                if user.as_bytes().as_slice() != stored.user_handle.as_slice() {
                    return Err(refused());
                }
                webauthn.finish_discoverable_authentication_v2(credential, state, &stored.passkey)
            }
            Pending::Confirm { admin, state } => {
                if admin != stored.admin {
                    return Err(refused());
                }
                webauthn.finish_passkey_authentication(credential, &state)
            }
            Pending::Add { .. } => return Err(expired()),
        }
        .map_err(|e| {
            tracing::info!(error = %e, "a passkey was refused");
            refused()
        })?;
        let mut passkey = stored.passkey;
        let updated = passkey.update_credential(&result).filter(|changed| *changed).map(|_| passkey);
        Ok(Verified { admin: stored.admin, id: stored.id, updated })
    }
}

fn expired() -> Error {
    Error::invalid("passkey_expired", "this passkey request expired or was used; start again")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relying_party_needs_a_domain() {
        for url in ["https://127.0.0.1:8443", "https://[::1]:8443", "not a url"] {
            let passkeys = Passkeys::new(url, "Hearth");
            assert!(!passkeys.available(), "{url}");
            assert!(
                matches!(passkeys.start_sign_in(), Err(Error::Conflict { message, .. }) if message.contains("public_url"))
            );
        }
        assert!(Passkeys::new("https://panel.example.net:8443", "Hearth").available());
        assert!(Passkeys::new("http://localhost:8443", "Hearth").available());
    }

    #[test]
    fn ceremonies_are_bounded_and_finish_once() {
        let passkeys = Passkeys::new("https://panel.example.net", "Hearth");
        let (ticket, options) = passkeys.start_sign_in().unwrap();
        assert!(options.get("mediation").is_none(), "{options}");
        assert!(options["publicKey"]["challenge"].as_str().is_some_and(|c| c.len() >= 43), "{options}");
        assert!(passkeys.take(&ticket).is_some());
        assert!(passkeys.take(&ticket).is_none(), "a ticket finishes once");
        for _ in 1..MAX_PENDING {
            passkeys.start_sign_in().unwrap();
        }
        passkeys.start_sign_in().unwrap();
        assert!(matches!(passkeys.start_sign_in(), Err(Error::TooMany(_))), "at most {MAX_PENDING} at once");
        // A ticket of another kind, or of someone else's, finishes nothing.
        let passkeys = Passkeys::new("https://panel.example.net", "Hearth");
        let (ticket, options) = passkeys.start_add(Some(7), "rita", "phone".into(), [3; 16], Vec::new()).unwrap();
        assert_eq!(options["publicKey"]["authenticatorSelection"]["residentKey"], "required");
        assert_eq!(options["publicKey"]["authenticatorSelection"]["userVerification"], "required");
        assert_eq!(options["publicKey"]["user"]["name"], "rita");
        let credential: RegisterPublicKeyCredential = serde_json::from_value(serde_json::json!({
            "id": "AAAA", "rawId": "AAAA", "type": "public-key", "extensions": {},
            "response": { "attestationObject": "AAAA", "clientDataJSON": "AAAA" },
        }))
        .unwrap();
        let theirs = passkeys.finish_add(&ticket, Some(8), &credential);
        assert!(matches!(theirs, Err(Error::Invalid { code: "passkey_expired", .. })));
        assert!(passkeys.take(&ticket).is_none(), "a ticket tried by someone else is spent");
    }
}
