//! Salamander on the node's receive path. The input: the password's length (one byte) and the
//! password, a stride (two bytes, big-endian), then bytes as they arrive from anyone, coalesced
//! at that stride. They are opened or dropped without a panic and never grow. Then the same
//! bytes, cut at the stride into packets, sealed with the password and coalesced as GRO hands
//! them over (the last one maybe shorter), open to themselves.
#![no_main]

use std::sync::{Arc, LazyLock};

use hearth_node::salamander::Salamander;
use libfuzzer_sys::fuzz_target;

/// The socket under every Salamander here: a real one on loopback (nothing is sent), with the
/// runtime it belongs to, kept for the whole run.
static SOCKET: LazyLock<(tokio::runtime::Runtime, Arc<dyn quinn::AsyncUdpSocket>)> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let socket = {
        let _guard = runtime.enter();
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
        quinn::Runtime::wrap_udp_socket(&quinn::TokioRuntime, socket).expect("wrapped")
    };
    (runtime, socket)
});

fuzz_target!(|data: &[u8]| {
    let Some((&password_len, rest)) = data.split_first() else { return };
    let (password, rest) = rest.split_at(usize::from(password_len).min(rest.len()));
    let [high, low, received @ ..] = rest else { return };
    let stride = usize::from(u16::from_be_bytes([*high, *low]));
    let salamander = Salamander::new(SOCKET.1.clone(), &String::from_utf8_lossy(password));

    let mut buf = received.to_vec();
    let (opened, new_stride) = salamander.open_in_place(&mut buf, received.len(), stride);
    assert!(opened <= received.len() && new_stride <= stride.max(1));

    let packets: Vec<&[u8]> = received.chunks(stride.max(1)).collect();
    let sealed: Vec<Vec<u8>> = packets.iter().map(|packet| salamander.seal(packet)).collect();
    for (packet, sealed) in packets.iter().zip(&sealed) {
        let mut buf = sealed.clone();
        let len = buf.len();
        let (opened, _) = salamander.open_in_place(&mut buf, len, len);
        assert_eq!(&buf[..opened], *packet, "a sealed packet opens to itself");
    }
    let Some(first) = sealed.first() else { return };
    let mut buf: Vec<u8> = sealed.concat();
    let len = buf.len();
    let (opened, _) = salamander.open_in_place(&mut buf, len, first.len());
    assert_eq!(&buf[..opened], received, "coalesced packets open to themselves");
});
