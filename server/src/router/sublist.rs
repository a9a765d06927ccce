//! The subscription interest index ("sublist"): which subscriptions a published subject reaches.
//!
//! A [`Sublist`] is a trie keyed by subject token. Each node stands for one pattern prefix and
//! holds the subscriptions whose pattern ends there. Literal tokens are children in a hash
//! map; `*` and `>` each have their own child, so matching a subject walks at most three edges
//! per node and visits each node at most once. In front of the trie sits a bounded cache of
//! match results keyed by the literal subject, so the hot path (a cache hit) is a read lock,
//! one hash lookup and an `Arc` clone. A result is cached from the second miss of its subject
//! on: subjects seen once (reply inboxes, `$JS.ACK...` acks, one per message) would otherwise
//! take the write lock, allocate and evict useful entries on every message.
//!
//! It owns only the index. It does not deliver messages, pick queue members, dedupe a
//! subscription inserted under two patterns, or check permissions; those belong to the caller.
//!
//! Invariants:
//! - **Routing rule.** `match_subject(s)` returns exactly the stored entries whose pattern `p`
//!   satisfies [`subject::matches`]`(p, s)`, as a multiset: inserting the same
//!   `(subject, queue, value)` twice stores it twice, and each `remove` takes one copy away.
//! - **Cache coherence.** Every cached result equals what a trie walk would return now. Two
//!   rules keep it so. (1) An insert or remove of pattern `p` changes the result only for
//!   subjects that `p` matches, so, under the write lock, it drops exactly the cached subjects
//!   that `p` matches (for a literal `p`, just the key `p`). (2) A result computed under a read
//!   lock is stored only if the generation counter, which every insert and remove bumps, is the
//!   same when the write lock is taken, so a result that raced with a change is never cached.
//! - **Pruning.** No node other than the root is empty: a remove that leaves a node without
//!   subscriptions and children deletes it, so memory follows the live subscriptions.
//! - **Bounded cache.** After every store the cache holds at most `cache_capacity` entries;
//!   when a store exceeds it, entries are evicted down to 7/8 of the capacity.
//! - **Admission.** A miss stores its result only if the same subject's hash is in the
//!   direct-mapped table of recent misses (`seen`); otherwise it records the hash there. The
//!   table only decides what is cached, never what is matched.
//! - **Bounded depth.** Patterns have at most [`MAX_PATTERN_TOKENS`] tokens, so the recursive
//!   walks (match, remove, listing, drop) have bounded stack depth whatever subject is matched.
//!
//! Locking: one `parking_lot::RwLock` guards the trie, the cache and the insert/remove
//! counters; match counters are relaxed atomics beside it. No other lock is taken while it is
//! held, and only `T::clone` and `T::eq` run under it.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use super::interest_watch::{InterestWatch, WatchCallback, WatchGuard};

use crate::router::subject::{self, FULL_WILDCARD, SINGLE_WILDCARD, TOKEN_SEPARATOR};

/// Default bound on the number of cached match results (as in nats-server).
pub const DEFAULT_CACHE_CAPACITY: usize = 1024;

/// Longest pattern, in tokens, that [`Sublist::insert`] accepts. It bounds the trie depth and
/// with it the recursion depth of every walk; real subjects have far fewer tokens.
pub const MAX_PATTERN_TOKENS: usize = 1024;
/// Slots of the recent-miss table that admits subjects to the cache on their second miss.
const SEEN_SLOTS: usize = 4096;

/// Maps keyed by subjects and tokens: foldhash (seeded per map, so still resistant to chosen
/// collisions) is several times cheaper than SipHash on short strings.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Why a subscription could not be inserted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SublistError {
    /// The subject is not a valid subscription subject (see [`subject::is_valid_subject`]).
    #[error("invalid subject {subject:?}")]
    InvalidSubject {
        /// The rejected subject.
        subject: String,
    },
    /// The queue group name is empty or contains whitespace.
    #[error("invalid queue group name {queue:?}")]
    InvalidQueue {
        /// The rejected queue group name.
        queue: String,
    },
    /// The subject has more than [`MAX_PATTERN_TOKENS`] tokens.
    #[error("subject has {tokens} tokens, more than the limit of {limit}")]
    TooManyTokens {
        /// How many tokens the subject has.
        tokens: usize,
        /// The limit it exceeds.
        limit: usize,
    },
}

