//! The per-CPU counter arrays (`GLOBAL_STATS`, `VIP_STATS`, and `BACKEND_STATS`, a
//! plain array of one row per CPU, `lb_common::maps::CPU_ROW_LEN`) as the daemon reads
//! and clears them: an element summed over the CPUs, many elements in batches, a value
//! for every CPU to write, and the backend ids whose counters are known to be zero
//! ([`ZeroedIds`]).

use std::os::fd::AsFd as _;

use aya::maps::{Array, IterableMap as _, MapData, PerCpuArray};
use lb_common::maps::CPU_ROW_LEN;

use crate::{DataplaneError, bpf_sys, map_err};

/// Element `index` of a per-CPU counter array, summed over the CPUs.
pub(super) fn sum_per_cpu<T: aya::Pod + Default>(
    map: &PerCpuArray<MapData, T>,
    index: u32,
    name: &'static str,
    accumulate: fn(&mut T, &T),
) -> Result<T, DataplaneError> {
    let per_cpu = map.get(&index, 0).map_err(map_err(name, "lookup"))?;
    let mut total = T::default();
    per_cpu.iter().for_each(|v| accumulate(&mut total, v));
    Ok(total)
}

/// Elements of a counter array that one `BPF_MAP_LOOKUP_BATCH` reads.
const STATS_BATCH: usize = 512;

/// Elements `ids` of per-CPU counter array `map`, each summed over the CPUs, in the
/// order of `ids`. The range the ids span is read with one `BPF_MAP_LOOKUP_BATCH`
/// (Linux 5.6) per [`STATS_BATCH`] elements: a lookup per element costs a system call
/// each, 50,000 per stats sample for 500 VIPs of 100 backends. A batch's value of an
/// element is its per-CPU values one after another, each rounded up to 8 bytes
/// (`bpf_map_value_size` in `kernel/bpf/syscall.c`), which the counter types are.
pub(super) fn sum_per_cpu_many<T: aya::Pod + Default>(
    map: &PerCpuArray<MapData, T>,
    ids: &[u32],
    name: &'static str,
    accumulate: fn(&mut T, &T),
) -> Result<Vec<T>, DataplaneError> {
    let fd = map.map().fd().as_fd();
    sum_ids(ids, |lo, hi, sums| {
        add_range(fd, lo, hi, possible_cpus()?, name, sums, accumulate)
    })
}

/// The sums of elements `ids`, in their order: `add` adds the elements of the range
/// `lo..=hi` the ids span into a zeroed slice of its length (element `lo + i` into
/// `sums[i]`). No ids, no sums.
fn sum_ids<T: Copy + Default>(
    ids: &[u32],
    add: impl FnOnce(u32, u32, &mut [T]) -> Result<(), DataplaneError>,
) -> Result<Vec<T>, DataplaneError> {
    let (Some(&lo), Some(&hi)) = (ids.iter().min(), ids.iter().max()) else {
        return Ok(Vec::new());
    };
    let mut sums = vec![T::default(); (hi - lo) as usize + 1];
    add(lo, hi, &mut sums)?;
    Ok(ids.iter().map(|&id| sums[(id - lo) as usize]).collect())
}

/// Adds elements `from..=to` of array `fd` (named `name`; `per_key` values of `T` each,
/// as [`read_range`]) into `sums`: element `from + i` into `sums[i]`.
fn add_range<T: aya::Pod + Default>(
    fd: std::os::fd::BorrowedFd<'_>,
    from: u32,
    to: u32,
    per_key: usize,
    name: &'static str,
    sums: &mut [T],
    accumulate: fn(&mut T, &T),
) -> Result<(), DataplaneError> {
    read_range(fd, from, to, per_key, name, |key, values: &[T]| {
        if let Some(sum) = key.checked_sub(from).and_then(|k| sums.get_mut(k as usize)) {
            values.iter().for_each(|v| accumulate(sum, v));
        }
    })
}

/// Reads elements `lo..=hi` of array `fd` (named `name`) in `BPF_MAP_LOOKUP_BATCH`es of
/// at most [`STATS_BATCH`] elements, handing each key and its `per_key` values of `T`
/// (the CPUs' of a per-CPU array, 1 otherwise) to `visit`.
fn read_range<T: aya::Pod + Default>(
    fd: std::os::fd::BorrowedFd<'_>,
    lo: u32,
    hi: u32,
    per_key: usize,
    name: &'static str,
    mut visit: impl FnMut(u32, &[T]),
) -> Result<(), DataplaneError> {
    const {
        assert!(
            size_of::<T>().is_multiple_of(8),
            "batched values are 8-byte aligned"
        );
    }
    let batch = STATS_BATCH.min((hi - lo) as usize + 1);
    let mut keys = vec![0u32; batch];
    let mut values = vec![T::default(); batch * per_key];
    let mut next = lo;
    while next <= hi {
        let want = batch.min((hi - next) as usize + 1);
        // The batch continues after the key its token names: the one before `next`.
        let token_in = next.checked_sub(1).map(u64::from);
        let mut token_out = 0u64;
        // SAFETY: `keys` holds `batch` >= `want` u32 keys (the map's key size) and
        // `values` `batch` elements of `per_key` values of T (the map's value size per
        // element, T being a multiple of 8 bytes).
        let (read, done) = unsafe {
            bpf_sys::lookup_batch(
                fd,
                token_in.as_ref(),
                &mut token_out,
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                u32::try_from(want).unwrap_or(u32::MAX),
            )
        }
        .map_err(|error| DataplaneError::Syscall {
            op: format!("BPF_MAP_LOOKUP_BATCH on map {name}"),
            error,
        })?;
        for (i, &key) in keys[..read].iter().enumerate() {
            visit(key, &values[i * per_key..(i + 1) * per_key]);
        }
        match keys[..read].last() {
            Some(&last) if !done && last < hi => next = last + 1,
            _ => break,
        }
    }
    Ok(())
}

