//! One certificate from the CA: the account, an order for the domain, its challenge answered
//! the way the settings say, the order finalized with a new key.

use std::path::Path;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, ExternalAccountKey, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use serde::{Deserialize, Serialize};

use crate::certs::{Certs, certified_key};
use crate::http01::Tokens;
use crate::settings::{AcmeError, Challenge, Settings};

/// How long the CA has to check the domain, and then to issue.
const PATIENCE: Duration = Duration::from_secs(90);

/// A certificate chain and its key, both PEM.
pub(crate) struct Issued {
    pub(crate) chain_pem: String,
    pub(crate) key_pem: String,
}

/// The account as kept on disk: the directory it is at, and its credentials.
#[derive(Serialize, Deserialize)]
struct Kept {
    directory: String,
    credentials: AccountCredentials,
}

/// The account at the settings' CA: the one kept in `path` when it is for that CA, else a
/// new one, kept there.
pub(crate) async fn account(settings: &Settings, path: &Path) -> Result<Account, AcmeError> {
    let builder = || match &settings.ca_root {
        Some(root) => Account::builder_with_root(root),
        None => Account::builder(),
    };
    if let Ok(bytes) = std::fs::read(path)
        && let Ok(kept) = serde_json::from_slice::<Kept>(&bytes)
        && kept.directory == settings.directory
    {
        return Ok(builder()?.from_credentials(kept.credentials).await?);
    }
    let eab = match &settings.eab {
        Some((kid, key)) => {
            use base64::Engine as _;
            let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(key.trim_end_matches('='))
                .map_err(|_| AcmeError::Settings("the EAB HMAC key is not base64url".into()))?;
            Some(ExternalAccountKey::new(kid.clone(), &key))
        }
        None => None,
    };
    let contact = settings.email.as_ref().map(|email| format!("mailto:{email}"));
    let contact: Vec<&str> = contact.iter().map(String::as_str).collect();
    let new = NewAccount { contact: &contact, terms_of_service_agreed: true, only_return_existing: false };
    let (account, credentials) = builder()?.create(&new, settings.directory.clone(), eab.as_ref()).await?;
    let kept = serde_json::to_vec(&Kept { directory: settings.directory.clone(), credentials })
        .map_err(|e| AcmeError::Settings(format!("the account's credentials: {e}")))?;
    crate::private::write_private(path, &kept)?;
    Ok(account)
}

/// Gets a certificate for the settings' domain; the challenge is answered through `certs`
/// (TLS-ALPN-01) or `tokens` (HTTP-01), and withdrawn whatever happens.
pub(crate) async fn issue(
    settings: &Settings,
    account: &Account,
    certs: &Certs,
    tokens: &Tokens,
) -> Result<Issued, AcmeError> {
    let identifiers = [Identifier::Dns(settings.domain.clone())];
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    let mut answered = Vec::new();
    let result = async {
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization = authorization?;
            match authorization.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => return Err(AcmeError::Refused(format!("the authorization is {other:?}"))),
            }
            let kind = match settings.challenge {
                Challenge::Http01 => ChallengeType::Http01,
                Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
            };
            let mut challenge = authorization
                .challenge(kind)
                .ok_or_else(|| AcmeError::Refused(format!("the CA offers no {} challenge", settings.challenge)))?;
            let key_authorization = challenge.key_authorization();
            match settings.challenge {
                Challenge::Http01 => {
                    tokens.insert(&challenge.token, key_authorization.as_str());
                    answered.push(challenge.token.clone());
                }
                Challenge::TlsAlpn01 => {
                    certs.set_challenge(Some(alpn_certificate(&settings.domain, key_authorization.digest().as_ref())?));
                }
            }
            challenge.set_ready().await?;
        }
        let patience = RetryPolicy::new().timeout(PATIENCE);
        let status = order.poll_ready(&patience).await?;
        if status != OrderStatus::Ready {
            let problem = order.state().error.as_ref().map(ToString::to_string);
            return Err(AcmeError::Refused(problem.unwrap_or_else(|| format!("the order is {status:?}"))));
        }
        let key_pem = order.finalize().await?;
        let chain_pem = order.poll_certificate(&patience).await?;
        Ok(Issued { chain_pem, key_pem })
    }
    .await;
    for token in answered {
        tokens.remove(&token);
    }
    certs.set_challenge(None);
    result
}

/// The certificate that answers a TLS-ALPN-01 challenge (RFC 8737, 3): self-signed for the
/// domain, with the key authorization's SHA-256 in its `acmeIdentifier` extension.
fn alpn_certificate(domain: &str, digest: &[u8]) -> Result<rustls::sign::CertifiedKey, AcmeError> {
    let bad = |e: rcgen::Error| AcmeError::Issued(format!("the challenge's certificate: {e}"));
    let key = rcgen::KeyPair::generate().map_err(bad)?;
    let mut params = rcgen::CertificateParams::new(vec![domain.to_owned()]).map_err(bad)?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(bad)?;
    certified_key(cert.pem().as_bytes(), key.serialize_pem().as_bytes())
}
