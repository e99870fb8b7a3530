//! The lab itself: runs every scheme on the same keys, before and after each event, over
//! the `V` sweep, for hot keys and for a peer's view, and fills a [`LabReport`], with the
//! analyses of their own modules (bounded load on requests, replicas, a failure's
//! fan-out). No I/O; the only clock read is the lookup timing ([`ns_per_key`]).

use std::{
    collections::HashMap,
    hint::black_box,
    time::{Duration, Instant},
};

use super::{
    events::Event,
    failure::{self, FailureReport},
    keys::KeySet,
    replicas::{self, ReplicaReport, Replication, Zones},
    report::{
        Disagreement, EpsilonRow, EventReport, HotKey, HotKeysReport, HotRow, KeyPlacement,
        LabReport, MembershipReport, Movement, RingPicture, SchemeReport, SchemeTheory, ServerLoad,
        SweepRow,
    },
    request_bound::{self, RequestBoundReport},
    ring::Ring,
    scheme::{BuildError, Params, Scheme, SchemeKind},
    servers::{Server, check_set},
    stats::Balance,
    theory,
};
use lb_maglev::MaglevError;

/// Runs of at most this many keys list every key's server ([`KeyPlacement`]).
pub const MAX_PLACEMENT_KEYS: usize = 32;
/// Ring points the ring picture draws at most.
pub const MAX_PICTURE_POINTS: usize = 20_000;
/// Timing rounds always run (the median of them is reported).
const MIN_ROUNDS: usize = 5;
/// Timing rounds stop after this much time once [`MIN_ROUNDS`] ran.
const TIME_BUDGET: Duration = Duration::from_millis(20);
/// Timing rounds never exceed this many.
const MAX_ROUNDS: usize = 1_000;

/// Everything one run compares.
#[derive(Debug, Clone)]
pub struct LabInput {
    /// The servers (list order matters to mod-N and jump).
    pub servers: Vec<Server>,
    /// The keys and their request counts.
    pub keys: KeySet,
    /// Where the keys came from, for the report header.
    pub key_source: String,
    /// The schemes to run, in report order.
    pub schemes: Vec<SchemeKind>,
    /// Scheme parameters; `params.vnodes` is the `V` of the ring and bounded rows.
    pub params: Params,
    /// Every `V` of the sweep (may be just `params.vnodes`).
    pub vnodes_sweep: Vec<u32>,
    /// Every `epsilon` of bounded load's sweep (none or one: no sweep).
    pub epsilon_sweep: Vec<f64>,
    /// Events, each compared with `servers`.
    pub events: Vec<Event>,
    /// A second client's server list, compared with `servers`.
    pub peer: Option<Vec<Server>>,
    /// Hottest keys to replicate.
    pub hot: usize,
    /// Servers each hot key is replicated on.
    pub replicas: usize,
    /// Copies of every key on the ring (`--replicas RF [--zones ...]`): preference
    /// lists and the balance of replicas.
    pub replication: Option<Replication>,
    /// A server whose failure's fan-out to report (`--fail NAME`).
    pub fail: Option<String>,
}

/// The input a [`LabError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The server list.
    Servers,
    /// The peer's server list.
    Peer,
    /// Event `n` (0-based).
    Event(usize),
    /// A `V` value.
    Vnodes,
    /// `epsilon`.
    Epsilon,
    /// The Maglev table size.
    TableSize,
    /// The scheme list.
    Schemes,
    /// The replica count.
    Replicas,
    /// The server-to-zone map.
    Zones,
    /// The failed server.
    Fail,
}

/// Why the lab cannot run: which input, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct LabError {
    /// The input at fault.
    pub input: Input,
    /// What is wrong.
    pub problem: String,
}

impl LabError {
    fn new(input: Input, problem: impl Into<String>) -> Self {
        Self {
            input,
            problem: problem.into(),
        }
    }

