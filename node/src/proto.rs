//! The Hysteria2 wire formats the node speaks after authentication: the TCP request and
//! response that open a proxied stream, and the UDP message carried in QUIC datagrams.
//! (Authentication itself is an HTTP/3 request, which the server module answers.)

use tokio::io::{AsyncRead, AsyncReadExt as _};

/// The frame type that opens a TCP proxy stream.
pub const TCP_REQUEST: u64 = 0x401;
/// The longest address a client may send.
pub const MAX_ADDRESS: u64 = 2048;
/// The most padding a client may send.
pub const MAX_PADDING: u64 = 4096;

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("stream closed early: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a TCP request (frame type {0:#x})")]
    NotTcp(u64),
    #[error("address of {0} bytes")]
    BadAddressLength(u64),
    #[error("padding of {0} bytes")]
    BadPadding(u64),
    #[error("address is not text")]
    BadAddress,
    #[error("malformed UDP message")]
    BadDatagram,
}

/// Appends a QUIC variable-length integer.
pub fn put_varint(out: &mut Vec<u8>, value: u64) {
    if value < 1 << 6 {
        out.push(value as u8);
    } else if value < 1 << 14 {
        out.extend_from_slice(&((value as u16) | 0x4000).to_be_bytes());
    } else if value < 1 << 30 {
        out.extend_from_slice(&((value as u32) | 0x8000_0000).to_be_bytes());
    } else {
        assert!(value < 1 << 62, "varints hold 62 bits");
        out.extend_from_slice(&(value | 0xc000_0000_0000_0000).to_be_bytes());
    }
}

/// Reads a QUIC variable-length integer from a slice; returns it and the bytes used.
pub fn get_varint(input: &[u8]) -> Option<(u64, usize)> {
    let first = *input.first()?;
    let len = 1usize << (first >> 6);
    let bytes = input.get(..len)?;
    let mut value = u64::from(first & 0x3f);
    for byte in &bytes[1..] {
        value = (value << 8) | u64::from(*byte);
    }
    Some((value, len))
}

/// Reads a QUIC variable-length integer from a stream.
pub async fn read_varint<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<u64> {
    let first = reader.read_u8().await?;
    let len = 1usize << (first >> 6);
    let mut value = u64::from(first & 0x3f);
    for _ in 1..len {
        value = (value << 8) | u64::from(reader.read_u8().await?);
    }
    Ok(value)
}

async fn skip<R: AsyncRead + Unpin>(reader: &mut R, mut n: u64) -> std::io::Result<()> {
    let mut buf = [0u8; 512];
    while n > 0 {
        let take = n.min(buf.len() as u64) as usize;
        reader.read_exact(&mut buf[..take]).await?;
        n -= take as u64;
    }
    Ok(())
}

/// Reads a TCP request (after which the stream carries the client's bytes); returns the
/// `host:port` it asks for.
pub async fn read_tcp_request<R: AsyncRead + Unpin>(reader: &mut R) -> Result<String, ProtoError> {
    let kind = read_varint(reader).await?;
    if kind != TCP_REQUEST {
        return Err(ProtoError::NotTcp(kind));
    }
    let len = read_varint(reader).await?;
    if len == 0 || len > MAX_ADDRESS {
        return Err(ProtoError::BadAddressLength(len));
    }
    let mut address = vec![0u8; len as usize];
    reader.read_exact(&mut address).await?;
    let padding = read_varint(reader).await?;
    if padding > MAX_PADDING {
        return Err(ProtoError::BadPadding(padding));
    }
    skip(reader, padding).await?;
    String::from_utf8(address).map_err(|_| ProtoError::BadAddress)
}

/// A TCP response: status 0 (ok) or 1 (error) with a message, and a little padding.
pub fn tcp_response(ok: bool, message: &str) -> Vec<u8> {
    let mut out = vec![u8::from(!ok)];
    put_varint(&mut out, message.len() as u64);
    out.extend_from_slice(message.as_bytes());
    let padding = 16 + (rand_core::RngCore::next_u32(&mut rand_core::OsRng) % 48) as usize;
    put_varint(&mut out, padding as u64);
    out.resize(out.len() + padding, 0);
    out
}

/// A UDP message, one fragment of a client's (or a target's) datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpMessage {
    pub session: u32,
    pub packet: u16,
    pub fragment: u8,
    pub fragments: u8,
    pub address: String,
    pub payload: Vec<u8>,
}

impl UdpMessage {
    /// Parses one QUIC datagram.
    pub fn parse(bytes: &[u8]) -> Result<UdpMessage, ProtoError> {
        let bad = || ProtoError::BadDatagram;
        let header = bytes.get(..8).ok_or_else(bad)?;
        let session = u32::from_be_bytes(header[..4].try_into().map_err(|_| bad())?);
        let packet = u16::from_be_bytes(header[4..6].try_into().map_err(|_| bad())?);
        let (fragment, fragments) = (header[6], header[7]);
        if fragments == 0 || fragment >= fragments {
            return Err(bad());
        }
        let (len, used) = get_varint(&bytes[8..]).ok_or_else(bad)?;
        if len == 0 || len > MAX_ADDRESS {
            return Err(bad());
        }
        let start = 8 + used;
        let address = bytes.get(start..start + len as usize).ok_or_else(bad)?;
        let address = String::from_utf8(address.to_vec()).map_err(|_| ProtoError::BadAddress)?;
        Ok(UdpMessage {
            session,
            packet,
            fragment,
            fragments,
            address,
            payload: bytes[start + len as usize..].to_vec(),
        })
    }

