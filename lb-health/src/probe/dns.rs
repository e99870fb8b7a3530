//! DNS over UDP (RFC 1035 section 4.2.1): one query with a fresh id, success on the
//! first datagram that is a well-formed response with that id, whatever its response
//! code (NXDOMAIN and SERVFAIL are answers: the server is up). Messages are built and
//! parsed by hickory-proto.

use std::hash::{BuildHasher as _, Hasher as _, RandomState};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use tokio::net::UdpSocket;

use crate::{
    outcome::{Failure, Stage},
    settings::DnsCheck,
};

/// Largest answer read: 4,096 bytes (a UDP answer without EDNS is at most 512; with
/// EDNS, 4,096 is the common advertised size, RFC 6891 section 6.2.5).
const MAX_ANSWER: usize = 4_096;

/// The wire form of a query for `check` with id `id`, recursion desired.
pub(super) fn query(check: &DnsCheck, id: u16) -> Vec<u8> {
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(check.name.clone(), check.record_type));
    // A query of one name and a fixed type always encodes.
    message.to_vec().unwrap_or_default()
}

/// Checks that `answer` is a well-formed response to the query with id `id`.
///
/// # Errors
/// [`Failure::DnsMalformed`] or [`Failure::DnsWrongId`].
pub(super) fn check_answer(answer: &[u8], id: u16) -> Result<(), Failure> {
    let message = Message::from_vec(answer).map_err(|e| Failure::DnsMalformed(e.to_string()))?;
    if message.metadata.message_type != MessageType::Response {
        return Err(Failure::DnsMalformed("a query, not a response".to_owned()));
    }
    if message.metadata.id != id {
        return Err(Failure::DnsWrongId {
            sent: id,
            got: message.metadata.id,
        });
    }
    Ok(())
}

/// Sends the query on `socket` (connected) and checks the first answer.
///
/// # Errors
/// The answer's failure, or a socket error ([`Failure::Refused`] for ICMP port
/// unreachable).
pub(super) async fn exchange(
    socket: &UdpSocket,
    check: &DnsCheck,
    stage: &mut Stage,
) -> Result<(), Failure> {
    let id = fresh_id();
    socket
        .send(&query(check, id))
        .await
        .map_err(|e| Failure::from_io(Stage::Connect, &e))?;
    *stage = Stage::Answer;
    let mut buf = vec![0u8; MAX_ANSWER];
    let n = socket
        .recv(&mut buf)
        .await
        .map_err(|e| Failure::from_io(Stage::Answer, &e))?;
    check_answer(&buf[..n], id)
}

/// A query id that differs from probe to probe and from process to process (std's
/// random hasher keys: a fresh key pair per call).
fn fresh_id() -> u16 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u8(0);
    let [a, b, ..] = hasher.finish().to_le_bytes();
    u16::from_le_bytes([a, b])
}

#[cfg(test)]
mod tests {
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    fn check() -> DnsCheck {
        DnsCheck {
            name: Name::from_ascii("health.example.com.").unwrap(),
            record_type: RecordType::A,
        }
    }

    fn response_to(query: &[u8], id: u16) -> Vec<u8> {
        let q = Message::from_vec(query).unwrap();
        let mut r = Message::response(id, OpCode::Query);
        r.add_queries(q.queries);
        r.metadata.response_code = hickory_proto::op::ResponseCode::NXDomain;
        r.to_vec().unwrap()
    }

    #[test]
    fn a_query_round_trips_and_any_well_formed_response_counts() {
        let q = query(&check(), 0xbeef);
        let parsed = Message::from_vec(&q).unwrap();
        assert_eq!(parsed.metadata.id, 0xbeef);
        assert_eq!(parsed.queries[0].name().to_ascii(), "health.example.com.");
        assert_eq!(check_answer(&response_to(&q, 0xbeef), 0xbeef), Ok(()));
    }

    #[test]
    fn wrong_ids_queries_and_garbage_fail() {
        let q = query(&check(), 0xbeef);
        assert_eq!(
            check_answer(&response_to(&q, 0x1234), 0xbeef),
            Err(Failure::DnsWrongId {
                sent: 0xbeef,
                got: 0x1234
            })
        );
        assert_eq!(
            check_answer(&q, 0xbeef),
            Err(Failure::DnsMalformed("a query, not a response".to_owned()))
        );
        assert!(matches!(
            check_answer(b"\xbe\xef\x81\x80garbage", 0xbeef),
            Err(Failure::DnsMalformed(_))
        ));
        assert!(matches!(
            check_answer(b"", 0xbeef),
            Err(Failure::DnsMalformed(_))
        ));
    }

    #[test]
    fn ids_vary() {
        let ids: std::collections::HashSet<u16> = (0..64).map(|_| fresh_id()).collect();
        assert!(ids.len() > 32, "{ids:?}");
    }
}
