//! The few BPF system calls aya 0.14 does not expose, made directly, and the only raw
//! BPF definitions of the crate: creating a standalone map with given flags, element
//! updates, lookups and deletes of byte buffers,
//! pinning and opening objects by path, a link's facts (program, interface) and
//! `BPF_LINK_DETACH`. Command numbers and attribute layouts are those of
//! `include/uapi/linux/bpf.h`; every attribute is zero-filled beyond the fields named.

use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
};

/// `BPF_MAP_CREATE`.
const BPF_MAP_CREATE: libc::c_long = 0;
/// `BPF_MAP_LOOKUP_ELEM`.
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
/// `BPF_MAP_UPDATE_ELEM`.
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
/// `BPF_MAP_DELETE_ELEM`.
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
/// `BPF_OBJ_PIN`.
const BPF_OBJ_PIN: libc::c_long = 6;
/// `BPF_OBJ_GET`.
const BPF_OBJ_GET: libc::c_long = 7;
/// `BPF_OBJ_GET_INFO_BY_FD`.
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// `BPF_LINK_DETACH` (Linux 5.9).
const BPF_LINK_DETACH: libc::c_long = 34;
/// `BPF_MAP_LOOKUP_BATCH` (Linux 5.6).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// `BPF_MAP_UPDATE_BATCH` (Linux 5.6).
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

/// `BPF_MAP_TYPE_ARRAY`.
pub(crate) const BPF_MAP_TYPE_ARRAY: u32 = 2;

