//! The abuse guard: what a node refuses to carry for users whose group turns it on, because
//! it brings abuse complaints to the node's host: BitTorrent, and mail sent straight to port
//! 25. Whatever else the same user sends goes through untouched.
//!
//! BitTorrent is known by what its peers send first: the TCP handshake (`\x13BitTorrent
//! protocol`), a uTP connection's SYN (BEP 29), a DHT message (BEP 5) or a UDP tracker's
//! connect request (BEP 15). UDP is judged by the first datagram a client sends to each
//! destination: a QUIC, DNS or game flow never starts like one of those, so it is never
//! mistaken for BitTorrent, and a destination judged as BitTorrent gets nothing more from
//! that connection. Encrypted BitTorrent (MSE) looks like random bytes and is not caught;
//! nor are HTTP trackers.

/// The TCP handshake's first 20 bytes: the protocol name's length, then the name.
const HANDSHAKE: &[u8; 20] = b"\x13BitTorrent protocol";
/// A UDP tracker's connect request: the protocol id, then action 0 (connect).
const TRACKER_CONNECT: [u8; 12] = [0, 0, 0x04, 0x17, 0x27, 0x10, 0x19, 0x80, 0, 0, 0, 0];

/// Whether a TCP destination (`host:port`) is a mail server's port 25.
pub(crate) fn is_smtp(address: &str) -> bool {
    address.rsplit_once(':').is_some_and(|(_, port)| port == "25")
}

/// What the first bytes a client sends on a TCP stream say, as far as they go.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opening {
    /// The BitTorrent handshake.
    Torrent,
    /// Something else.
    Other,
    /// Too short to tell: a prefix of the handshake.
    Undecided,
}

/// Judges the first bytes a client sent on a TCP stream.
pub(crate) fn tcp_opening(first: &[u8]) -> Opening {
    let n = first.len().min(HANDSHAKE.len());
    if first[..n] != HANDSHAKE[..n] {
        Opening::Other
    } else if n == HANDSHAKE.len() {
        Opening::Torrent
    } else {
        Opening::Undecided
    }
}

/// Whether the first datagram a client sends to a destination opens BitTorrent: a DHT
/// message, a uTP SYN, or a UDP tracker's connect request.
pub(crate) fn is_torrent_datagram(payload: &[u8]) -> bool {
    is_dht(payload) || is_utp_syn(payload) || payload.get(..12) == Some(&TRACKER_CONNECT[..])
}

/// A DHT message: a bencoded dictionary with the message type key `y` (query, response or
/// error).
fn is_dht(payload: &[u8]) -> bool {
    payload.starts_with(b"d1:")
        && payload.ends_with(b"e")
        && [&b"1:y1:q"[..], b"1:y1:r", b"1:y1:e"].iter().any(|key| payload.windows(key.len()).any(|w| w == *key))
}

/// A uTP SYN: type 4 and version 1 in the first byte, no extension, the 20-byte header
/// alone (a SYN carries no data), and no timestamp difference yet (nothing was received). A
/// DNS query of 20 bytes would ask for a two-letter top-level name.
fn is_utp_syn(payload: &[u8]) -> bool {
    payload.len() == 20 && payload[0] == 0x41 && payload[1] == 0 && payload[8..12] == [0; 4]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tcp_handshake_is_known_by_its_first_twenty_bytes() {
        let mut handshake = HANDSHAKE.to_vec();
        handshake.extend([0; 8]);
        handshake.extend([0xab; 40]);
        assert_eq!(tcp_opening(&handshake), Opening::Torrent);
        assert_eq!(tcp_opening(&handshake[..20]), Opening::Torrent);
        assert_eq!(tcp_opening(&handshake[..7]), Opening::Undecided);
        for other in [&b"GET / HTTP/1.1\r\n"[..], b"\x16\x03\x01\x02\x00", b"\x13BitTorrent-ish!!!!!", b"SSH-2.0"] {
            assert_eq!(tcp_opening(other), Opening::Other, "{other:?}");
        }
    }

    #[test]
    fn dht_utp_and_tracker_datagrams_are_known_and_others_pass() {
        let ping = b"d1:ad2:id20:abcdefghij0123456789e1:q4:ping1:t2:aa1:y1:qe";
        let reply = b"d1:rd2:id20:mnopqrstuvwxyz123456e1:t2:aa1:y1:re";
        let mut syn = vec![0x41, 0, 0x12, 0x34, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 1, 0, 0];
        let mut connect = TRACKER_CONNECT.to_vec();
        connect.extend([9, 9, 9, 9]);
        for torrent in [&ping[..], reply, &syn, &connect] {
            assert!(is_torrent_datagram(torrent), "{torrent:?}");
        }
        // A QUIC Initial, a DNS query whose ID looks like a SYN's first bytes, a uTP packet
        // that is not a SYN, a short SYN, a SYN with data, and bencoding that is not the DHT.
        let quic = [0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x44, 0xe6, 0, 0, 0];
        let mut dns = vec![0x41, 0x00, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        dns.extend(b"\x07example\x03com\x00\x00\x01\x00\x01");
        let mut data = syn.clone();
        data[0] = 0x01;
        let mut long = syn.clone();
        long.push(7);
        syn.truncate(19);
        for other in [&quic[..], &dns, &data, &syn, &long, b"d4:spam4:eggse", b"hello"] {
            assert!(!is_torrent_datagram(other), "{other:?}");
        }
        assert!(is_smtp("mx.example:25") && is_smtp("[2001:db8::1]:25"));
        assert!(!is_smtp("mx.example:587") && !is_smtp("example:250") && !is_smtp("host25"));
    }
}
