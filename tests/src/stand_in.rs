//! A stand-in peer for the hostile tests: an edge over plain HTTP/1.1, or control over HTTPS
//! with a self-signed certificate the program under test pins. It answers each request as the
//! test says, well or with a hostile body: far longer than the answer can be (saying so), or
//! chunked and never ending. It samples the memory of the process under test (the kernel's
//! high-water mark) as the body goes out, and records whether the client hung up before the
//! body's end or read it whole.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use crate::proc_status_kib;

pub const MIB: usize = 1024 * 1024;
/// The length an oversized answer says it has, and sends.
pub const OVERSIZED: usize = 128 * MIB;
/// The most of an endless body a stand-in sends: it then sends nothing more, without ending
/// the body, until the client hangs up. It is 16 times the longest answer any of the programs
/// may read from an edge (an export page), and spares the machine when a client reads on
/// regardless.
pub const ENDLESS_GUARD: usize = 256 * MIB;
/// How far a process's memory (VmHWM, in KiB) may rise over what it was before the hostile
/// answers: generous for reading an answer up to its cap, and far below what reading any of
/// the hostile answers whole would take.
pub const RISE_KIB: u64 = 48 * 1024;

/// A request the stand-in received.
pub struct Request {
    pub path: String,
    pub query: String,
    pub head: String,
    /// Its body (as long as its `content-length` said).
    pub body: Vec<u8>,
}

impl Request {
    fn parse(head: String) -> Request {
        let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        Request { path: path.to_owned(), query: query.to_owned(), head, body: Vec::new() }
    }

    /// The last segment of its path (`creds`, `usage`, `export`, ...).
    pub fn name(&self) -> String {
        self.path.rsplit('/').next().unwrap_or_default().to_owned()
    }

    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
        })
    }
}

/// How an answer's body goes out.
#[derive(Clone, Debug)]
pub enum Body {
    /// These bytes, with their length.
    Bytes(Vec<u8>),
    /// [`OVERSIZED`] bytes, the length said first.
    Oversized,
    /// Chunks that never end, no length said.
    Endless,
}

pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Body,
    /// How long the stand-in holds the answer back (a long poll with nothing new).
    pub delay: Duration,
}

impl Answer {
    pub fn new(status: u16, body: Body) -> Answer {
        Answer { status, headers: Vec::new(), body, delay: Duration::ZERO }
    }

    pub fn bytes(status: u16, body: &[u8]) -> Answer {
        Answer::new(status, Body::Bytes(body.to_vec()))
    }

    /// This answer, held back `delay` first.
    pub fn after(self, delay: Duration) -> Answer {
        Answer { delay, ..self }
    }
}

/// What the stand-in saw, by request name.
#[derive(Default)]
pub struct Seen {
    /// The process whose memory is sampled at every request and every MiB of a hostile body
    /// (0: none).
    pub pid: AtomicU32,
    /// The highest VmHWM sampled, in KiB, and the first.
    pub peak_kib: AtomicU64,
    pub first_kib: AtomicU64,
    requests: Mutex<HashMap<String, u64>>,
    /// Hostile bodies the client hung up on before their end.
    hung_up: Mutex<HashMap<String, u64>>,
    /// Hostile bodies that went out whole (to the guard, for an endless one).
    whole: Mutex<Vec<String>>,
}