    /// A build error of a scheme over the servers of `input`: `V` and Maglev size
    /// problems are theirs, the rest belongs to the server list.
    fn build(input: Input, kind: SchemeKind, error: &BuildError) -> Self {
        let input = match error {
            BuildError::Ring(_) => Input::Vnodes,
            BuildError::Maglev(
                MaglevError::TableSizeTooSmall { .. }
                | MaglevError::TableSizeTooLarge { .. }
                | MaglevError::TableSizeNotPrime { .. }
                | MaglevError::TableSizeBelowBackendCount { .. },
            ) => Input::TableSize,
            _ => input,
        };
        Self::new(input, format!("{kind}: {error}"))
    }
}

/// One scheme's placement of every key on one server list.
struct Placed<'a> {
    servers: &'a [Server],
    owners: Vec<usize>,
}

impl Placed<'_> {
    fn loads(&self, counts: &[u64]) -> (Vec<u64>, Vec<u64>) {
        let mut keys = vec![0_u64; self.servers.len()];
        let mut requests = vec![0_u64; self.servers.len()];
        for (&owner, &count) in self.owners.iter().zip(counts) {
            keys[owner] += 1;
            requests[owner] = requests[owner].saturating_add(count);
        }
        (keys, requests)
    }
}

/// The weights a scheme honours: the servers' own, or 1 each for unweighted schemes.
fn weights_for(kind: SchemeKind, servers: &[Server]) -> Vec<u32> {
    servers
        .iter()
        .map(|s| if kind.is_weighted() { s.weight } else { 1 })
        .collect()
}