    /// The header's length for `address`.
    pub fn header_len(address: &str) -> usize {
        let mut varint = Vec::new();
        put_varint(&mut varint, address.len() as u64);
        8 + varint.len() + address.len()
    }

    /// Encodes this message.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(UdpMessage::header_len(&self.address) + self.payload.len());
        out.extend_from_slice(&self.session.to_be_bytes());
        out.extend_from_slice(&self.packet.to_be_bytes());
        out.push(self.fragment);
        out.push(self.fragments);
        put_varint(&mut out, self.address.len() as u64);
        out.extend_from_slice(self.address.as_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Splits a datagram for `address` into messages that each fit `max` bytes (None when
    /// it would take more than 255 fragments).
    pub fn split(session: u32, packet: u16, address: &str, payload: &[u8], max: usize) -> Option<Vec<UdpMessage>> {
        let room = max.checked_sub(UdpMessage::header_len(address)).filter(|room| *room > 0)?;
        let count = payload.len().div_ceil(room).max(1);
        let fragments = u8::try_from(count).ok()?;
        Some(
            (0..count)
                .map(|i| UdpMessage {
                    session,
                    packet,
                    fragment: i as u8,
                    fragments,
                    address: address.to_owned(),
                    payload: payload[i * room..((i + 1) * room).min(payload.len())].to_vec(),
                })
                .collect(),
        )
    }
}

/// Reassembles fragmented datagrams of one session: a bounded number of packets in
/// flight; a packet whose fragments do not all arrive is dropped when a newer one needs room.
#[derive(Default)]
pub struct Reassembly {
    pending: Vec<Pending>,
}

/// A packet being reassembled: its id, its fragments so far, its address.
type Pending = (u16, Vec<Option<Vec<u8>>>, String);

/// Packets one session may hold half-assembled.
const PENDING_PACKETS: usize = 16;

impl Reassembly {
    /// Takes a fragment; returns the whole datagram (address and payload) once complete.
    pub fn push(&mut self, message: UdpMessage) -> Option<(String, Vec<u8>)> {
        if message.fragments == 1 {
            return Some((message.address, message.payload));
        }
        let at = match self
            .pending
            .iter()
            .position(|(id, parts, _)| *id == message.packet && parts.len() == usize::from(message.fragments))
        {
            Some(at) => at,
            None => {
                if self.pending.len() >= PENDING_PACKETS {
                    self.pending.remove(0);
                }
                self.pending.push((
                    message.packet,
                    vec![None; usize::from(message.fragments)],
                    message.address.clone(),
                ));
                self.pending.len() - 1
            }
        };
        self.pending[at].1[usize::from(message.fragment)] = Some(message.payload);
        if self.pending[at].1.iter().all(Option::is_some) {
            let (_, parts, address) = self.pending.remove(at);
            return Some((address, parts.into_iter().flatten().flatten().collect()));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varints_round_trip_at_every_width() {
        for value in [0, 63, 64, 16_383, 16_384, (1 << 30) - 1, 1 << 30, (1 << 62) - 1] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(get_varint(&out), Some((value, out.len())));
        }
        assert_eq!(get_varint(&[0x40]), None, "truncated");
    }

    #[tokio::test]
    async fn tcp_requests_parse_and_refuse_bad_ones() {
        let mut request = Vec::new();
        put_varint(&mut request, TCP_REQUEST);
        put_varint(&mut request, 14);
        request.extend_from_slice(b"example.com:80");
        put_varint(&mut request, 3);
        request.extend_from_slice(b"pad");
        request.extend_from_slice(b"GET / HTTP/1.1");
        let mut reader = &request[..];
        assert_eq!(read_tcp_request(&mut reader).await.unwrap(), "example.com:80");
        assert_eq!(reader, b"GET / HTTP/1.1", "the bytes after the header stay in the stream");

        let mut oversized = Vec::new();
        put_varint(&mut oversized, TCP_REQUEST);
        put_varint(&mut oversized, MAX_ADDRESS + 1);
        assert!(matches!(read_tcp_request(&mut &oversized[..]).await, Err(ProtoError::BadAddressLength(_))));
        let mut other = Vec::new();
        put_varint(&mut other, 0x402);
        assert!(matches!(read_tcp_request(&mut &other[..]).await, Err(ProtoError::NotTcp(0x402))));
    }

    #[test]
    fn datagrams_split_and_reassemble() {
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let parts = UdpMessage::split(7, 9, "127.0.0.1:53", &payload, 1200).unwrap();
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.encode().len() <= 1200));
        let mut reassembly = Reassembly::default();
        let mut whole = None;
        for part in parts.into_iter().rev() {
            let parsed = UdpMessage::parse(&part.encode()).unwrap();
            whole = reassembly.push(parsed);
        }
        assert_eq!(whole, Some(("127.0.0.1:53".to_owned(), payload)));
        assert!(UdpMessage::parse(&[0; 7]).is_err());
        assert!(UdpMessage::parse(&[0, 0, 0, 1, 0, 1, 2, 2, 1, b'x']).is_err(), "fragment id past the count");
    }

    proptest! {
        #[test]
        fn datagram_parsing_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = UdpMessage::parse(&bytes);
        }
    }
}
