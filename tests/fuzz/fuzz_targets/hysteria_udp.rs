//! Hysteria2 UDP messages as the node takes them from QUIC datagrams. The input is datagrams,
//! each after its length (two bytes, big-endian), all for one session: each is refused or
//! parsed to a message within bounds that encodes to one parsing the same, and reassembly
//! gives whole packets made only of what arrived. Each parsed message's payload, split again
//! for a datagram size taken from it, reassembles (fragments in reverse order) to itself.
#![no_main]

use hearth_node::proto::{MAX_ADDRESS, Reassembly, UdpMessage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reassembly = Reassembly::default();
    let mut rest = data;
    while let [high, low, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*high, *low])).min(tail.len());
        let (datagram, tail) = tail.split_at(len);
        rest = tail;
        let Ok(message) = UdpMessage::parse(datagram) else { continue };
        assert!(message.fragment < message.fragments);
        assert!(!message.address.is_empty() && message.address.len() as u64 <= MAX_ADDRESS);
        assert_eq!(UdpMessage::parse(&message.encode()).ok().as_ref(), Some(&message));
        split_and_join(&message);
        if let Some((address, payload)) = reassembly.push(message) {
            assert!(!address.is_empty() && address.len() as u64 <= MAX_ADDRESS);
            assert!(payload.len() <= data.len(), "a packet is made of what arrived, once");
        }
    }
});

/// A target's answer to the client, split to fit its datagrams and put back together.
fn split_and_join(message: &UdpMessage) {
    let max = UdpMessage::header_len(&message.address) + 1 + usize::from(message.packet % 1400);
    let Some(mut parts) = UdpMessage::split(message.session, message.packet, &message.address, &message.payload, max)
    else {
        assert!(message.payload.len() > 255 * (max - UdpMessage::header_len(&message.address)), "split refused");
        return;
    };
    assert!(parts.iter().all(|part| part.encode().len() <= max), "every fragment fits");
    parts.reverse();
    let mut reassembly = Reassembly::default();
    let mut whole = None;
    for (i, part) in parts.iter().enumerate() {
        let parsed = UdpMessage::parse(&part.encode()).expect("a fragment the node made parses");
        whole = reassembly.push(parsed);
        assert_eq!(whole.is_some(), i + 1 == parts.len(), "whole only with the last fragment");
    }
    assert_eq!(whole, Some((message.address.clone(), message.payload.clone())));
}