/// Runs the lab.
///
/// # Errors
/// [`LabError`] naming the input: no scheme, `V` = 0, `epsilon` not > 0, no replica,
/// a server list or event the schemes cannot be built for.
pub fn run(input: &LabInput) -> Result<LabReport, LabError> {
    validate(input)?;
    let keys = input.keys.keys();
    let hash = input.params.hash;
    let hashes: Vec<u64> = keys.iter().map(|k| input.params.key_hash(k)).collect();
    let key_hash_ns = ns_per_key(keys.len(), || {
        for key in keys {
            black_box(hash.key(black_box(key)));
        }
    });
    let lab = Lab {
        input,
        hashes: &hashes,
    };

    let mut built = Vec::new();
    for &kind in &input.schemes {
        let scheme = lab.build(kind, &input.servers, Input::Servers)?;
        let placed = lab.place(&scheme, &input.servers);
        built.push((kind, scheme, placed));
    }
    let schemes = built
        .iter()
        .map(|(kind, scheme, placed)| lab.scheme_report(*kind, scheme, placed))
        .collect();

    let (events, after_lists, after_owners) = lab.events(&built)?;
    let epsilon_sweep = if input.epsilon_sweep.len() > 1 {
        let mut sweep = input.epsilon_sweep.clone();
        sweep.sort_by(f64::total_cmp);
        sweep.dedup();
        sweep
            .iter()
            .map(|&e| lab.epsilon_row(e, &after_lists))
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let ring_picture = built.iter().find_map(|(_, scheme, _)| match scheme {
        Scheme::Ring(ring) | Scheme::Bounded { ring, .. } => Some(lab.ring_picture(ring)),
        _ => None,
    });
    let placements = (keys.len() <= MAX_PLACEMENT_KEYS)
        .then(|| lab.placements(&built, &after_lists, &after_owners));

    let vnodes_sweep = input
        .vnodes_sweep
        .iter()
        .map(|&v| lab.sweep_row(v, &after_lists))
        .collect::<Result<_, _>>()?;
    let hot_keys = input
        .keys
        .is_counted()
        .then(|| lab.hot_keys(&built))
        .transpose()?;
    let request_bound = input
        .keys
        .is_counted()
        .then(|| lab.request_bound())
        .transpose()?;
    let replicas = input
        .replication
        .as_ref()
        .map(|r| lab.replicas(r))
        .transpose()?;
    let failure = input
        .fail
        .as_deref()
        .map(|name| lab.failure(name))
        .transpose()?;
    let membership = input
        .peer
        .as_ref()
        .map(|peer| lab.membership(peer, &built))
        .transpose()?;

    let mut notes = Vec::new();
    let first = input.servers.first().map_or(1, |s| s.weight);
    let unweighted: Vec<&str> = input
        .schemes
        .iter()
        .filter(|k| !k.is_weighted())
        .map(|k| k.name())
        .collect();
    if input.servers.iter().any(|s| s.weight != first) && !unweighted.is_empty() {
        notes.push(format!(
            "{} unweighted: the weights are ignored",
            unweighted.join(" and ")
        ));
    }
    Ok(LabReport {
        hash: hash.name().to_owned(),
        hash_bits: hash.bits(),
        hash_seed: hash.seed(),
        key_source: input.key_source.clone(),
        keys: keys.len(),
        requests: input.keys.requests(),
        servers: input.servers.clone(),
        key_hash_ns,
        schemes,
        events,
        vnodes_sweep,
        hot_keys,
        request_bound,
        replicas,
        failure,
        membership,
        epsilon_sweep,
        ring_picture,
        placements,
        notes,
    })
}

fn validate(input: &LabInput) -> Result<(), LabError> {
    if input.schemes.is_empty() {
        return Err(LabError::new(Input::Schemes, "no scheme to run"));
    }
    if input.params.vnodes == 0 || input.vnodes_sweep.contains(&0) {
        return Err(LabError::new(
            Input::Vnodes,
            "0 virtual nodes: V must be 1 or more",
        ));
    }
    let epsilon = input.params.epsilon;
    if !(epsilon.is_finite() && epsilon > 0.0) {
        return Err(LabError::new(
            Input::Epsilon,
            format!("epsilon {epsilon} must be a number > 0"),
        ));
    }
    if let Some(bad) = input
        .epsilon_sweep
        .iter()
        .find(|e| !(e.is_finite() && **e > 0.0))
    {
        return Err(LabError::new(
            Input::Epsilon,
            format!("epsilon {bad} must be a number > 0"),
        ));
    }
    if input.replicas == 0 {
        return Err(LabError::new(Input::Replicas, "0 replicas: give 1 or more"));
    }
    check_set(&input.servers).map_err(|problem| LabError::new(Input::Servers, problem))
}

/// The least share of keys an event must move: the weight of the servers that joined
/// or left over the total ([`theory::minimum_moved`]).
fn minimum_moved(before: &[Server], after: &[Server]) -> Option<theory::Ratio> {
    let weight_of = |list: &[Server], others: &[Server]| -> u64 {
        list.iter()
            .filter(|s| !others.iter().any(|o| o.name == s.name))
            .map(|s| u64::from(s.weight))
            .sum()
    };
    let total: u64 = before.iter().map(|s| u64::from(s.weight)).sum();
    theory::minimum_moved(total, weight_of(after, before), weight_of(before, after))
}

/// The expected values of a scheme on `servers` servers ([`theory`]).
fn scheme_theory(scheme: &Scheme, servers: usize) -> Option<SchemeTheory> {
    match scheme {
        Scheme::Ring(ring) => Some(ring_theory(servers, ring.points())),
        Scheme::Jump(_) => Some(SchemeTheory::Jump {
            loops: theory::jump_loops(servers),
        }),
        _ => None,
    }
}

fn ring_theory(servers: usize, points: usize) -> SchemeTheory {
    SchemeTheory::Ring {
        sd_avg: theory::ring_sd_avg(servers, points),
        memory_bytes: theory::ring_memory_bytes(points),
        comparisons: theory::ring_comparisons(points),
    }
}

/// Why a scheme did not follow an event as asked, if it did not.
fn event_note(kind: SchemeKind, event: &Event, renumbered_from: Option<usize>) -> Option<String> {
    match (kind, event) {
        (SchemeKind::ModN | SchemeKind::Jump, Event::Weight(..)) => {
            Some("unweighted: the weight change does not apply".to_owned())
        }
        (SchemeKind::Jump, Event::Remove(name)) if renumbered_from.is_some() => Some(format!(
            "{name} is not the last bucket: the buckets after it are renumbered (jump only \
             removes at the end)"
        )),
        _ => None,
    }
}

/// The shared state of one run.
struct Lab<'a> {
    input: &'a LabInput,
    hashes: &'a [u64],
}

