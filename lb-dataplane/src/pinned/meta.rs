//! The pin directory's own maps, created by userspace (not part of the eBPF object):
//!
//! - `meta`: one [`Meta`] element — the layout the maps were created with (format,
//!   layout version, stamp digest), a random instance id, the table epoch counter and
//!   the attach mode. It is pinned right after the object's maps are created and
//!   before anything is attached, so a directory with maps but no `meta` is a start
//!   that failed half-way, safe to discard.
//! - `owner`: one [`Owner`] element — the pid and control socket of the daemon that
//!   holds the directory's lock, and whether it is exiting; read by a second `lb run`
//!   to name the daemon in its refusal.
//! - `record`: the controller's record (opaque bytes), replaced whole by one rename
//!   (see [`store_record`]).
//! - `programs`: one [`Programs`] element — which build's programs run, by the
//!   kernel's program ids, so that a restart of the same build keeps them (see
//!   `dataplane::kernel::programs`).
//!
//! Values are encoded field by field, little-endian, at the offsets documented on each
//! type.

use std::{
    io,
    os::fd::{AsFd as _, OwnedFd},
    path::Path,
};

use super::super::bpf_sys::{self, BPF_MAP_TYPE_ARRAY, MapShape};

/// `meta` element (64 bytes): `magic` 0..8 (`lb-meta\0`), `format` 8..12,
/// `layout_version` 12..16, `digest` 16..48, `instance` 48..56, `epoch` 56..60,
/// `attach_mode` 60..64.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// [`super::layout::FORMAT`] of the creator.
    pub format: u32,
    /// `lb_common::maps::LAYOUT_VERSION` of the creator.
    pub layout_version: u32,
    /// The layout digest of the creator's object.
    pub digest: [u8; 32],
    /// Random id of this datapath, drawn when it was created.
    pub instance: u64,
    /// The table epoch last given out (see `dataplane::tables`); a new install takes a
    /// larger one, so no conntrack entry ever meets a reused epoch.
    pub epoch: u32,
    /// 0: not attached yet, 1: native, 2: skb.
    pub attach_mode: u32,
}

const MAGIC: &[u8; 8] = b"lb-meta\0";
const META_BYTES: usize = 64;

impl Meta {
    fn encode(&self) -> [u8; META_BYTES] {
        let mut b = [0u8; META_BYTES];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&self.format.to_le_bytes());
        b[12..16].copy_from_slice(&self.layout_version.to_le_bytes());
        b[16..48].copy_from_slice(&self.digest);
        b[48..56].copy_from_slice(&self.instance.to_le_bytes());
        b[56..60].copy_from_slice(&self.epoch.to_le_bytes());
        b[60..64].copy_from_slice(&self.attach_mode.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < META_BYTES || &b[0..8] != MAGIC {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut digest = [0u8; 32];
        digest.copy_from_slice(&b[16..48]);
        let mut instance = [0u8; 8];
        instance.copy_from_slice(&b[48..56]);
        Some(Self {
            format: u32_at(8),
            layout_version: u32_at(12),
            digest,
            instance: u64::from_le_bytes(instance),
            epoch: u32_at(56),
            attach_mode: u32_at(60),
        })
    }
}

/// One-element array map of `bytes` bytes.
fn one_element(bytes: usize) -> MapShape {
    MapShape {
        map_type: BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: u32::try_from(bytes).unwrap_or(u32::MAX),
        max_entries: 1,
        flags: 0,
    }
}

/// A one-element map pinned in the directory.
#[derive(Debug)]
pub struct Element {
    fd: OwnedFd,
    bytes: usize,
}

impl Element {
    /// Creates it and pins it at `path` (replacing any pin there).
    fn create(path: &Path, name: &str, bytes: usize) -> io::Result<Self> {
        let fd = bpf_sys::create_map(one_element(bytes), name)?;
        bpf_sys::pin_replacing(fd.as_fd(), path)?;
        Ok(Self { fd, bytes })
    }

    /// Opens the one at `path`, if pinned; an error when it is not shaped as expected.
    fn open(path: &Path, bytes: usize) -> io::Result<Option<Self>> {
        let Some(fd) = bpf_sys::open_pinned(path)? else {
            return Ok(None);
        };
        let info = bpf_sys::map_info(fd.as_fd())?;
        if info.value_size as usize != bytes || info.max_entries != 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is a map of {} entries of {} bytes, expected one of {bytes}",
                    path.display(),
                    info.max_entries,
                    info.value_size
                ),
            ));
        }
        Ok(Some(Self { fd, bytes }))
    }

    fn read(&self) -> io::Result<Vec<u8>> {
        let mut value = vec![0u8; self.bytes];
        bpf_sys::lookup(self.fd.as_fd(), &0u32.to_ne_bytes(), &mut value)?;
        Ok(value)
    }

    fn write(&self, value: &[u8]) -> io::Result<()> {
        bpf_sys::update(self.fd.as_fd(), &0u32.to_ne_bytes(), value)
    }
}