/// Element `index` of a counter array laid out in CPU rows
/// (`lb_common::maps::CPU_ROW_LEN` elements per possible CPU), summed over the rows.
pub(super) fn sum_rows<T: aya::Pod + Default>(
    map: &Array<MapData, T>,
    index: u32,
    name: &'static str,
    accumulate: fn(&mut T, &T),
) -> Result<T, DataplaneError> {
    let mut total = T::default();
    for at in row_indices(index)? {
        let value = map.get(&at, 0).map_err(map_err(name, "lookup"))?;
        accumulate(&mut total, &value);
    }
    Ok(total)
}

/// Elements `ids` of a counter array laid out in CPU rows, each summed over the rows,
/// in the order of `ids`: the ids' range read in batches ([`read_range`]) in each row.
pub(super) fn sum_rows_many<T: aya::Pod + Default>(
    map: &Array<MapData, T>,
    ids: &[u32],
    name: &'static str,
    accumulate: fn(&mut T, &T),
) -> Result<Vec<T>, DataplaneError> {
    let fd = map.map().fd().as_fd();
    sum_ids(ids, |lo, hi, sums| {
        for base in row_indices(0)? {
            add_range(fd, base + lo, base + hi, 1, name, sums, accumulate)?;
        }
        Ok(())
    })
}

/// Writes `value` into every CPU's row of element `index` of an array laid out in CPU
/// rows.
pub(super) fn set_rows<T: aya::Pod>(
    map: &mut Array<MapData, T>,
    index: u32,
    value: T,
    name: &'static str,
) -> Result<(), DataplaneError> {
    for at in row_indices(index)? {
        map.set(at, value, 0).map_err(map_err(name, "update"))?;
    }
    Ok(())
}

/// The indices of element `index` in each possible CPU's row
/// (`lb_common::maps::CPU_ROW_LEN` apart).
fn row_indices(index: u32) -> Result<impl Iterator<Item = u32>, DataplaneError> {
    let cpus = u32::try_from(possible_cpus()?).unwrap_or(u32::MAX);
    Ok((0..cpus).filter_map(move |cpu| cpu.checked_mul(CPU_ROW_LEN)?.checked_add(index)))
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`): the per-CPU
/// values of one element.
pub(super) fn possible_cpus() -> Result<usize, DataplaneError> {
    aya::util::nr_cpus().map_err(|(op, error)| DataplaneError::Syscall {
        op: op.to_owned(),
        error,
    })
}

/// The backend ids whose `BACKEND_STATS` counters are known to be zero, one bit per id
/// below `lb_common::maps::MAX_BACKENDS`: on a data plane whose maps this process
/// created, every id until it is first written to `BACKENDS`; on an adopted one, none.
/// The kernel creates a per-CPU array zeroed, and the program counts for a backend
/// only once a table, a pin or a held SYN names it, which that write precedes. Clearing
/// such an id's counters writes nothing: a start of 500 VIPs of 100 backends makes
/// 50,000 system calls fewer.
pub(super) struct ZeroedIds(Vec<u64>);

impl ZeroedIds {
    /// Every id (a created data plane) or none (an adopted one).
    pub(super) fn new(created: bool) -> Self {
        let words = if created {
            lb_common::maps::MAX_BACKENDS.div_ceil(64) as usize
        } else {
            0
        };
        Self(vec![u64::MAX; words])
    }

    /// Whether id `id`'s counters are known to be zero.
    pub(super) fn holds(&self, id: u32) -> bool {
        self.0
            .get((id / 64) as usize)
            .is_some_and(|word| word & (1 << (id % 64)) != 0)
    }

    /// Id `id` is about to be written to `BACKENDS`: the program may count for it.
    pub(super) fn lose(&mut self, id: u32) {
        if let Some(word) = self.0.get_mut((id / 64) as usize) {
            *word &= !(1 << (id % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ZeroedIds;

    #[test]
    fn a_created_data_planes_ids_are_zeroed_until_written_and_an_adopted_ones_never() {
        let mut created = ZeroedIds::new(true);
        assert!(created.holds(1) && created.holds(64) && created.holds(65_535));
        created.lose(64);
        assert!(!created.holds(64));
        assert!(created.holds(63) && created.holds(65));
        assert!(!created.holds(65_536), "beyond the array");
        let adopted = ZeroedIds::new(false);
        assert!(!adopted.holds(1) && !adopted.holds(65_535));
    }
}
