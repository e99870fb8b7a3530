//! The remote API's hook in the daemon: the [`crate::api::Service`] that answers the
//! API's requests with the control socket's own handling (`answer`), so both run the
//! same code, log the same lines and print the same JSON.

use std::sync::Arc;

use tracing::info;

use super::{Context, Shared, answer};
use crate::{
    api::{Server, Service},
    control::{Request, server::Reply},
};

/// The daemon's service as the API sees it.
struct Remote {
    service: Shared,
    context: Context,
}

impl Service for Remote {
    fn handle(&self, request: &Request) -> Reply {
        answer(request, None, &self.service, &self.context)
    }
}

/// Starts serving the API on the daemon's runtime.
pub(super) fn spawn(server: Server, service: &Shared, context: &Context) {
    if let Ok(addr) = server.local_addr() {
        info!("remote API at https://{addr}/v1/");
    }
    let remote = Remote {
        service: Arc::clone(service),
        context: context.clone(),
    };
    tokio::spawn(server.serve(Arc::new(remote)));
}

#[cfg(test)]
mod tests;
