//! Salamander: Hysteria2's packet obfuscation, as a wrapper around the UDP socket.
//!
//! Every packet on the wire is an 8-byte random salt followed by the QUIC packet XORed with
//! BLAKE2b-256(password || salt), repeated. A packet too short to hold a salt is dropped. The
//! wrapper sends one datagram per call (no segmentation offload, as each datagram needs its
//! own salt) and unpacks coalesced receives datagram by datagram.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use blake2::Digest as _;
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

const SALT: usize = 8;

type Blake2b256 = blake2::Blake2b<blake2::digest::consts::U32>;

/// Salamander over another socket.
pub struct Salamander {
    inner: Arc<dyn AsyncUdpSocket>,
    password: Vec<u8>,
}

impl fmt::Debug for Salamander {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Salamander").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl Salamander {
    pub fn new(inner: Arc<dyn AsyncUdpSocket>, password: &str) -> Salamander {
        Salamander { inner, password: password.as_bytes().to_vec() }
    }

    fn keystream(&self, salt: &[u8]) -> [u8; 32] {
        let mut hasher = Blake2b256::new();
        hasher.update(&self.password);
        hasher.update(salt);
        hasher.finalize().into()
    }

    /// XORs `data` with the keystream of `salt`.
    fn apply(&self, salt: &[u8], data: &mut [u8]) {
        let key = self.keystream(salt);
        for (byte, k) in data.iter_mut().zip(key.iter().cycle()) {
            *byte ^= k;
        }
    }

    /// Obfuscates one packet.
    pub fn seal(&self, packet: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; SALT];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut out);
        out.extend_from_slice(packet);
        let (salt, body) = out.split_at_mut(SALT);
        self.apply(salt, body);
        out
    }

    /// Unpacks the `len` bytes of `buf` holding datagrams `stride` apart, in place; returns
    /// the new length and stride. A datagram too short to hold a salt is dropped.
    pub fn open_in_place(&self, buf: &mut [u8], len: usize, stride: usize) -> (usize, usize) {
        let stride = stride.max(1).min(len.max(1));
        if stride <= SALT {
            return (0, stride);
        }
        let mut written = 0;
        let mut at = 0;
        while at < len {
            let end = (at + stride).min(len);
            if end - at > SALT {
                let (salt, body) = buf[at..end].split_at_mut(SALT);
                let salt: [u8; SALT] = salt.try_into().expect("eight bytes");
                self.apply(&salt, body);
                buf.copy_within(at + SALT..end, written);
                written += end - at - SALT;
            }
            at = end;
        }
        (written, stride - SALT)
    }
}

impl AsyncUdpSocket for Salamander {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        let segment = transmit.segment_size.unwrap_or(transmit.contents.len()).max(1);
        for packet in transmit.contents.chunks(segment) {
            let sealed = self.seal(packet);
            self.inner.try_send(&Transmit {
                destination: transmit.destination,
                ecn: transmit.ecn,
                contents: &sealed,
                segment_size: None,
                src_ip: transmit.src_ip,
            })?;
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            let count = match self.inner.poll_recv(cx, bufs, meta) {
                Poll::Ready(Ok(count)) => count,
                other => return other,
            };
            let mut kept = 0;
            for i in 0..count {
                let (len, stride) = self.open_in_place(&mut bufs[i], meta[i].len, meta[i].stride);
                meta[i].len = len;
                meta[i].stride = stride;
                if len > 0 {
                    kept += 1;
                }
            }
            // Only garbage arrived: wait for more rather than hand quinn empty buffers.
            if kept > 0 {
                return Poll::Ready(Ok(count));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        1
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn salamander() -> Salamander {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _guard = runtime.enter();
        let inner = quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket).unwrap();
        Salamander::new(inner, "pw")
    }

    #[test]
    fn sealed_packets_open_singly_and_coalesced() {
        let s = salamander();
        let a: Vec<u8> = (0..100u8).collect();
        let b: Vec<u8> = (100..150u8).collect();
        let (sa, sb) = (s.seal(&a), s.seal(&b));
        assert_ne!(&sa[SALT..], &a[..], "obfuscated");
        assert_ne!(s.seal(&a), sa, "a fresh salt each time");
        // Two datagrams coalesced by GRO: stride = the first's length, the last shorter.
        let mut buf = [sa.clone(), sb.clone()].concat();
        let (len, stride) = s.open_in_place(&mut buf, sa.len() + sb.len(), sa.len());
        assert_eq!((len, stride), (a.len() + b.len(), a.len()));
        assert_eq!(&buf[..a.len()], &a[..]);
        assert_eq!(&buf[a.len()..len], &b[..]);
        // A runt is dropped.
        let mut runt = [1u8, 2, 3];
        assert_eq!(s.open_in_place(&mut runt, 3, 3).0, 0);
        // The keystream is BLAKE2b-256(password || salt).
        let salt = [9u8; SALT];
        let mut expected = Blake2b256::new();
        expected.update(b"pw");
        expected.update(salt);
        assert_eq!(s.keystream(&salt), <[u8; 32]>::from(expected.finalize()));
    }
}
