//! Certificates from a public CA by ACME (RFC 8555), for the node and for control's panel.
//!
//! A [`Manager`] keeps one certificate for one domain in a directory of its own (the account,
//! the certificate chain and its key, with the permissions of keys), obtains it from the CA in
//! the settings (Let's Encrypt by default; ZeroSSL or any RFC 8555 CA, with External Account
//! Binding where the CA asks for it) by HTTP-01 (a listener on TCP 80: [`http01`]) or
//! TLS-ALPN-01 (on the program's own TLS listener on TCP 443, through [`Certs`]), renews it at
//! two thirds of its lifetime, backs off when the CA refuses, and keeps the last error.
//!
//! [`Certs`] is the rustls certificate resolver the program's listeners share (QUIC and TCP
//! alike): the public certificate for the domain, the program's own self-signed one for any
//! other name (what pinned clients ask for), and a TLS-ALPN-01 challenge's certificate to the
//! CA's validator. A renewed certificate is swapped in for the handshakes that follow: no
//! connection is dropped.
//!
//! What must not depend on it: `hearth-shared` (it stays free of IO and builds for wasm).

mod certs;
pub mod http01;
mod issue;
mod manager;
mod private;
mod settings;

pub use certs::{ACME_TLS_ALPN, Certs, certified_key};
pub use manager::{Manager, Status};
pub use settings::{AcmeError, Challenge, LETS_ENCRYPT, Settings, is_domain};
