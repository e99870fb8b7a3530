//! The wire format, and the bounds on what one connection can make the daemon hold.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{
    server::{Limits, ServeError, serve},
    *,
};

#[test]
fn requests_round_trip_as_tagged_json() {
    let r = Request::Backend {
        action: BackendAction::Drain,
        vip: "203.0.113.10:80/tcp".parse().unwrap(),
        backend: "198.51.100.11".parse().unwrap(),
        weight: None,
        timeout_secs: None,
        keep: false,
    };
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(
        text,
        r#"{"command":"backend","action":"drain","vip":"203.0.113.10:80/tcp","backend":"198.51.100.11","weight":null}"#
    );
    assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r);
    assert_eq!(
        serde_json::to_string(&Request::Status).unwrap(),
        r#"{"command":"status"}"#
    );
    let flow = Request::Flow {
        vip: "[2001:db8:f::10]:53/udp".parse().unwrap(),
        client: "[2001:db8::7]:40000".parse().unwrap(),
    };
    let text = serde_json::to_string(&flow).unwrap();
    assert_eq!(
        text,
        r#"{"command":"flow","vip":"[2001:db8:f::10]:53/udp","client":"[2001:db8::7]:40000"}"#
    );
    assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), flow);
}

#[test]
fn unreadable_arguments_refuse_the_whole_request() {
    for (text, expected) in [
        (
            r#"{"command":"backend","action":"add","vip":"203.0.113.10","backend":"198.51.100.13","weight":null}"#,
            "expected ADDR:PORT/PROTO (e.g. 203.0.113.10:80/tcp), got \"203.0.113.10\"",
        ),
        (
            r#"{"command":"backend","action":"add","vip":"203.0.113.10:80/tcp","backend":"bogus","weight":null}"#,
            "invalid backend address \"bogus\"",
        ),
        (
            r#"{"command":"flow","vip":"203.0.113.10:80/tcp","client":"192.0.2.10"}"#,
            "invalid socket address syntax",
        ),
        (r#"{"command":"reboot"}"#, "unknown variant `reboot`"),
    ] {
        let err = serde_json::from_str::<Request>(text)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

/// Runs [`serve`] on one end of an in-memory connection with `limits`; `client` drives
/// the other end. Returns what `serve` returned, whether the handler ran, and what the
/// client read back.
async fn exchange(
    limits: Limits,
    client: impl AsyncFnOnce(&mut tokio::io::DuplexStream),
) -> (Result<(), ServeError>, bool, String) {
    let (mut near, far) = tokio::io::duplex(4096);
    let mut handled = false;
    let server = serve(far, limits, |_| {
        handled = true;
        Response::ok("pong")
    });
    let client = async {
        client(&mut near).await;
        let mut answer = String::new();
        let _ = near.read_to_string(&mut answer).await;
        answer
    };
    let (result, answer) = tokio::join!(server, client);
    (result, handled, answer)
}

const SHORT: Limits = Limits {
    max_request_bytes: 1024,
    idle_timeout: Duration::from_millis(200),
};

#[tokio::test]
async fn a_request_is_answered_and_the_connection_closed() {
    let (result, handled, answer) = exchange(SHORT, async |c| {
        c.write_all(b"{\"command\":\"status\"}\n").await.unwrap();
    })
    .await;
    assert!(result.is_ok(), "{result:?}");
    assert!(handled);
    assert_eq!(answer, "{\"ok\":true,\"data\":\"pong\"}\n");
}

#[tokio::test]
async fn a_request_over_the_size_limit_is_refused_without_reading_it_whole() {
    // The client keeps writing (as a 512 MiB request would): the daemon stops after the
    // limit, answers and closes, long before the client is done.
    let started = Instant::now();
    let (result, handled, answer) = exchange(SHORT, async |c| {
        let chunk = [b'x'; 4096];
        for _ in 0..(512 << 20) / chunk.len() {
            if c.write_all(&chunk).await.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(
        matches!(result, Err(ServeError::TooLarge(1024))),
        "{result:?}"
    );
    assert!(!handled, "an oversized request never reaches the handler");
    assert_eq!(
        answer,
        "{\"ok\":false,\"error\":\"request larger than 1024 bytes\"}\n"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_request_of_exactly_the_limit_is_read() {
    let request = b"{\"command\":\"status\"}";
    let limits = Limits {
        max_request_bytes: request.len(),
        ..SHORT
    };
    let (result, handled, _) = exchange(limits, async |c| {
        c.write_all(request).await.unwrap();
        c.write_all(b"\n").await.unwrap();
    })
    .await;
    assert!(result.is_ok(), "{result:?}");
    assert!(handled);
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_timeout() {
    // Silent, then a slow trickle that never completes a line: both are cut off.
    for trickle in [false, true] {
        let started = Instant::now();
        let (result, handled, answer) = exchange(SHORT, async |c| {
            if trickle {
                for _ in 0..20 {
                    if c.write_all(b" ").await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            } else {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        assert!(
            matches!(result, Err(ServeError::Timeout(t)) if t == SHORT.idle_timeout),
            "{result:?}"
        );
        assert!(!handled);
        assert!(
            answer.contains("no complete request within 200ms"),
            "{answer}"
        );
        let waited = started.elapsed();
        assert!(waited >= SHORT.idle_timeout, "{waited:?}");
    }
}

#[tokio::test]
async fn a_malformed_request_is_answered_with_the_reason() {
    let (result, handled, answer) = exchange(SHORT, async |c| {
        c.write_all(b"{\"command\":\"status\"\n").await.unwrap();
    })
    .await;
    assert!(
        matches!(result, Err(ServeError::Malformed(_))),
        "{result:?}"
    );
    assert!(!handled);
    assert!(
        answer.starts_with("{\"ok\":false,\"error\":\"bad request: "),
        "{answer}"
    );
}

#[tokio::test]
async fn a_probe_that_sends_nothing_gets_no_answer() {
    let (result, handled, answer) = exchange(SHORT, async |c| {
        c.shutdown().await.unwrap();
    })
    .await;
    assert!(matches!(result, Err(ServeError::Closed)), "{result:?}");
    assert!(!handled);
    assert_eq!(answer, "");
}

#[tokio::test]
async fn a_change_request_hands_its_id_to_the_handler_and_others_none() {
    for (line, expected) in [
        (
            &b"{\"command\":\"overrides\",\"clear\":true,\"change_id\":\"7-abc\"}\n"[..],
            Some("7-abc".to_owned()),
        ),
        (&b"{\"command\":\"status\"}\n"[..], None),
    ] {
        let (mut near, far) = tokio::io::duplex(4096);
        let mut seen = None;
        let server = server::serve_streaming(far, SHORT, |_, id| {
            seen = Some(id.map(ToOwned::to_owned));
            server::Reply::Once(Response::ok("done"))
        });
        let client = async {
            near.write_all(line).await.expect("write");
            let mut answer = String::new();
            let _ = near.read_to_string(&mut answer).await;
        };
        let (result, ()) = tokio::join!(server, client);
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(seen, Some(expected));
    }
}