/// The members of one queue group that a subject reaches. A message goes to one of them.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueGroup<T> {
    /// The queue group name, shared with the index.
    pub name: Arc<str>,
    /// Every member of the group across all matching patterns; never empty.
    pub members: Vec<T>,
}

/// The subscriptions a subject reaches. Results are immutable snapshots shared through `Arc`,
/// so a member may have been removed since; the caller skips closed subscriptions.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchResult<T> {
    /// Non-queue subscriptions: each gets the message.
    pub plain: Vec<T>,
    /// One entry per distinct queue group name, with members from all matching patterns.
    pub queues: Vec<QueueGroup<T>>,
}

impl<T> Default for MatchResult<T> {
    fn default() -> Self {
        Self {
            plain: Vec::new(),
            queues: Vec::new(),
        }
    }
}

impl<T> MatchResult<T> {
    /// Whether the subject reaches nobody.
    pub fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.queues.is_empty()
    }

    /// How many deliveries a message causes: every plain subscription plus one per queue group
    /// (the `/subsz` definition of fanout).
    pub fn fanout(&self) -> usize {
        self.plain.len() + self.queues.len()
    }
}

/// Counters reported by `/subsz`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SublistStats {
    /// Stored subscriptions (`num_subscriptions`).
    pub num_subscriptions: usize,
    /// Cached match results (`num_cache`).
    pub num_cache: usize,
    /// Successful inserts since creation (`num_inserts`).
    pub num_inserts: u64,
    /// Successful removes since creation (`num_removes`).
    pub num_removes: u64,
    /// Calls to [`Sublist::match_subject`] (`num_matches`).
    pub num_matches: u64,
    /// Fraction of matches served from the cache, 0..=1 (`cache_hit_rate`).
    pub cache_hit_rate: f64,
    /// Largest fanout among cached results (`max_fanout`).
    pub max_fanout: usize,
    /// Mean fanout over cached results, 0 when the cache is empty (`avg_fanout`).
    pub avg_fanout: f64,
}

/// One trie node: the subscriptions whose pattern ends here and the edges to longer patterns.
struct Node<T> {
    /// Children for literal tokens (including tokens like `b*r` that only contain wildcards).
    literal: FastMap<Box<str>, Node<T>>,
    /// Child for a `*` token; boxed because most nodes have none.
    single: Option<Box<Node<T>>>,
    /// Child for a `>` token. It never has children of its own, since `>` is always last.
    full: Option<Box<Node<T>>>,
    /// Non-queue subscriptions for this node's pattern, with multiplicity.
    plain: Vec<T>,
    /// Queue subscriptions for this node's pattern, grouped by name; no group is empty.
    queues: Vec<QueueGroup<T>>,
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Self {
            literal: FastMap::default(),
            single: None,
            full: None,
            plain: Vec::new(),
            queues: Vec::new(),
        }
    }
}

impl<T: Clone + PartialEq> Node<T> {
    fn has_subscriptions(&self) -> bool {
        !self.plain.is_empty() || !self.queues.is_empty()
    }

    fn is_empty(&self) -> bool {
        !self.has_subscriptions()
            && self.literal.is_empty()
            && self.single.is_none()
            && self.full.is_none()
    }

    /// The node for `pattern`, created along the way if missing. `pattern` must be valid.
    fn node_for_insert(&mut self, pattern: &str) -> &mut Node<T> {
        let mut node = self;
        for token in subject::tokens(pattern) {
            node = match token {
                SINGLE_WILDCARD => node.single.get_or_insert_with(Box::default),
                FULL_WILDCARD => node.full.get_or_insert_with(Box::default),
                literal => node.literal.entry(literal.into()).or_default(),
            };
        }
        node
    }

    fn add(&mut self, queue: Option<&str>, value: T) {
        let Some(queue) = queue else {
            self.plain.push(value);
            return;
        };
        match self.queues.iter_mut().find(|g| &*g.name == queue) {
            Some(group) => group.members.push(value),
            None => self.queues.push(QueueGroup {
                name: queue.into(),
                members: vec![value],
            }),
        }
    }