impl Lab<'_> {
    fn build(
        &self,
        kind: SchemeKind,
        servers: &[Server],
        input: Input,
    ) -> Result<Scheme, LabError> {
        Scheme::build(kind, servers, &self.input.params)
            .map_err(|error| LabError::build(input, kind, &error))
    }

    fn place<'s>(&self, scheme: &Scheme, servers: &'s [Server]) -> Placed<'s> {
        Placed {
            servers,
            owners: scheme.assign(self.input.keys.keys(), self.hashes),
        }
    }

    fn detail(&self, scheme: &Scheme, servers: &[Server]) -> String {
        let params = &self.input.params;
        match scheme {
            Scheme::ModN(_) => format!("N={}", servers.len()),
            Scheme::Jump(_) => format!("n={}", servers.len()),
            Scheme::Ring(ring) => format!("V={}, {} points", params.vnodes, ring.points()),
            Scheme::Rendezvous(r) if r.is_weighted() => "weighted -w/ln(u)".to_owned(),
            Scheme::Rendezvous(_) => "highest hash".to_owned(),
            Scheme::Maglev(_) => format!("M={}", params.table_size),
            Scheme::Bounded { .. } => {
                format!("V={}, epsilon={}", params.vnodes, params.epsilon)
            }
            Scheme::Ketama(ring) => format!("MD5, {} points", ring.points()),
            Scheme::Nginx(ring) => format!("CRC-32, {} points", ring.points()),
        }
    }

    fn scheme_report(
        &self,
        kind: SchemeKind,
        scheme: &Scheme,
        placed: &Placed<'_>,
    ) -> SchemeReport {
        let keys = self.input.keys.keys();
        let counts = self.input.keys.counts();
        let (key_loads, request_loads) = placed.loads(counts);
        let weights = weights_for(kind, placed.servers);
        let ns_per_lookup = match scheme {
            Scheme::Bounded { .. } => ns_per_key(keys.len(), || {
                black_box(scheme.assign(black_box(keys), black_box(self.hashes)));
            }),
            _ => ns_per_key(keys.len(), || {
                for (key, &hash) in keys.iter().zip(self.hashes) {
                    black_box(scheme.lookup(black_box(key), black_box(hash)));
                }
            }),
        };
        SchemeReport {
            scheme: kind.name().to_owned(),
            detail: self.detail(scheme, placed.servers),
            weighted: kind.is_weighted(),
            keys: Balance::of(&key_loads, &weights),
            requests: Balance::of(&request_loads, &weights),
            per_server: placed
                .servers
                .iter()
                .zip(key_loads.iter().zip(&request_loads))
                .map(|(server, (&keys, &requests))| ServerLoad {
                    name: server.name.clone(),
                    keys,
                    requests,
                })
                .collect(),
            memory_bytes: scheme.memory_bytes(keys.len()),
            ns_per_lookup,
            theory: scheme_theory(scheme, active(placed.servers)),
        }
    }

    fn movement(&self, kind: SchemeKind, before: &Placed<'_>, after: &Placed<'_>) -> Movement {
        let counts = self.input.keys.counts();
        let diff = Diff::between(before, after, counts);
        let total = fraction_base(self.input.keys.len());
        let requests = fraction_base_u64(self.input.keys.requests());
        let (key_loads, _) = after.loads(counts);
        Movement {
            scheme: kind.name().to_owned(),
            moved: diff.moved,
            moved_fraction: diff.moved as f64 / total,
            to_added: diff.to_added,
            from_removed: diff.from_removed,
            between_stayed: diff.between_stayed,
            between_stayed_fraction: diff.between_stayed as f64 / total,
            requests_moved_fraction: diff.moved_requests as f64 / requests,
            keys_after: Balance::of(&key_loads, &weights_for(kind, after.servers)),
            note: None,
        }
    }

    /// Every event against the run's servers: the movements of each scheme, the
    /// server list after each (for the `V` sweep's moved columns) and the owners of
    /// every key after it, per scheme.
    #[expect(clippy::type_complexity, reason = "three parallel per-event lists")]
    fn events(
        &self,
        built: &[(SchemeKind, Scheme, Placed<'_>)],
    ) -> Result<(Vec<EventReport>, Vec<Vec<Server>>, Vec<Vec<Vec<usize>>>), LabError> {
        let mut events = Vec::new();
        let mut after_lists = Vec::new();
        let mut after_owners = Vec::new();
        for (n, event) in self.input.events.iter().enumerate() {
            let applied = event
                .apply(&self.input.servers)
                .map_err(|problem| LabError::new(Input::Event(n), problem))?;
            let (before, after) = (self.input.servers.len(), applied.servers.len());
            let mut movements = Vec::new();
            let mut owners = Vec::new();
            for (kind, _, placed) in built {
                let scheme = self.build(*kind, &applied.servers, Input::Event(n))?;
                let after_placed = self.place(&scheme, &applied.servers);
                let mut movement = self.movement(*kind, placed, &after_placed);
                movement.note = event_note(*kind, event, applied.renumbered_from);
                movements.push(movement);
                owners.push(after_placed.owners);
            }
            after_owners.push(owners);
            events.push(EventReport {
                event: event.to_string(),
                added: applied.added.clone(),
                removed: applied.removed.clone(),
                servers_after: after,
                theory_mod_n_kept: (before != after)
                    .then(|| theory::mod_n_kept(before as u64, after as u64))
                    .flatten(),
                theory_minimum_moved: minimum_moved(&self.input.servers, &applied.servers),
                schemes: movements,
            });
            after_lists.push(applied.servers);
        }
        Ok((events, after_lists, after_owners))
    }

    /// Every key's server in every scheme, before and after each event (small runs).
    fn placements(
        &self,
        built: &[(SchemeKind, Scheme, Placed<'_>)],
        after_lists: &[Vec<Server>],
        after_owners: &[Vec<Vec<usize>>],
    ) -> Vec<KeyPlacement> {
        let label = |kind: SchemeKind, servers: &[Server], owner: usize| {
            if kind.is_positional() {
                format!("{owner} {}", servers[owner].name)
            } else {
                servers[owner].name.clone()
            }
        };
        let keys = self.input.keys.keys();
        (0..keys.len())
            .map(|i| KeyPlacement {
                key: keys[i].clone(),
                hash: self.hashes[i],
                before: built
                    .iter()
                    .map(|(kind, _, placed)| label(*kind, &self.input.servers, placed.owners[i]))
                    .collect(),
                after: after_lists
                    .iter()
                    .zip(after_owners)
                    .map(|(servers, owners)| {
                        built
                            .iter()
                            .zip(owners)
                            .map(|((kind, _, _), owners)| label(*kind, servers, owners[i]))
                            .collect()
                    })
                    .collect(),
            })
            .collect()
    }

    fn sweep_row(&self, vnodes: u32, after_lists: &[Vec<Server>]) -> Result<SweepRow, LabError> {
        let params = &self.input.params;
        let servers = &self.input.servers;
        let ring_error =
            |error| LabError::build(Input::Vnodes, SchemeKind::Ring, &BuildError::Ring(error));
        let ring = Ring::build_params(servers, vnodes, params).map_err(ring_error)?;
        let points = ring.points();
        let scheme = Scheme::Ring(ring);
        let placed = self.place(&scheme, servers);
        let report = self.scheme_report(SchemeKind::Ring, &scheme, &placed);
        let mut moved_fraction = Vec::new();
        for after_servers in after_lists {
            let after = Scheme::Ring(
                Ring::build_params(after_servers, vnodes, params).map_err(ring_error)?,
            );
            let after = self.place(&after, after_servers);
            moved_fraction.push(
                self.movement(SchemeKind::Ring, &placed, &after)
                    .moved_fraction,
            );
        }
        Ok(SweepRow {
            vnodes,
            points,
            keys: report.keys,
            requests: report.requests,
            theory_sd_avg: theory::ring_sd_avg(active(servers), points),
            memory_bytes: report.memory_bytes,
            theory_memory_bytes: theory::ring_memory_bytes(points),
            comparisons: theory::ring_comparisons(points),
            ns_per_lookup: report.ns_per_lookup,
            requests_max_avg: report.requests.max_avg,
            moved_fraction,
        })
    }

    /// Bounded load at `epsilon`: balance, displaced keys and each event's movement.
    fn epsilon_row(
        &self,
        epsilon: f64,
        after_lists: &[Vec<Server>],
    ) -> Result<EpsilonRow, LabError> {
        let mut params = self.input.params.clone();
        params.epsilon = epsilon;
        let build = |servers: &[Server], input| {
            Scheme::build(SchemeKind::Bounded, servers, &params)
                .map_err(|error| LabError::build(input, SchemeKind::Bounded, &error))
        };
        let servers = &self.input.servers;
        let scheme = build(servers, Input::Epsilon)?;
        let placed = self.place(&scheme, servers);
        let counts = self.input.keys.counts();
        let (keys, requests) = placed.loads(counts);
        let weights = weights_for(SchemeKind::Bounded, servers);
        let displaced = match &scheme {
            Scheme::Bounded { ring, .. } => placed
                .owners
                .iter()
                .zip(self.hashes)
                .filter(|(owner, hash)| ring.lookup(**hash) != **owner)
                .count(),
            _ => 0,
        };
        let mut moved_fraction = Vec::new();
        for (n, after_servers) in after_lists.iter().enumerate() {
            let after = self.place(&build(after_servers, Input::Event(n))?, after_servers);
            moved_fraction.push(
                self.movement(SchemeKind::Bounded, &placed, &after)
                    .moved_fraction,
            );
        }
        Ok(EpsilonRow {
            epsilon,
            bound: 1.0 + epsilon,
            keys_max_avg: Balance::of(&keys, &weights).max_avg,
            requests_max_avg: Balance::of(&requests, &weights).max_avg,
            displaced_fraction: displaced as f64 / fraction_base(self.hashes.len()),
            moved_fraction,
        })
    }

    /// The ring of the run's `V` over its servers.
    fn ring(&self) -> Result<Ring, LabError> {
        let params = &self.input.params;
        Ring::build_params(&self.input.servers, params.vnodes, params).map_err(|error| {
            LabError::build(Input::Vnodes, SchemeKind::Ring, &BuildError::Ring(error))
        })
    }

    /// Bounded load on requests at every `epsilon` of the sweep (or the one given).
    fn request_bound(&self) -> Result<RequestBoundReport, LabError> {
        let input = self.input;
        let mut epsilons = if input.epsilon_sweep.len() > 1 {
            input.epsilon_sweep.clone()
        } else {
            vec![input.params.epsilon]
        };
        epsilons.sort_by(f64::total_cmp);
        epsilons.dedup();
        Ok(request_bound::report(
            &self.ring()?,
            &input.servers,
            self.hashes,
            &input.keys,
            &epsilons,
            input.params.epsilon,
            input.params.vnodes,
        ))
    }

    /// Every key's preference list of `r.rf` servers, zone-aware with `r.zones`.
    fn replicas(&self, r: &Replication) -> Result<ReplicaReport, LabError> {
        let input = self.input;
        if r.rf == 0 {
            return Err(LabError::new(Input::Replicas, "0 replicas: give 1 or more"));
        }
        let zones = if r.zones.is_empty() {
            None
        } else {
            Some(
                Zones::new(&input.servers, &r.zones)
                    .map_err(|problem| LabError::new(Input::Zones, problem))?,
            )
        };
        Ok(replicas::report(
            &self.ring()?,
            &input.servers,
            input.keys.keys(),
            self.hashes,
            r.rf,
            zones.as_ref(),
            input.params.vnodes,
        ))
    }

    /// Who takes the keys of server `name` when it fails, scheme by scheme.
    fn failure(&self, name: &str) -> Result<FailureReport, LabError> {
        let input = self.input;
        let failed = input
            .servers
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| LabError::new(Input::Fail, format!("no server {name:?}")))?;
        failure::report(
            &input.servers,
            failed,
            input.keys.keys(),
            self.hashes,
            &input.params,
        )
        .map_err(|(kind, error)| LabError::build(Input::Fail, kind, &error))
    }

    /// The ring as the picture draws it: every point (up to [`MAX_PICTURE_POINTS`]) and
    /// the keys of a small run.
    fn ring_picture(&self, ring: &Ring) -> RingPicture {
        let (positions, owners) = ring.points_and_owners();
        let params = &self.input.params;
        let space = params.space.map_or_else(
            || 2_f64.powi(i32::try_from(params.hash.bits()).unwrap_or(64)),
            |s| s as f64,
        );
        let keys = self.input.keys.keys();
        RingPicture {
            space,
            points: positions
                .iter()
                .zip(owners)
                .take(MAX_PICTURE_POINTS)
                .map(|(&p, &o)| (p, o as usize))
                .collect(),
            keys: if keys.len() <= MAX_PLACEMENT_KEYS {
                keys.iter()
                    .cloned()
                    .zip(self.hashes.iter().copied())
                    .collect()
            } else {
                Vec::new()
            },
            vnodes: params.vnodes,
        }
    }

    fn hot_keys(
        &self,
        built: &[(SchemeKind, Scheme, Placed<'_>)],
    ) -> Result<HotKeysReport, LabError> {
        let input = self.input;
        let counts = input.keys.counts();
        let requests = fraction_base_u64(input.keys.requests());
        let mut order: Vec<usize> = (0..counts.len()).collect();
        order.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
        order.truncate(input.hot);
        let hottest = order
            .iter()
            .map(|&i| HotKey {
                key: input.keys.keys()[i].clone(),
                requests: counts[i],
                share: counts[i] as f64 / requests,
            })
            .collect();

        let row = |strategy: String, keys: &[u64], loads: &[u64], weights: &[u32]| {
            let heaviest = (0..loads.len())
                .max_by_key(|&i| (loads[i], usize::MAX - i))
                .unwrap_or(0);
            HotRow {
                strategy,
                keys_max_avg: Balance::of(keys, weights).max_avg,
                requests_max_avg: Balance::of(loads, weights).max_avg,
                heaviest: input.servers[heaviest].name.clone(),
                heaviest_share: loads[heaviest] as f64 / requests,
            }
        };
        let mut rows = Vec::new();
        for (kind, scheme, placed) in built {
            let (keys, loads) = placed.loads(counts);
            let detail = self.detail(scheme, placed.servers);
            rows.push(row(
                format!("{kind} {detail}"),
                &keys,
                &loads,
                &weights_for(*kind, &input.servers),
            ));
        }

        // The hottest keys on their first `replicas` distinct servers clockwise, their
        // requests split evenly (the remainder to the first servers).
        let ring = self.ring()?;
        let placed = self.place(&Scheme::Ring(ring.clone()), &input.servers);
        let (keys, mut loads) = placed.loads(counts);
        for &i in &order {
            let owners = ring.preference(self.hashes[i], input.replicas);
            loads[placed.owners[i]] = loads[placed.owners[i]].saturating_sub(counts[i]);
            let k = owners.len() as u64;
            for (n, &owner) in (0_u64..).zip(&owners) {
                loads[owner] += counts[i] / k + u64::from(n < counts[i] % k);
            }
        }
        let weights: Vec<u32> = input.servers.iter().map(|s| s.weight).collect();
        rows.push(row(
            format!(
                "ring V={} + {} hottest on {} replicas",
                input.params.vnodes,
                order.len(),
                input.replicas
            ),
            &keys,
            &loads,
            &weights,
        ));
        Ok(HotKeysReport {
            hot: order.len(),
            replicas: input.replicas,
            hottest,
            rows,
        })
    }

    fn membership(
        &self,
        peer: &[Server],
        built: &[(SchemeKind, Scheme, Placed<'_>)],
    ) -> Result<MembershipReport, LabError> {
        check_set(peer).map_err(|problem| LabError::new(Input::Peer, problem))?;
        let counts = self.input.keys.counts();
        let total = fraction_base(self.input.keys.len());
        let requests = fraction_base_u64(self.input.keys.requests());
        let mut schemes = Vec::new();
        for (kind, _, here) in built {
            let scheme = self.build(*kind, peer, Input::Peer)?;
            let there = self.place(&scheme, peer);
            let diff = Diff::between(here, &there, counts);
            schemes.push(Disagreement {
                scheme: kind.name().to_owned(),
                keys: diff.moved,
                keys_fraction: diff.moved as f64 / total,
                requests_fraction: diff.moved_requests as f64 / requests,
            });
        }
        let has = |list: &[Server], name: &str| list.iter().any(|s| s.name == name);
        let names = |a: &[Server], b: &[Server]| {
            a.iter()
                .filter(|s| !has(b, &s.name))
                .map(|s| s.name.clone())
                .collect()
        };
        Ok(MembershipReport {
            peer: peer.iter().map(|s| s.name.clone()).collect(),
            missing_at_peer: names(&self.input.servers, peer),
            extra_at_peer: names(peer, &self.input.servers),
            schemes,
        })
    }
}

/// Keys whose server (by name) differs between two placements of the same keys.
struct Diff {
    moved: u64,
    to_added: u64,
    from_removed: u64,
    between_stayed: u64,
    moved_requests: u64,
}

impl Diff {
    fn between(before: &Placed<'_>, after: &Placed<'_>, counts: &[u64]) -> Self {
        let index: HashMap<&str, usize> = before
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let after_in_before: Vec<Option<usize>> = after
            .servers
            .iter()
            .map(|s| index.get(s.name.as_str()).copied())
            .collect();
        let mut before_stays = vec![false; before.servers.len()];
        for &i in after_in_before.iter().flatten() {
            before_stays[i] = true;
        }
        let mut diff = Self {
            moved: 0,
            to_added: 0,
            from_removed: 0,
            between_stayed: 0,
            moved_requests: 0,
        };
        for ((&b, &a), &count) in before.owners.iter().zip(&after.owners).zip(counts) {
            let a_before = after_in_before[a];
            if a_before == Some(b) {
                continue;
            }
            diff.moved += 1;
            diff.moved_requests = diff.moved_requests.saturating_add(count);
            let added = a_before.is_none();
            let removed = !before_stays[b];
            diff.to_added += u64::from(added);
            diff.from_removed += u64::from(removed);
            diff.between_stayed += u64::from(!added && !removed);
        }
        diff
    }
}

/// Servers of weight > 0.
fn active(servers: &[Server]) -> usize {
    servers.iter().filter(|s| s.weight > 0).count()
}

/// A count as a divisor (1 for 0, so empty totals give 0 fractions).
fn fraction_base(n: usize) -> f64 {
    n.max(1) as f64
}

fn fraction_base_u64(n: u64) -> f64 {
    n.max(1) as f64
}

/// Measured ns per key of `round` (one pass over `keys` keys): the median of at least
/// `MIN_ROUNDS` rounds, more while under `TIME_BUDGET`.
pub fn ns_per_key(keys: usize, mut round: impl FnMut()) -> f64 {
    let started = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < MIN_ROUNDS
        || (started.elapsed() < TIME_BUDGET && samples.len() < MAX_ROUNDS)
    {
        let t = Instant::now();
        round();
        samples.push(t.elapsed());
    }
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e9 / fraction_base(keys)
}
