//! Fixed slots as Redis Cluster places keys (the Redis Cluster specification, "Key
//! distribution model" and "Hash tags"): `slot = CRC16(key) mod 16384`, CRC16 being the
//! XMODEM variant (polynomial 0x1021, initial value 0, no reflection, no final XOR), and a
//! slot-to-node table. When a key holds a `{...}` with at least one byte between the first
//! `{` and the first `}` after it, only those bytes are hashed (a hash tag), so that
//! related keys share a slot. Rebalancing moves whole slots between nodes; the rule from
//! key to slot never changes.
//!
//! This module is the model only (tested against Redis's documented values); it is not
//! yet one of `lb hash`'s `--schemes`.

/// Slots of a Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// CRC16/XMODEM of `bytes` (check value: `"123456789"` gives 0x31C3).
#[must_use]
pub fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The bytes of `key` that are hashed: the hash tag when there is one, else the key.
#[must_use]
pub fn hashed_part(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The slot of `key`, in `0..16384`.
#[must_use]
pub fn key_slot(key: &[u8]) -> u16 {
    crc16_xmodem(hashed_part(key)) % SLOTS
}

/// A slot-to-node table: the owner (node index) of every slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotTable {
    owners: Vec<u32>,
}

impl SlotTable {
    /// `nodes` nodes (>= 1) owning contiguous ranges, node `i` the `i`-th range, the
    /// first `16384 mod nodes` ranges one slot longer (as `redis-cli --cluster create`
    /// splits them).
    #[must_use]
    pub fn even(nodes: u32) -> Self {
        let nodes = nodes.max(1);
        let (base, extra) = (u32::from(SLOTS) / nodes, u32::from(SLOTS) % nodes);
        let mut owners = Vec::with_capacity(usize::from(SLOTS));
        for node in 0..nodes {
            let count = base + u32::from(node < extra);
            owners.extend(std::iter::repeat_n(node, count as usize));
        }
        Self { owners }
    }

    /// The owner of `slot`.
    #[must_use]
    pub fn owner(&self, slot: u16) -> u32 {
        self.owners[usize::from(slot)]
    }

    /// Slots per node, for `nodes` nodes.
    #[must_use]
    pub fn counts(&self, nodes: u32) -> Vec<u32> {
        let mut counts = vec![0; nodes as usize];
        for &o in &self.owners {
            if let Some(c) = counts.get_mut(o as usize) {
                *c += 1;
            }
        }
        counts
    }

    /// A new node (index `nodes`) joins and takes `16384 / (nodes + 1)` whole slots,
    /// walking the table from its end and taking slots only from nodes that hold more
    /// than that share. Returns the slots moved (all to the new node).
    pub fn add_node(&mut self, nodes: u32) -> u32 {
        let target = u32::from(SLOTS) / (nodes + 1);
        let mut counts = self.counts(nodes);
        let mut moved = 0;
        for slot in (0..self.owners.len()).rev() {
            if moved == target {
                break;
            }
            let owner = self.owners[slot] as usize;
            if counts.get(owner).is_some_and(|&c| c > target) {
                counts[owner] -= 1;
                self.owners[slot] = nodes;
                moved += 1;
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_documented_values() {
        // The CRC16 check value the Redis Cluster specification gives.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        // CLUSTER KEYSLOT's documented examples, and "foo".
        assert_eq!(key_slot(b"somekey"), 11_058);
        assert_eq!(key_slot(b"foo{hash_tag}"), 2_515);
        assert_eq!(key_slot(b"foo"), 12_182);
    }

    #[test]
    fn hash_tags_follow_the_specification() {
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(hashed_part(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hashed_part(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hashed_part(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hashed_part(b"no tag"), b"no tag");
    }

    #[test]
    fn adding_a_node_moves_whole_slots_to_it_only() {
        let mut table = SlotTable::even(3);
        assert_eq!(table.counts(3), [5_462, 5_461, 5_461]);
        let before = table.clone();
        let moved = table.add_node(3);
        assert_eq!(moved, 4_096);
        let counts = table.counts(4);
        assert_eq!(counts.iter().sum::<u32>(), 16_384);
        assert!(
            counts.iter().all(|&c| (4_096..=4_097).contains(&c)),
            "{counts:?}"
        );
        for slot in 0..SLOTS {
            let (a, b) = (before.owner(slot), table.owner(slot));
            assert!(a == b || b == 3, "slot {slot}: {a} -> {b}");
        }
    }
}