    /// Removes one copy of `value` from this node's subscriptions.
    fn take(&mut self, queue: Option<&str>, value: &T) -> bool {
        let Some(queue) = queue else {
            return remove_one(&mut self.plain, value);
        };
        let Some(index) = self.queues.iter().position(|g| &*g.name == queue) else {
            return false;
        };
        let removed = remove_one(&mut self.queues[index].members, value);
        if self.queues[index].members.is_empty() {
            self.queues.swap_remove(index);
        }
        removed
    }

    /// Removes one copy of `value` under the pattern whose remaining tokens are `rest`, and
    /// prunes every node the removal leaves empty.
    fn remove(
        &mut self,
        rest: &mut std::str::Split<'_, char>,
        queue: Option<&str>,
        value: &T,
    ) -> bool {
        let Some(token) = rest.next() else {
            return self.take(queue, value);
        };
        let child = match token {
            SINGLE_WILDCARD => &mut self.single,
            FULL_WILDCARD => &mut self.full,
            literal => {
                let Some(child) = self.literal.get_mut(literal) else {
                    return false;
                };
                let removed = child.remove(rest, queue, value);
                if child.is_empty() {
                    self.literal.remove(literal);
                }
                return removed;
            }
        };
        let Some(node) = child else {
            return false;
        };
        let removed = node.remove(rest, queue, value);
        if node.is_empty() {
            *child = None;
        }
        removed
    }

    /// Pushes every node with subscriptions whose pattern matches the tokens in `rest`
    /// (`None` once all tokens are consumed). The subject must be routable.
    fn collect<'a>(&'a self, rest: Option<&str>, hits: &mut Vec<&'a Node<T>>) {
        let Some(rest) = rest else {
            if self.has_subscriptions() {
                hits.push(self);
            }
            return;
        };
        let (token, next) = split_first(rest);
        if let Some(full) = self.full.as_deref().filter(|full| full.has_subscriptions()) {
            hits.push(full);
        }
        if let Some(single) = &self.single {
            single.collect(next, hits);
        }
        if let Some(child) = self.literal.get(token) {
            child.collect(next, hits);
        }
    }

    /// Whether any subscription matches the tokens in `rest`; stops at the first one.
    fn any_match(&self, rest: Option<&str>) -> bool {
        let Some(rest) = rest else {
            return self.has_subscriptions();
        };
        let (token, next) = split_first(rest);
        self.full
            .as_ref()
            .is_some_and(|full| full.has_subscriptions())
            || self
                .single
                .as_ref()
                .is_some_and(|single| single.any_match(next))
            || self
                .literal
                .get(token)
                .is_some_and(|child| child.any_match(next))
    }

    /// Appends `(pattern, queue, value)` for every subscription at or below this node, whose
    /// pattern is `path`.
    fn list(&self, path: &mut String, out: &mut Vec<(String, Option<Arc<str>>, T)>) {
        out.extend(self.plain.iter().map(|v| (path.clone(), None, v.clone())));
        for group in &self.queues {
            out.extend(
                group
                    .members
                    .iter()
                    .map(|v| (path.clone(), Some(Arc::clone(&group.name)), v.clone())),
            );
        }
        let children = self
            .literal
            .iter()
            .map(|(token, node)| (&**token, node))
            .chain(self.single.as_deref().map(|node| (SINGLE_WILDCARD, node)))
            .chain(self.full.as_deref().map(|node| (FULL_WILDCARD, node)));
        for (token, node) in children {
            let len = path.len();
            if !path.is_empty() {
                path.push(TOKEN_SEPARATOR);
            }
            path.push_str(token);
            node.list(path, out);
            path.truncate(len);
        }
    }

    #[cfg(test)]
    fn node_count(&self) -> usize {
        let children = self
            .literal
            .values()
            .chain(self.single.as_deref())
            .chain(self.full.as_deref());
        children.map(|node| 1 + node.node_count()).sum()
    }
}

