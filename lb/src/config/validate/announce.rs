//! `[announce]`: the routing table and route protocol of the announced VIP addresses.
//! Both must be numbers no one else uses for routes that forward: the kernel's own
//! tables (`local` 255, `main` 254, `default` 253, and 0, "unspecified") and the route
//! protocols the kernel reserves (0 to 4: `unspec`, `redirect`, `kernel`, `boot`,
//! `static`, per `rtnetlink.h`) are refused, and so is 12 (`bird`): BIRD takes routes
//! of its own protocol number for its own and never learns them.

use super::{Report, uint};
use crate::{
    config::announce::{Announce, AnnounceFile},
    defaults,
};

/// Tables the kernel uses itself.
const RESERVED_TABLES: [u32; 4] = [0, 253, 254, 255];
/// Route protocol numbers BIRD would not learn, or that the kernel reserves.
const RESERVED_PROTOCOLS: [u16; 6] = [0, 1, 2, 3, 4, 12];

/// `[announce]`.
pub(super) fn announce(file: &AnnounceFile, r: &mut Report) -> Announce {
    let table = uint(file.table, defaults::ANNOUNCE_TABLE);
    if RESERVED_TABLES.contains(&table) {
        r.error(
            "announce.table",
            format!(
                "expected a routing table of its own (1 to 4294967295 but 253, 254 and 255, \
                 the kernel's default, main and local tables), got {table}"
            ),
        );
    }
    let protocol = uint(file.protocol, defaults::ANNOUNCE_PROTOCOL.into());
    let valid = u8::try_from(protocol)
        .ok()
        .filter(|_| !RESERVED_PROTOCOLS.contains(&protocol));
    if valid.is_none() {
        r.error(
            "announce.protocol",
            format!(
                "expected a route protocol number from 5 to 255 but 12 (0 to 4 are the \
                 kernel's, 12 is BIRD's own, which BIRD never learns), got {protocol}"
            ),
        );
    }
    Announce {
        enabled: file.enabled.unwrap_or(defaults::ANNOUNCE_ENABLED),
        table,
        protocol: valid.unwrap_or(defaults::ANNOUNCE_PROTOCOL),
    }
}
