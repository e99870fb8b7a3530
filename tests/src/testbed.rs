//! The end-to-end test bed (being built): building blocks for namespaces of clients, a
//! load balancer and backends joined by a bridge.

pub mod client;
pub mod decap;
pub mod offload;
pub mod plumbing;
pub mod server;