/// Splits off the first token of a non-empty token sequence.
fn split_first(rest: &str) -> (&str, Option<&str>) {
    match rest.split_once(TOKEN_SEPARATOR) {
        Some((token, next)) => (token, Some(next)),
        None => (rest, None),
    }
}

/// Removes one element equal to `value`; order is not meaningful.
fn remove_one<T: PartialEq>(values: &mut Vec<T>, value: &T) -> bool {
    match values.iter().position(|v| v == value) {
        Some(index) => {
            values.swap_remove(index);
            true
        }
        None => false,
    }
}

/// Builds a match result from the matching nodes, merging queue groups by name.
fn build_result<T: Clone>(hits: &[&Node<T>]) -> MatchResult<T> {
    let mut plain = Vec::with_capacity(hits.iter().map(|n| n.plain.len()).sum());
    let mut queues: Vec<QueueGroup<T>> = Vec::new();
    for node in hits {
        plain.extend(node.plain.iter().cloned());
        for group in &node.queues {
            match queues.iter_mut().find(|g| g.name == group.name) {
                Some(merged) => merged.members.extend(group.members.iter().cloned()),
                None => queues.push(group.clone()),
            }
        }
    }
    MatchResult { plain, queues }
}

/// Everything behind the lock.
struct Inner<T> {
    /// The trie root; it stands for the empty pattern, so it never holds subscriptions.
    root: Node<T>,
    /// Cached results by literal subject; coherent with `root` (see the module docs).
    cache: FastMap<Box<str>, Arc<MatchResult<T>>>,
    /// Bumped by every successful insert and remove, so a match computed under a read lock
    /// can tell whether the trie changed before it stores its result.
    generation: u64,
    /// Where the next eviction starts, in cache iteration order, so evictions rotate over the
    /// table instead of always hitting the same slots.
    evict_cursor: usize,
    /// Stored subscriptions.
    count: usize,
    /// Successful inserts, for `/subsz`.
    inserts: u64,
    /// Successful removes, for `/subsz`.
    removes: u64,
}

impl<T> Inner<T> {
    /// Drops the cached results that a change to `pattern` (a valid subject) affects.
    fn invalidate(&mut self, pattern: &str) {
        if self.cache.is_empty() {
            return;
        }
        if subject::is_literal(pattern) {
            // A literal pattern matches only the identical subject.
            self.cache.remove(pattern);
        } else {
            self.cache
                .retain(|cached, _| !subject::matches_unchecked(pattern, cached));
        }
    }

    /// Evicts entries until at most `target` remain, continuing from the last eviction.
    fn evict(&mut self, target: usize) {
        let len = self.cache.len();
        let Some(excess) = len.checked_sub(target).filter(|&n| n > 0) else {
            return;
        };
        let start = self.evict_cursor % len;
        let mut index = 0;
        self.cache.retain(|_, _| {
            // Evict positions start..start+excess, wrapping around the end.
            let evict = (index + len - start) % len < excess;
            index += 1;
            !evict
        });
        self.evict_cursor = start.wrapping_add(excess);
    }
}

/// What the read-locked part of a match produced.
enum Lookup<T> {
    /// A cached result, or the shared empty result for an unroutable subject: nothing to store.
    Final(Arc<MatchResult<T>>),
    /// A fresh trie walk and the generation it saw, to be cached if still current.
    Computed {
        /// The result of the walk.
        result: Arc<MatchResult<T>>,
        /// `Inner::generation` at the time of the walk.
        generation: u64,
    },
}

/// A thread-safe index from subject patterns to subscription values of type `T`.
///
/// `T` is compared with `PartialEq` when removing; the server stores a pointer-identity wrapper
/// around `Arc<Subscription>`.
pub struct Sublist<T> {
    /// The trie, the cache and the write-side counters.
    inner: RwLock<Inner<T>>,
    /// Cache bound; 0 disables caching.
    cache_capacity: usize,
    /// Shared result for subjects that reach nobody, so an empty match allocates no result.
    empty: Arc<MatchResult<T>>,
    /// Calls to `match_subject`. Atomic so cache hits need only the read lock.
    matches: AtomicU64,
    /// Calls to `match_subject` served from the cache.
    cache_hits: AtomicU64,
    /// Hashes of recently missed subjects, direct-mapped (see the admission invariant).
    seen: Box<[AtomicU64]>,
    /// Hasher of `seen`.
    seen_hasher: foldhash::fast::RandomState,
    /// Who is told when the interest in a literal subject may have changed.
    watch: InterestWatch,
}

