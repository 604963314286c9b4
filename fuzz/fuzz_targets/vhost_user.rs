//! vhost-user messages from an untrusted frontend: the input is a stream of
//! messages (header and the payload its size announces, and one byte before
//! each saying how many descriptors "came with it"), each decoded with
//! `Message::decode`; what decodes is encoded again and must decode to the
//! same message, then goes to a `Backend` (with no descriptors, so memory
//! tables and eventfds are refused) to drive its state machine. Nothing may
//! panic; every refusal is a typed error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::vhost_user::message::{HEADER_LEN, MAX_PAYLOAD, Message};
use sluice::vhost_user::{Backend, BackendConfig, protocol_features};

fuzz_target!(|data: &[u8]| {
    let mut backend = Backend::new(BackendConfig {
        features: 1 << 32,
        protocol_features: protocol_features::MQ
            | protocol_features::REPLY_ACK
            | protocol_features::MTU
            | protocol_features::RARP,
        queue_pairs: 2,
    });
    let mut rest = data;
    while let Some((&fds, after)) = rest.split_first() {
        if after.len() < HEADER_LEN {
            break;
        }
        let (header, after) = after.split_at(HEADER_LEN);
        let header: &[u8; HEADER_LEN] = header.try_into().unwrap();
        let size = (u32::from_le_bytes(header[8..12].try_into().unwrap()) as usize)
            .min(MAX_PAYLOAD)
            .min(after.len());
        let (payload, after) = after.split_at(size);
        rest = after;
        let Ok(msg) = Message::decode(header, payload, usize::from(fds % 10)) else {
            continue;
        };
        let bytes = msg.encode();
        let (h, p) = bytes.split_at(HEADER_LEN);
        let again = Message::decode(h.try_into().unwrap(), p, msg.body.fds_needed()).unwrap();
        assert_eq!(again, msg);
        if msg.body.fds_needed() == 0 {
            let _ = backend.handle(&msg, Vec::new(), &mut ());
        }
    }
    backend.stop_all(&mut ());
});
