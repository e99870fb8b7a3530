//! `GET /v1/trace`'s body: one JSON line per control [`Response`] of the trace's
//! stream (first the filter applied, then one line per traced packet), written as the
//! lines arrive (HTTP/1.1 chunked). A refusal inside the stream becomes an
//! `{"error": ...}` line and ends it. When the client goes away hyper drops the body,
//! and with it the receiver, which the daemon's tracer sees as a closed channel.

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
};

use hyper::body::{Body, Bytes, Frame};
use tokio::sync::mpsc;

use super::routes::Endpoint;
use crate::control::Response;

/// The streaming body.
pub struct Lines {
    lines: mpsc::Receiver<Response>,
    endpoint: Endpoint,
    done: bool,
}

impl Lines {
    /// The body of `lines`, each printed as `endpoint`'s answers are.
    pub fn new(lines: mpsc::Receiver<Response>, endpoint: Endpoint) -> Self {
        Self {
            lines,
            endpoint,
            done: false,
        }
    }

    /// One response as its line.
    fn line(&mut self, response: Response) -> Bytes {
        let encoded = match (response.ok, response.data) {
            (true, Some(data)) => self.endpoint.answer(data),
            (_, _) => Err(response.error.unwrap_or_else(|| "refused".into())),
        };
        let mut line = encoded.unwrap_or_else(|e| {
            self.done = true;
            serde_json::to_vec(&serde_json::json!({ "error": e })).unwrap_or_default()
        });
        line.push(b'\n');
        Bytes::from(line)
    }
}

impl Body for Lines {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.lines.poll_recv(cx) {
            Poll::Ready(Some(response)) => {
                let line = self.line(response);
                Poll::Ready(Some(Ok(Frame::data(line))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