impl Seen {
    pub fn sample(&self) {
        let pid = self.pid.load(Ordering::Relaxed);
        if pid != 0
            && let Ok(kib) = proc_status_kib(pid, "VmHWM:")
        {
            self.peak_kib.fetch_max(kib, Ordering::Relaxed);
            let _ = self.first_kib.compare_exchange(0, kib, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    pub fn requests(&self, name: &str) -> u64 {
        self.requests.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    pub fn hung_up(&self, name: &str) -> u64 {
        self.hung_up.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    pub fn whole(&self) -> Vec<String> {
        self.whole.lock().unwrap().clone()
    }

    /// Fails when `who` (the process `pid`) read a hostile answer whole, or when its memory,
    /// now or as sampled while answers went out, rose more than [`RISE_KIB`] over `baseline`
    /// (KiB).
    pub fn check_memory(&self, who: &str, pid: u32, baseline: u64) {
        assert_eq!(self.whole(), Vec::<String>::new(), "{who} read hostile answers whole");
        let (now, sampled) = (peak(pid), self.peak_kib.load(Ordering::Relaxed));
        eprintln!("{who}'s memory: {baseline} KiB before, {now} KiB after, {sampled} KiB sampled");
        for (when, kib) in [("at the end", now), ("while answers went out", sampled)] {
            assert!(
                kib <= baseline + RISE_KIB,
                "{who}'s memory peaked {when} at {} MiB, {} MiB over the {} MiB it took before",
                kib / 1024,
                kib.saturating_sub(baseline) / 1024,
                baseline / 1024
            );
        }
    }

    /// Waits for `child`, the process under test (whose memory this samples from its first
    /// request on), to exit: its status and what it printed (its piped standard output and
    /// error). Kills it and fails, naming `what`, when its memory rises more than `rise_kib`
    /// over the first sample, when `runaway` says why it has run on, or after `limit`.
    pub async fn watch(
        &self,
        child: &mut std::process::Child,
        what: &str,
        rise_kib: u64,
        limit: Duration,
        runaway: impl Fn() -> Option<String>,
    ) -> (std::process::ExitStatus, String) {
        self.pid.store(child.id(), Ordering::Relaxed);
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if self.first_kib.load(Ordering::Relaxed) > 0 {
                self.sample();
            }
            let (kib, first) = (self.peak_kib.load(Ordering::Relaxed), self.first_kib.load(Ordering::Relaxed));
            let why = if first > 0 && kib > first + rise_kib {
                Some(format!("memory {} MiB from {} MiB", kib / 1024, first / 1024))
            } else if started.elapsed() > limit {
                Some(format!("{} s", started.elapsed().as_secs()))
            } else {
                runaway()
            };
            if let Some(why) = why {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} ran on ({why})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut said = String::new();
        if let Some(mut out) = child.stdout.take() {
            std::io::Read::read_to_string(&mut out, &mut said).unwrap();
        }
        if let Some(mut err) = child.stderr.take() {
            std::io::Read::read_to_string(&mut err, &mut said).unwrap();
        }
        (status, said)
    }
}

/// What answers the stand-in's requests.
pub type Handler = Arc<dyn Fn(&Request) -> Answer + Send + Sync>;

/// A stand-in edge over plain HTTP/1.1 (keep-alive), answering each request with `handle`:
/// its URL, and what it saw.
pub async fn stand_in(handle: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> (String, Arc<Seen>) {
    listen(None, Arc::new(handle)).await
}

/// Serves `handle` on a loopback port, over TLS with `acceptor` if given: the URL, and what
/// it saw.
async fn listen(acceptor: Option<tokio_rustls::TlsAcceptor>, handle: Handler) -> (String, Arc<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Seen::default());
    let watched = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let (acceptor, handle, watched) = (acceptor.clone(), handle.clone(), watched.clone());
            tokio::spawn(async move {
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            connection(stream, handle, watched).await;
                        }
                    }
                    None => connection(stream, handle, watched).await,
                }
            });
        }
    });
    (url, seen)
}

/// A TLS acceptor with a certificate made here for `localhost`, and the SHA-256 of the
/// certificate in hex: the pin a node is told to check (as control's self-signed one).
pub fn self_signed() -> (tokio_rustls::TlsAcceptor, String) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let der = made.cert.der().clone();
    let pin: String = hearth_shared::sha256(&der).iter().map(|b| format!("{b:02x}")).collect();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .unwrap();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), pin)
}

