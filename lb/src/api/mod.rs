//! The remote API: the CLI's operations as HTTP/JSON over TLS, served by `lb run` when
//! `[api]` is enabled (the book's docs/src/guide/api.md).
//!
//! - [`server`]: connections, TLS, limits, and each request from authentication to
//!   answer; the daemon hands it a [`Service`] that answers control requests exactly as
//!   the unix socket does, so the API and the CLI run the same code and print the same
//!   JSON.
//! - [`routes`]: the operations (method, path, role, control request, answer type).
//! - [`auth`]: bearer tokens and client certificates, and their roles.
//! - [`idempotency`]: the cache that makes a retried change apply once.
//! - [`stream`]: the trace's body of JSON lines.
//! - [`tls`]: the rustls configuration (ring provider) and client certificates.
//! - [`openapi`]: the OpenAPI 3 document, generated from the types.
//! - [`client`]: the client side, the transport of `lb --remote URL` and `lb fleet`.
//!
//! Place in the layering: above `control` and `config`, below `daemon`, which starts
//! the server; it imports nothing from the daemon.

pub mod auth;
pub mod client;
pub mod idempotency;
pub mod openapi;
pub mod routes;
pub mod server;
pub mod stream;
pub mod tls;

pub use server::{Server, Service};