/// The leading fields of `union bpf_attr` for `BPF_MAP_CREATE`.
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// The leading fields of `union bpf_attr` for element commands.
#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_OBJ_PIN` / `BPF_OBJ_GET`.
#[repr(C)]
#[derive(Default)]
struct ObjAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// `union bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `union bpf_attr` for the `BPF_MAP_*_BATCH` commands.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    /// In: elements given; out: elements processed.
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_LINK_DETACH`.
#[repr(C)]
struct LinkDetachAttr {
    link_fd: u32,
}

/// Runs `bpf(cmd, attr, size_of(attr))`.
fn bpf<T>(cmd: libc::c_long, attr: &T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, fully initialised attribute of the size passed, whose
    // pointers (if any) refer to memory alive for the call; the kernel reads it and
    // writes only through those pointers.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_ref(attr), size_of::<T>()) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn raw(fd: BorrowedFd<'_>) -> io::Result<u32> {
    u32::try_from(fd.as_raw_fd()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn owned(rc: libc::c_long) -> io::Result<OwnedFd> {
    let fd = i32::try_from(rc).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// The shape of a standalone map to create.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MapShape {
    /// `BPF_MAP_TYPE_*`.
    pub(crate) map_type: u32,
    /// Key size, bytes.
    pub(crate) key_size: u32,
    /// Value size, bytes.
    pub(crate) value_size: u32,
    /// Entries.
    pub(crate) max_entries: u32,
    /// `BPF_F_*` flags.
    pub(crate) flags: u32,
}

/// Creates a map of `shape` named `name` (at most 15 bytes are kept).
pub(crate) fn create_map(shape: MapShape, name: &str) -> io::Result<OwnedFd> {
    create_map_of(shape, None, name)
}

/// Creates a map of `shape` named `name`; a map of maps takes `inner`, the map whose
/// shape its elements must have (`inner_map_fd`).
pub(crate) fn create_map_of(
    shape: MapShape,
    inner: Option<BorrowedFd<'_>>,
    name: &str,
) -> io::Result<OwnedFd> {
    let mut map_name = [0u8; 16];
    let len = name.len().min(15);
    map_name[..len].copy_from_slice(&name.as_bytes()[..len]);
    let attr = MapCreateAttr {
        map_type: shape.map_type,
        key_size: shape.key_size,
        value_size: shape.value_size,
        max_entries: shape.max_entries,
        map_flags: shape.flags,
        inner_map_fd: inner.map(raw).transpose()?.unwrap_or(0),
        map_name,
        ..MapCreateAttr::default()
    };
    owned(bpf(BPF_MAP_CREATE, &attr)?)
}

/// Writes `value` under `key` (both exactly the map's sizes).
pub(crate) fn update(fd: BorrowedFd<'_>, key: &[u8], value: &[u8]) -> io::Result<()> {
    let attr = ElemAttr {
        map_fd: raw(fd)?,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        flags: 0,
    };
    bpf(BPF_MAP_UPDATE_ELEM, &attr).map(|_| ())
}

/// Writes `values[i]` under `keys[i]` for every `i` in one `BPF_MAP_UPDATE_BATCH` of a
/// map with `u32` keys and values of `V`'s size (a map of maps takes inner map fds, as
/// `u32`, as values). Returns how many elements were written: all of them, or, with the
/// error, those before the first that failed (`Err((written, error))`).
///
/// Why: one system call instead of one per element (50,000 backend entries for a start
/// of 500 VIPs of 100 backends). An update of a map of maps also waits for an RCU grace
/// period before it returns (`maybe_wait_bpf_programs()` in `kernel/bpf/syscall.c`); a
/// batch waits once for all its elements (Linux 6.8 and later; older kernels wait once
/// per element, as single updates do).
///
/// Fails with `InvalidInput`, writing nothing, when the map's key is not 4 bytes or its
/// value not `size_of::<V>()` bytes (the kernel reads `count` values of the map's size
/// from `values`).
pub(crate) fn update_batch<V: aya::Pod>(
    fd: BorrowedFd<'_>,
    keys: &[u32],
    values: &[V],
) -> Result<usize, (usize, io::Error)> {
    assert_eq!(keys.len(), values.len(), "one value per key");
    let invalid = || (0, io::Error::from(io::ErrorKind::InvalidInput));
    let info = map_info(fd).map_err(|e| (0, e))?;
    if info.key_size as usize != size_of::<u32>() || info.value_size as usize != size_of::<V>() {
        return Err(invalid());
    }
    let mut attr = BatchAttr {
        keys: keys.as_ptr() as u64,
        values: values.as_ptr() as u64,
        count: u32::try_from(keys.len()).map_err(|_| invalid())?,
        map_fd: raw(fd).map_err(|_| invalid())?,
        ..BatchAttr::default()
    };
    // SAFETY: attr is a valid BPF_MAP_UPDATE_BATCH attribute whose key and value
    // pointers refer to `count` u32 keys and `count` values of the map's value size
    // (checked above to be `V`'s), alive for the call; the kernel writes only
    // `attr.count`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_BATCH,
            &raw mut attr,
            size_of::<BatchAttr>(),
        )
    };
    let written = attr.count as usize;
    if rc < 0 {
        Err((written.min(keys.len()), io::Error::last_os_error()))
    } else {
        Ok(written)
    }
}

/// One `BPF_MAP_LOOKUP_BATCH` call (Linux 5.6+): reads up to `count` entries of map
/// `fd` into `keys` and `values` (byte buffers of `count` keys and values of the map's
/// sizes), continuing after `token_in` (`None` for the first call) and writing the next
/// token to `token_out`. Returns the entries read and whether the map is exhausted
/// (`ENOENT`: the last entries are in this call's answer).
///
/// # Errors
/// Any other errno of the call.
///
/// # Safety
/// `keys` and `values` must point to writable buffers of `count` keys and `count`
/// values of the map's key and value sizes.
pub(crate) unsafe fn lookup_batch(
    fd: BorrowedFd<'_>,
    token_in: Option<&u64>,
    token_out: &mut u64,
    keys: *mut u8,
    values: *mut u8,
    count: u32,
) -> io::Result<(usize, bool)> {
    let mut attr = BatchAttr {
        in_batch: token_in.map_or(0, |t| std::ptr::from_ref(t) as u64),
        out_batch: std::ptr::from_mut(token_out) as u64,
        keys: keys as u64,
        values: values as u64,
        count,
        map_fd: raw(fd)?,
        ..BatchAttr::default()
    };
    // SAFETY: the caller guarantees the buffers; the kernel writes at most `count`
    // keys and values into them and one token into `token_out`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_BATCH,
            &raw mut attr,
            size_of::<BatchAttr>(),
        )
    };
    let read = (attr.count as usize).min(count as usize);
    if rc >= 0 {
        return Ok((read, false));
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::ENOENT) {
        Ok((read, true))
    } else {
        Err(error)
    }
}

/// Reads the value under `key` into `value` (exactly the map's value size); `false`
/// when the key is absent.
pub(crate) fn lookup(fd: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    let attr = ElemAttr {
        map_fd: raw(fd)?,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        flags: 0,
    };
    match bpf(BPF_MAP_LOOKUP_ELEM, &attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes the entry under `key` (exactly the map's key size); an absent key is not an
/// error. Deleting an entry of a map of maps waits for an RCU grace period before the
/// kernel releases the inner map.
pub(crate) fn delete(fd: BorrowedFd<'_>, key: &[u8]) -> io::Result<()> {
    let attr = ElemAttr {
        map_fd: raw(fd)?,
        _pad: 0,
        key: key.as_ptr() as u64,
        value: 0,
        flags: 0,
    };
    match bpf(BPF_MAP_DELETE_ELEM, &attr) {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Pins object `fd` at `path` (on a bpffs; the path must not exist).
pub(crate) fn pin(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let path = c_path(path)?;
    let attr = ObjAttr {
        pathname: path.as_ptr() as u64,
        bpf_fd: raw(fd)?,
        file_flags: 0,
    };
    bpf(BPF_OBJ_PIN, &attr).map(|_| ())
}

/// Opens the object pinned at `path`; `None` when nothing is pinned there.
pub(crate) fn open_pinned(path: &Path) -> io::Result<Option<OwnedFd>> {
    let path = c_path(path)?;
    let attr = ObjAttr {
        pathname: path.as_ptr() as u64,
        ..ObjAttr::default()
    };
    match bpf(BPF_OBJ_GET, &attr) {
        Ok(rc) => owned(rc).map(Some),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The suffix of a pin being replaced. Not `.new`: bpffs refuses names with a dot
/// (`bpf_lookup`: they are reserved for its own files).
pub(crate) const REPLACING_SUFFIX: &str = "-new";

/// Pins `fd` at `path`, replacing whatever is pinned there in one rename (pinned first
/// at `path` + [`REPLACING_SUFFIX`]): a reader sees the old object or the new one,
/// never none.
pub(crate) fn pin_replacing(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(REPLACING_SUFFIX);
    let tmp = Path::new(&tmp);
    match std::fs::remove_file(tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    pin(fd, tmp)?;
    std::fs::rename(tmp, path)
}

/// The facts of a map (`struct bpf_map_info`, leading fields).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MapInfo {
    /// `BPF_MAP_TYPE_*`.
    pub(crate) map_type: u32,
    /// Map id.
    pub(crate) id: u32,
    /// Key size, bytes.
    pub(crate) key_size: u32,
    /// Value size, bytes.
    pub(crate) value_size: u32,
    /// Entries.
    pub(crate) max_entries: u32,
    /// `BPF_F_*` flags.
    pub(crate) map_flags: u32,
}

/// [`MapInfo`] of map `fd`.
pub(crate) fn map_info(fd: BorrowedFd<'_>) -> io::Result<MapInfo> {
    let mut info = MapInfo::default();
    let attr = InfoAttr {
        bpf_fd: raw(fd)?,
        info_len: u32::try_from(size_of::<MapInfo>()).unwrap_or(0),
        info: std::ptr::from_mut(&mut info) as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &attr)?;
    Ok(info)
}

/// `struct bpf_link_info` up to the XDP member of its union (offset 16: the union is
/// 8-byte aligned).
#[repr(C)]
#[derive(Default)]
struct LinkInfoRaw {
    link_type: u32,
    id: u32,
    prog_id: u32,
    _pad: u32,
    /// `xdp.ifindex` for an XDP link.
    ifindex: u32,
    _rest: [u32; 11],
}

/// `BPF_LINK_TYPE_XDP`.
const BPF_LINK_TYPE_XDP: u32 = 6;

/// What the kernel says about an XDP link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct XdpLinkInfo {
    /// Id of the program it runs.
    pub(crate) prog_id: u32,
    /// Interface it is attached to; 0 once the interface is gone (the link is then
    /// defunct).
    pub(crate) ifindex: u32,
}

/// [`XdpLinkInfo`] of link `fd`; an error for a link of another type.
pub(crate) fn xdp_link_info(fd: BorrowedFd<'_>) -> io::Result<XdpLinkInfo> {
    let mut info = LinkInfoRaw::default();
    let attr = InfoAttr {
        bpf_fd: raw(fd)?,
        info_len: u32::try_from(size_of::<LinkInfoRaw>()).unwrap_or(0),
        info: std::ptr::from_mut(&mut info) as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &attr)?;
    if info.link_type != BPF_LINK_TYPE_XDP {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("link of type {}, not XDP", info.link_type),
        ));
    }
    Ok(XdpLinkInfo {
        prog_id: info.prog_id,
        ifindex: info.ifindex,
    })
}

/// Detaches link `fd` from its hook now (the program stops running at once), whatever
/// else still refers to the link.
pub(crate) fn link_detach(fd: BorrowedFd<'_>) -> io::Result<()> {
    let attr = LinkDetachAttr { link_fd: raw(fd)? };
    bpf(BPF_LINK_DETACH, &attr).map(|_| ())
}

/// `BPF_MAP_GET_NEXT_KEY`.
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;

/// Number of keys in hash map `fd` whose keys are `key_size` bytes (walks the map with
/// `BPF_MAP_GET_NEXT_KEY`; entries added or removed meanwhile may or may not count).
pub(crate) fn count_keys(fd: BorrowedFd<'_>, key_size: u32) -> io::Result<u64> {
    let mut n = 0u64;
    each_key(fd, key_size, |_| n += 1)?;
    Ok(n)
}

/// The keys of map `fd` (`key_size` bytes each), in the kernel's iteration order
/// (test support).
#[cfg(feature = "test-harness")]
pub(crate) fn keys(fd: BorrowedFd<'_>, key_size: u32) -> io::Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    each_key(fd, key_size, |key| keys.push(key.to_vec()))?;
    Ok(keys)
}

/// Calls `f` with every key of map `fd` (`key_size` bytes each), walking
/// `BPF_MAP_GET_NEXT_KEY` from the start.
fn each_key(fd: BorrowedFd<'_>, key_size: u32, mut f: impl FnMut(&[u8])) -> io::Result<()> {
    let mut key = vec![0u8; key_size as usize];
    let mut next = vec![0u8; key_size as usize];
    let mut first = true;
    loop {
        let attr = ElemAttr {
            map_fd: raw(fd)?,
            _pad: 0,
            key: if first { 0 } else { key.as_ptr() as u64 },
            value: next.as_mut_ptr() as u64,
            flags: 0,
        };
        match bpf(BPF_MAP_GET_NEXT_KEY, &attr) {
            Ok(_) => {
                f(&next);
                first = false;
                std::mem::swap(&mut key, &mut next);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// The network namespace cookie of this thread (`SO_NETNS_COOKIE`, Linux 5.14): never
/// reused while the system runs, unlike the namespace's inode number.
pub(crate) fn netns_cookie() -> io::Result<u64> {
    /// `SO_NETNS_COOKIE` (`include/uapi/asm-generic/socket.h`).
    const SO_NETNS_COOKIE: libc::c_int = 71;
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut cookie = 0u64;
    let mut len = libc::socklen_t::try_from(size_of::<u64>()).unwrap_or(8);
    // SAFETY: getsockopt writes at most `len` bytes into `cookie`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&raw mut cookie).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cookie)
}