/// A stand-in control over HTTPS with a certificate made here, answering each request with
/// `handle`: its URL, the certificate's pin, and what it saw.
pub async fn stand_in_tls(handle: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> (String, String, Arc<Seen>) {
    let (acceptor, pin) = self_signed();
    let (url, seen) = listen(Some(acceptor), Arc::new(handle)).await;
    (url, pin, seen)
}

async fn connection(mut stream: impl AsyncRead + AsyncWrite + Unpin, handle: Handler, seen: Arc<Seen>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let mut request = Request::parse(String::from_utf8_lossy(&buf[..head_end]).into_owned());
        let length: usize = request.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        while buf.len() < head_end + length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        request.body = buf[head_end..head_end + length].to_vec();
        buf.drain(..head_end + length);
        seen.sample();
        let name = request.name();
        *seen.requests.lock().unwrap().entry(name.clone()).or_default() += 1;
        let answer = handle(&request);
        tokio::time::sleep(answer.delay).await;
        let mut head = format!("HTTP/1.1 {} X\r\n", answer.status);
        for (header, value) in &answer.headers {
            head.push_str(&format!("{header}: {value}\r\n"));
        }
        let chunked = match answer.body {
            Body::Bytes(bytes) => {
                head.push_str(&format!("content-length: {}\r\n\r\n", bytes.len()));
                let mut whole = head.into_bytes();
                whole.extend_from_slice(&bytes);
                if stream.write_all(&whole).await.is_err() || stream.flush().await.is_err() {
                    return;
                }
                continue;
            }
            Body::Oversized => {
                head.push_str(&format!("content-length: {OVERSIZED}\r\nconnection: close\r\n\r\n"));
                false
            }
            Body::Endless => {
                head.push_str("transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
                true
            }
        };
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        if hostile_body(&mut stream, chunked, &seen).await {
            seen.whole.lock().unwrap().push(name);
        } else {
            *seen.hung_up.lock().unwrap().entry(name).or_default() += 1;
        }
        return;
    }
}

/// Sends a hostile body, sampling the watched process's memory before every MiB (so also
/// while the client holds all but the last of an oversized body). Returns whether it went
/// out whole (an endless one: up to the guard, after which it waits for the client to hang
/// up, never ending the body).
async fn hostile_body(stream: &mut (impl AsyncRead + AsyncWrite + Unpin), chunked: bool, seen: &Seen) -> bool {
    let piece = vec![0u8; MIB];
    let total = if chunked { ENDLESS_GUARD } else { OVERSIZED };
    let mut sent = 0;
    while sent < total {
        seen.sample();
        let written = if chunked {
            let mut framed = format!("{MIB:x}\r\n").into_bytes();
            framed.extend_from_slice(&piece);
            framed.extend_from_slice(b"\r\n");
            stream.write_all(&framed).await
        } else {
            stream.write_all(&piece).await
        };
        if written.is_err() || stream.flush().await.is_err() {
            return false;
        }
        sent += MIB;
    }
    seen.sample();
    if chunked {
        let mut rest = [0u8; 1024];
        while matches!(stream.read(&mut rest).await, Ok(n) if n > 0) {}
    }
    true
}

/// The memory a running process took at its peak (VmHWM), in KiB.
pub fn peak(pid: u32) -> u64 {
    proc_status_kib(pid, "VmHWM:").expect("the process runs")
}

/// Waits up to 90 s for `done`; fails at once when the process `pid` took more than
/// `bound_kib` of memory at its peak (a hostile answer read on), or exited.
pub async fn until(what: &str, pid: u32, bound_kib: u64, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    loop {
        let kib = proc_status_kib(pid, "VmHWM:").unwrap_or_else(|_| panic!("{what}: the process exited"));
        assert!(
            kib <= bound_kib,
            "{what}: the process's memory peaked at {} MiB, over {} MiB",
            kib / 1024,
            bound_kib / 1024
        );
        if done() {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "{what}: not within 90 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