impl<T: Clone + PartialEq + Send + Sync> Default for Sublist<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Sublist<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.read();
        f.debug_struct("Sublist")
            .field("count", &inner.count)
            .field("cached", &inner.cache.len())
            .field("cache_capacity", &self.cache_capacity)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + PartialEq + Send + Sync> Sublist<T> {
    /// An empty sublist with a cache of [`DEFAULT_CACHE_CAPACITY`] results.
    pub fn new() -> Self {
        Self::with_cache_capacity(DEFAULT_CACHE_CAPACITY)
    }

    /// An empty sublist caching at most `capacity` match results; 0 disables the cache.
    pub fn with_cache_capacity(capacity: usize) -> Self {
        Self {
            inner: RwLock::new(Inner {
                root: Node::default(),
                cache: FastMap::default(),
                generation: 0,
                evict_cursor: 0,
                count: 0,
                inserts: 0,
                removes: 0,
            }),
            cache_capacity: capacity,
            empty: Arc::new(MatchResult::default()),
            matches: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            seen: (0..SEEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            seen_hasher: foldhash::fast::RandomState::default(),
            watch: InterestWatch::default(),
        }
    }

    /// Calls `callback` after every insert or removal of a pattern matching the literal
    /// `subject`, until the guard is dropped (see [`InterestWatch`]).
    pub fn watch(&self, subject: &str, callback: WatchCallback) -> WatchGuard {
        self.watch.watch(subject, callback)
    }

    /// Stores `value` under the pattern `subject`, in queue group `queue` if given.
    ///
    /// Storing the same triple twice keeps two copies.
    pub fn insert(&self, subject: &str, queue: Option<&str>, value: T) -> Result<(), SublistError> {
        if !subject::is_valid_subject(subject) {
            return Err(SublistError::InvalidSubject {
                subject: subject.to_owned(),
            });
        }
        let tokens = subject.bytes().filter(|&b| b == b'.').count() + 1;
        if tokens > MAX_PATTERN_TOKENS {
            return Err(SublistError::TooManyTokens {
                tokens,
                limit: MAX_PATTERN_TOKENS,
            });
        }
        if let Some(queue) = queue.filter(|q| !subject::is_valid_queue_name(q)) {
            return Err(SublistError::InvalidQueue {
                queue: queue.to_owned(),
            });
        }
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        inner.root.node_for_insert(subject).add(queue, value);
        inner.count += 1;
        inner.inserts += 1;
        inner.generation += 1;
        inner.invalidate(subject);
        drop(guard);
        self.watch.changed(subject);
        Ok(())
    }

    /// Removes one copy of `value` stored under exactly `subject` and `queue`. Returns whether
    /// one was found. Nodes left empty are pruned.
    pub fn remove(&self, subject: &str, queue: Option<&str>, value: &T) -> bool {
        if !subject::is_valid_subject(subject) {
            return false;
        }
        let mut guard = self.inner.write();
        let inner = &mut *guard;
        if !inner
            .root
            .remove(&mut subject::tokens(subject), queue, value)
        {
            return false;
        }
        inner.count -= 1;
        inner.removes += 1;
        inner.generation += 1;
        inner.invalidate(subject);
        drop(guard);
        self.watch.changed(subject);
        true
    }

    /// The subscriptions that a message published to `subject` reaches. Wildcard tokens in
    /// `subject` are literal; a subject that is not routable reaches nobody.
    ///
    /// On a cache hit this takes the read lock, does one hash lookup and clones an `Arc`.
    pub fn match_subject(&self, subject: &str) -> Arc<MatchResult<T>> {
        self.matches.fetch_add(1, Ordering::Relaxed);
        match self.lookup(subject) {
            Lookup::Final(result) => result,
            Lookup::Computed { result, generation } => {
                if self.seen_before(subject) {
                    self.store(subject, &result, generation);
                }
                result
            }
        }
    }

    /// Whether `subject` missed the cache recently; records it if not.
    fn seen_before(&self, subject: &str) -> bool {
        if self.cache_capacity == 0 {
            return false;
        }
        // Never 0, so an empty slot matches no subject.
        let hash = self.seen_hasher.hash_one(subject) | 1;
        let slot = &self.seen[(hash >> 32) as usize % self.seen.len()];
        if slot.load(Ordering::Relaxed) == hash {
            return true;
        }
        slot.store(hash, Ordering::Relaxed);
        false
    }

    /// The read-locked half of [`Self::match_subject`]: a cache hit, or a trie walk together
    /// with the generation it saw.
    fn lookup(&self, subject: &str) -> Lookup<T> {
        let inner = self.inner.read();
        if let Some(cached) = inner.cache.get(subject) {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Lookup::Final(Arc::clone(cached));
        }
        if !subject::is_routable_subject(subject) {
            return Lookup::Final(Arc::clone(&self.empty));
        }
        let mut hits = Vec::new();
        inner.root.collect(Some(subject), &mut hits);
        let result = if hits.is_empty() {
            Arc::clone(&self.empty)
        } else {
            Arc::new(build_result(&hits))
        };
        Lookup::Computed {
            result,
            generation: inner.generation,
        }
    }

    /// The write-locked half of [`Self::match_subject`]: caches `result`, computed at
    /// `generation`, unless the trie has changed since (then it may be stale, though it was
    /// correct when computed, so the caller still returns it).
    fn store(&self, subject: &str, result: &Arc<MatchResult<T>>, generation: u64) {
        if self.cache_capacity == 0 {
            return;
        }
        let mut inner = self.inner.write();
        if inner.generation != generation || inner.cache.contains_key(subject) {
            return;
        }
        inner.cache.insert(subject.into(), Arc::clone(result));
        if inner.cache.len() > self.cache_capacity {
            inner.evict(self.cache_capacity - self.cache_capacity / 8);
        }
    }

    /// Whether a message published to `subject` would reach anyone. Allocates nothing and
    /// stops at the first matching subscription; does not count as a match in the stats.
    pub fn has_interest(&self, subject: &str) -> bool {
        let inner = self.inner.read();
        if let Some(cached) = inner.cache.get(subject) {
            return !cached.is_empty();
        }
        subject::is_routable_subject(subject) && inner.root.any_match(Some(subject))
    }

    /// Number of stored subscriptions (copies counted).
    pub fn count(&self) -> usize {
        self.inner.read().count
    }

    /// The `/subsz` counters. Fanout figures are computed over the cached results.
    pub fn stats(&self) -> SublistStats {
        // Hits are read before matches: every counted hit has already counted its match,
        // so the rate stays within 0..=1.
        let hits = self.cache_hits.load(Ordering::Relaxed);
        let matches = self.matches.load(Ordering::Relaxed);
        let inner = self.inner.read();
        let (max_fanout, total_fanout) = inner
            .cache
            .values()
            .map(|r| r.fanout())
            .fold((0, 0), |(max, total), f| (max.max(f), total + f));
        let num_cache = inner.cache.len();
        SublistStats {
            num_subscriptions: inner.count,
            num_cache,
            num_inserts: inner.inserts,
            num_removes: inner.removes,
            num_matches: matches,
            cache_hit_rate: if matches == 0 {
                0.0
            } else {
                (hits as f64 / matches as f64).min(1.0)
            },
            max_fanout,
            avg_fanout: if num_cache == 0 {
                0.0
            } else {
                total_fanout as f64 / num_cache as f64
            },
        }
    }

    /// Every stored subscription as `(pattern, queue, value)`, in no particular order.
    pub fn all(&self) -> Vec<(String, Option<Arc<str>>, T)> {
        let inner = self.inner.read();
        let mut out = Vec::with_capacity(inner.count);
        inner.root.list(&mut String::new(), &mut out);
        out
    }

    /// Number of trie nodes below the root, to check pruning.
    #[cfg(test)]
    fn node_count(&self) -> usize {
        self.inner.read().root.node_count()
    }
}

#[cfg(test)]
#[path = "sublist_tests.rs"]
mod tests;