/// The `meta` map.
#[derive(Debug)]
pub struct MetaMap {
    map: Element,
    cached: Meta,
}

impl MetaMap {
    /// Creates and pins `meta` at `path` holding `meta`.
    ///
    /// # Errors
    /// System call failures.
    pub fn create(path: &Path, meta: Meta) -> io::Result<Self> {
        let map = Element::create(path, "lb_meta", META_BYTES)?;
        map.write(&meta.encode())?;
        Ok(Self { map, cached: meta })
    }

    /// Opens the `meta` pinned at `path`, if any.
    ///
    /// # Errors
    /// System call failures, or a map that is not a `meta` map.
    pub fn open(path: &Path) -> io::Result<Option<Self>> {
        let Some(map) = Element::open(path, META_BYTES)? else {
            return Ok(None);
        };
        let cached = Meta::decode(&map.read()?).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} does not hold an lb datapath description",
                    path.display()
                ),
            )
        })?;
        Ok(Some(Self { map, cached }))
    }

    /// The element.
    pub fn get(&self) -> Meta {
        self.cached
    }

    /// Rewrites the element as `f` changes it.
    ///
    /// # Errors
    /// When the map update fails (the cached copy is then unchanged).
    pub fn update(&mut self, f: impl FnOnce(&mut Meta)) -> io::Result<()> {
        let mut meta = self.cached;
        f(&mut meta);
        self.map.write(&meta.encode())?;
        self.cached = meta;
        Ok(())
    }
}

/// `owner` element (120 bytes): `pid` 0..4, `state` 4..8 (1 running, 2 exiting),
/// `socket` 8..116 (NUL-padded path), 116..120 zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// The daemon's pid (in its own pid namespace).
    pub pid: u32,
    /// Whether it is exiting (it then releases the lock within moments).
    pub exiting: bool,
    /// Its control socket.
    pub socket: String,
}

const OWNER_BYTES: usize = 120;
const SOCKET_BYTES: usize = 108;

impl Owner {
    fn encode(&self) -> [u8; OWNER_BYTES] {
        let mut b = [0u8; OWNER_BYTES];
        b[0..4].copy_from_slice(&self.pid.to_le_bytes());
        b[4..8].copy_from_slice(&(if self.exiting { 2u32 } else { 1 }).to_le_bytes());
        let socket = self.socket.as_bytes();
        let n = socket.len().min(SOCKET_BYTES);
        b[8..8 + n].copy_from_slice(&socket[..n]);
        b
    }

    fn decode(b: &[u8]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let socket = &b[8..8 + SOCKET_BYTES];
        let end = socket.iter().position(|c| *c == 0).unwrap_or(SOCKET_BYTES);
        Self {
            pid: u32_at(0),
            exiting: u32_at(4) == 2,
            socket: String::from_utf8_lossy(&socket[..end]).into_owned(),
        }
    }
}

/// Writes `owner` into the `owner` map at `path`, creating it if missing.
///
/// # Errors
/// System call failures.
pub fn write_owner(path: &Path, owner: &Owner) -> io::Result<()> {
    write_element(path, "lb_owner", &owner.encode())
}

/// The owner recorded at `path`, if any.
///
/// # Errors
/// System call failures.
pub fn read_owner(path: &Path) -> io::Result<Option<Owner>> {
    Ok(read_element(path, OWNER_BYTES)?.map(|b| Owner::decode(&b)))
}

/// Writes `value` into the one-element map at `path`, creating it (named `name`) if
/// missing.
fn write_element(path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let map = match Element::open(path, value.len())? {
        Some(map) => map,
        None => Element::create(path, name, value.len())?,
    };
    map.write(value)
}

/// The value of the one-element map of `bytes`-byte values at `path`, if pinned.
fn read_element(path: &Path, bytes: usize) -> io::Result<Option<Vec<u8>>> {
    Element::open(path, bytes)?
        .map(|map| map.read())
        .transpose()
}

/// `programs` element (48 bytes): `object` 0..32, the SHA-256 of the eBPF object the
/// programs were loaded from; then the kernel ids of the programs that ran when it was
/// written, little-endian: `link` 32..36 (the XDP link's), `rare` 36..40 and `full`
/// 40..44 (`RARE_PROGS` slots 0 and 1), `trace` 44..48 (`TRACE_PROGS` slot 0). An
/// element of zeros (a start that died between creating it and writing it) claims
/// nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Programs {
    /// SHA-256 of the object.
    pub object: [u8; 32],
    /// The ids of its programs.
    pub ids: ProgramIds,
}

/// The kernel ids of the load balancer's programs where they run (0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgramIds {
    /// The program of the XDP link.
    pub link: u32,
    /// `RARE_PROGS` slot 0 (`lb_common::maps::RARE_SLOT`).
    pub rare: u32,
    /// `RARE_PROGS` slot 1 (`lb_common::maps::FULL_SLOT`).
    pub full: u32,
    /// `TRACE_PROGS` slot 0.
    pub trace: u32,
}

