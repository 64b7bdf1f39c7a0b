//! The Hysteria2 TCP request as the node reads it from a client's stream: any bytes give an
//! address within the limits (with the client's first bytes left in the stream) or a refusal,
//! and a request written back from what was read reads the same.
#![no_main]

use hearth_fuzz::block_on;
use hearth_node::proto::{MAX_ADDRESS, TCP_REQUEST, put_varint, read_tcp_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut stream = data;
    let Ok(address) = block_on(read_tcp_request(&mut stream)) else { return };
    assert!(!address.is_empty() && address.len() as u64 <= MAX_ADDRESS);
    let used = data.len() - stream.len();

    let mut request = Vec::new();
    put_varint(&mut request, TCP_REQUEST);
    put_varint(&mut request, address.len() as u64);
    request.extend_from_slice(address.as_bytes());
    put_varint(&mut request, 0);
    assert!(request.len() <= used, "the shortest form of a request is no longer than any other");
    request.extend_from_slice(stream);
    let mut again = &request[..];
    assert_eq!(block_on(read_tcp_request(&mut again)).ok().as_deref(), Some(address.as_str()));
    assert_eq!(again, stream, "the client's first bytes stay in the stream");
});
