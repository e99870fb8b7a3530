//! `lb table build`'s VIP options: the hash fields that pick a flow's slot (they make
//! the table's fingerprint the VIP's, as `lb status` shows it) and `--flow`, the slot
//! and backend the data plane picks for a flow to that VIP on a conntrack miss, from
//! the same `lb_common::hash_fields::table_hash` the XDP program runs
//! ([`lb_maglev::flow::table_slot_of`]). `lb flow` shows the same choice as its table
//! backend; a flow with a conntrack pin, a held SYN or (on a VIP with
//! `persistence_timeout_secs`) a live affinity pin of its client keeps that instead.

use std::net::SocketAddr;

use lb_common::hash_fields::HashFields;
use lb_hashlab::hashes::DEFAULT_FLOW_VIP;
use lb_maglev::{MaglevTable, flow};
use serde::Serialize;

use super::{TableCliError, parse_seed};
use crate::{cli::fields::HashFieldArgs, config::Protocol, defaults};

/// The VIP whose table `lb table build` builds, for its fingerprint and `--flow`.
#[derive(Debug, Clone, clap::Args)]
pub struct VipArgs {
    /// The VIP (ADDR:PORT): the flows' destination; its family bounds
    /// `--hash-source-prefix`.
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_FLOW_VIP)]
    pub vip: SocketAddr,
    /// The VIP's protocol: tcp or udp.
    #[arg(long, value_name = "PROTO", default_value = "tcp", value_parser = parse_protocol)]
    pub protocol: Protocol,
    /// Seed of the flow hash (lb.toml's `hash_seed`, 32 bits; decimal or 0x-hexadecimal).
    #[arg(long, value_name = "S", default_value_t = defaults::HASH_SEED, value_parser = parse_hash_seed)]
    pub hash_seed: u32,
    /// The VIP's hash fields.
    #[command(flatten)]
    pub fields: HashFieldArgs,
    /// Flows whose slot and backend to print: `CLIENT:PORT` or `[V6CLIENT]:PORT`,
    /// comma-separated or repeated.
    #[arg(long, value_name = "CLIENT:PORT", value_delimiter = ',')]
    pub flow: Vec<SocketAddr>,
}

/// One `--flow`'s prediction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowPrediction {
    /// The client, `ADDR:PORT` or `[V6ADDR]:PORT`.
    pub client: String,
    /// The table slot its hash picks, `0..size`.
    pub slot: u32,
    /// The slot's owner (the backend key), `null` for an empty table (dropped).
    pub backend: Option<String>,
}

impl VipArgs {
    /// The VIP's hash fields.
    ///
    /// # Errors
    /// [`TableCliError`] naming `--hash-source-prefix` ([`HashFieldArgs::resolve`]).
    pub fn hash_fields(&self) -> Result<HashFields, TableCliError> {
        self.fields
            .resolve(self.vip.ip())
            .map_err(|problem| TableCliError {
                argument: HashFieldArgs::PREFIX_OPTION.to_owned(),
                problem,
            })
    }

    /// The prediction of every `--flow` in `table`, for hash fields `fields`.
    ///
    /// # Errors
    /// [`TableCliError`] naming the `--flow` whose family is not the VIP's.
    pub fn predict(
        &self,
        table: &MaglevTable,
        fields: HashFields,
    ) -> Result<Vec<FlowPrediction>, TableCliError> {
        self.flow
            .iter()
            .map(|&client| {
                let key =
                    flow::flow_key(client, self.vip, self.protocol.number()).ok_or_else(|| {
                        TableCliError {
                            argument: format!("--flow {client}"),
                            problem: format!("not of the family of --vip {}", self.vip),
                        }
                    })?;
                let slot = flow::table_slot_of(&key, fields, self.hash_seed, table.size())
                    .unwrap_or_default();
                Ok(FlowPrediction {
                    client: client.to_string(),
                    slot,
                    backend: table.owner(slot).map(|b| b.key.to_string()),
                })
            })
            .collect()
    }
}

fn parse_protocol(text: &str) -> Result<Protocol, String> {
    text.parse()
}

/// `--hash-seed`: a 32-bit seed, decimal or 0x-hexadecimal.
fn parse_hash_seed(text: &str) -> Result<u32, String> {
    let seed = parse_seed(text)?;
    u32::try_from(seed).map_err(|_| format!("{text:?} is wider than the flow hash's 32-bit seed"))
}