const PROGRAMS_BYTES: usize = 48;

impl Programs {
    fn encode(&self) -> [u8; PROGRAMS_BYTES] {
        let mut b = [0u8; PROGRAMS_BYTES];
        b[0..32].copy_from_slice(&self.object);
        let ids = [self.ids.link, self.ids.rare, self.ids.full, self.ids.trace];
        for (chunk, id) in b[32..].chunks_exact_mut(4).zip(ids) {
            chunk.copy_from_slice(&id.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut object = [0u8; 32];
        object.copy_from_slice(&b[0..32]);
        Self {
            object,
            ids: ProgramIds {
                link: u32_at(32),
                rare: u32_at(36),
                full: u32_at(40),
                trace: u32_at(44),
            },
        }
    }
}

/// Writes `programs` into the `programs` map at `path`, creating it if missing.
///
/// # Errors
/// System call failures, or a map at `path` of another shape.
pub fn write_programs(path: &Path, programs: &Programs) -> io::Result<()> {
    write_element(path, "lb_programs", &programs.encode())
}

/// The programs recorded at `path`, if any.
///
/// # Errors
/// System call failures, or a map at `path` of another shape.
pub fn read_programs(path: &Path) -> io::Result<Option<Programs>> {
    Ok(read_element(path, PROGRAMS_BYTES)?.map(|b| Programs::decode(&b)))
}

/// Bytes per element of a record map.
const CHUNK: usize = 64 << 10;

/// Stores `bytes` as the record at `path`: a new array map of 64 KiB elements (the
/// first 8 bytes of element 0 hold the length), pinned in place of the old one by one
/// rename, so a crash leaves the old record or the new one, whole.
///
/// # Errors
/// System call failures (the old record then stays).
pub fn store_record(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let total = bytes.len() + 8;
    let entries = total.div_ceil(CHUNK).max(1);
    let shape = MapShape {
        map_type: BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size: u32::try_from(CHUNK).unwrap_or(u32::MAX),
        max_entries: u32::try_from(entries)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record too large"))?,
        flags: 0,
    };
    let fd = bpf_sys::create_map(shape, "lb_record")?;
    let mut framed = Vec::with_capacity(entries * CHUNK);
    framed.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    framed.extend_from_slice(bytes);
    framed.resize(entries * CHUNK, 0);
    for (i, chunk) in framed.chunks(CHUNK).enumerate() {
        let key = u32::try_from(i).unwrap_or(u32::MAX);
        bpf_sys::update(fd.as_fd(), &key.to_ne_bytes(), chunk)?;
    }
    bpf_sys::pin_replacing(fd.as_fd(), path)
}

/// The record at `path`, if any.
///
/// # Errors
/// System call failures, or a map that does not hold a record.
pub fn load_record(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let Some(fd) = bpf_sys::open_pinned(path)? else {
        return Ok(None);
    };
    let info = bpf_sys::map_info(fd.as_fd())?;
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a record", path.display()),
        )
    };
    if info.value_size as usize != CHUNK {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(info.max_entries as usize * CHUNK);
    let mut chunk = vec![0u8; CHUNK];
    for i in 0..info.max_entries {
        bpf_sys::lookup(fd.as_fd(), &i.to_ne_bytes(), &mut chunk)?;
        out.extend_from_slice(&chunk);
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&out[..8]);
    let len = usize::try_from(u64::from_le_bytes(len)).map_err(|_| bad())?;
    if len + 8 > out.len() {
        return Err(bad());
    }
    Ok(Some(out[8..8 + len].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_and_owner_round_trip() {
        let meta = Meta {
            format: 1,
            layout_version: 3,
            digest: [7; 32],
            instance: 0x0102_0304_0506_0708,
            epoch: 99,
            attach_mode: 2,
        };
        assert_eq!(Meta::decode(&meta.encode()), Some(meta));
        assert_eq!(Meta::decode(&[0u8; META_BYTES]), None, "no magic");
        let owner = Owner {
            pid: 4242,
            exiting: true,
            socket: "/run/lb/lb.sock".into(),
        };
        assert_eq!(Owner::decode(&owner.encode()), owner);
        let programs = Programs {
            object: [9; 32],
            ids: ProgramIds {
                link: 0x0102_0304,
                rare: 5,
                full: 6,
                trace: 7,
            },
        };
        let encoded = programs.encode();
        assert_eq!(&encoded[32..36], &[4, 3, 2, 1], "little-endian at 32..36");
        assert_eq!(&encoded[44..48], &[7, 0, 0, 0]);
        assert_eq!(Programs::decode(&encoded), programs);
        assert_eq!(Programs::decode(&[0; PROGRAMS_BYTES]), Programs::default());
    }
}
