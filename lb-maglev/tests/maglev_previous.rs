//! The builder's tables stay exactly those of the builder before its second speed-up
//! (the one-function-per-turn fill with phase checks in every turn, commit 81f4c8a):
//! one digest over the tables of 240 random inputs (sizes from 2 to 65,537, up to 1,000
//! backends, IPv4 and IPv6 keys with and without ports, equal, small, drained and huge
//! weights, random seeds), computed with that builder and frozen here. Any change of
//! any slot, slot count or backend order in any of them changes the digest.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_maglev::{Backend, BackendKey, MaglevTable};
use sha2::{Digest as _, Sha256};

/// A deterministic generator (PCG-style LCG; the high bits).
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn index(&mut self, n: u64) -> usize {
        usize::try_from(self.below(n)).expect("below n, a small number")
    }
}

const SIZES: [u32; 10] = [2, 7, 101, 257, 1_009, 2_003, 7_919, 10_007, 20_011, 65_537];

fn backends(random: &mut Random, size: u32) -> Vec<Backend> {
    let n = 1 + random.index(u64::from(size.min(1_000)));
    let weights = random.below(4);
    let mut out: Vec<Backend> = Vec::with_capacity(n);
    while out.len() < n {
        let ip = if random.below(3) == 0 {
            IpAddr::V6(Ipv6Addr::from(
                (0x2001_0db8_u128 << 96) | u128::from(random.next()),
            ))
        } else {
            IpAddr::V4(Ipv4Addr::from(
                u32::try_from(random.next()).expect("33 bits shifted out"),
            ))
        };
        let port =
            (random.below(2) == 0).then(|| u16::try_from(random.below(65_536)).expect("16 bits"));
        let key = BackendKey::new(ip, port);
        if out.iter().any(|b| b.key == key) {
            continue;
        }
        let weight = match weights {
            0 => 1,
            1 => u32::try_from(random.below(11)).expect("small"),
            2 => 1 + u32::try_from(random.below(1_000_000)).expect("small"),
            _ => [0, 1, u32::MAX][random.index(3)],
        };
        out.push(Backend::new(key, weight));
    }
    out
}

#[test]
fn tables_equal_the_previous_builders() {
    let mut random = Random(0x6c62_7065_7266_6370);
    let mut digest = Sha256::new();
    for case in 0..240 {
        let size = SIZES[case % SIZES.len()];
        let backends = backends(&mut random, size);
        let seed = random.next();
        let table = MaglevTable::build(&backends, size, seed).expect("valid input");
        digest.update(table.fingerprint().as_bytes());
        for b in table.backends() {
            digest.update(b.key.to_string().as_bytes());
        }
        for &count in table.slot_counts() {
            digest.update(count.to_le_bytes());
        }
        for &slot in table.slots() {
            digest.update(slot.to_le_bytes());
        }
    }
    let digest: [u8; 32] = digest.finalize().into();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex,
        "1577cdb9ab338d38522eb17c79d28f7344e6273d1d224d24ed339ef9d7739667"
    );
}
