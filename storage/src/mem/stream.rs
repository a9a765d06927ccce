//! [`MemStreamStore`]: a stream held in a `BTreeMap`, with a per-subject sequence index.
//!
//! Invariants: `subjects[s]` holds exactly the present sequences whose subject is `s` (no empty
//! sets); `bytes` is the sum of `msg_size` over `msgs`; `first_seq`/`last_seq` follow the
//! [`crate::stream`] rules.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;

use crate::StorageError;
use crate::stream::{
    PurgePlan, PurgeRequest, StoredMsg, StreamState, StreamStore, StreamUid, check_subject,
};
use crate::subject;

/// How many messages `next_matching` scans linearly before switching to the subject index.
const LINEAR_SCAN: usize = 256;

/// A memory stream.
#[derive(Debug)]
pub struct MemStreamStore {
    uid: StreamUid,
    msgs: BTreeMap<u64, StoredMsg>,
    /// Present sequences per subject: per-subject counts, last-by-subject and filtered scans.
    subjects: HashMap<String, BTreeSet<u64>>,
    bytes: u64,
    first_seq: u64,
    last_seq: u64,
    last_ts: u64,
    /// State-machine records ([`StreamStore::put_meta`]); survive [`StreamStore::reset`].
    meta: BTreeMap<u8, Vec<u8>>,
    /// Tag set by [`StreamStore::set_write_tag`]; copied to `written_tag` by each mutation.
    tag: u64,
    /// The tag of the last mutation.
    written_tag: u64,
}

impl MemStreamStore {
    /// An empty memory stream.
    pub fn new(uid: StreamUid) -> Self {
        Self {
            uid,
            msgs: BTreeMap::new(),
            subjects: HashMap::new(),
            bytes: 0,
            first_seq: 0,
            last_seq: 0,
            last_ts: 0,
            meta: BTreeMap::new(),
            tag: 0,
            written_tag: 0,
        }
    }

    fn size_of(&self, m: &StoredMsg) -> u64 {
        self.msg_size(&m.subject, m.headers.len(), m.payload.len())
    }

    fn refresh_first(&mut self) {
        self.first_seq = self
            .msgs
            .keys()
            .next()
            .copied()
            .unwrap_or(self.last_seq + 1);
    }

    fn remove_inner(&mut self, seq: u64) -> bool {
        let Some(m) = self.msgs.remove(&seq) else {
            return false;
        };
        self.bytes -= self.size_of(&m);
        if let Some(set) = self.subjects.get_mut(&m.subject) {
            set.remove(&seq);
            if set.is_empty() {
                self.subjects.remove(&m.subject);
            }
        }
        true
    }
}

impl StreamStore for MemStreamStore {
    fn uid(&self) -> StreamUid {
        self.uid
    }

    fn msg_size(&self, subject: &str, headers_len: usize, payload_len: usize) -> u64 {
        (subject.len() + headers_len + payload_len + 16) as u64
    }

    fn store_msg(&mut self, msg: &StoredMsg) -> Result<(), StorageError> {
        check_subject(&msg.subject)?;
        if msg.seq <= self.last_seq {
            return Err(StorageError::SeqNotIncreasing {
                stream: self.uid.0,
                seq: msg.seq,
                last_seq: self.last_seq,
            });
        }
        if self.msgs.is_empty() {
            self.first_seq = msg.seq;
        }
        self.bytes += self.size_of(msg);
        self.last_seq = msg.seq;
        self.last_ts = msg.timestamp_ns;
        // The subject's set is usually there already: no key copy then.
        match self.subjects.get_mut(msg.subject.as_str()) {
            Some(set) => {
                set.insert(msg.seq);
            }
            None => {
                self.subjects
                    .insert(msg.subject.clone(), BTreeSet::from([msg.seq]));
            }
        }
        // Own copies: the message's bytes may be slices of a larger buffer (a whole Raft entry
        // of publishes), which a kept slice would hold in memory as long as the message lives.
        let kept = StoredMsg {
            seq: msg.seq,
            subject: msg.subject.clone(),
            headers: Bytes::copy_from_slice(&msg.headers),
            payload: Bytes::copy_from_slice(&msg.payload),
            timestamp_ns: msg.timestamp_ns,
        };
        self.msgs.insert(msg.seq, kept);
        self.written_tag = self.tag;
        Ok(())
    }

    fn skip_to(&mut self, next_seq: u64) -> Result<(), StorageError> {
        if self.msgs.is_empty() && next_seq > self.last_seq {
            self.last_seq = next_seq - 1;
            self.first_seq = next_seq;
            self.written_tag = self.tag;
        }
        Ok(())
    }

    fn get(&self, seq: u64) -> Result<Option<StoredMsg>, StorageError> {
        Ok(self.msgs.get(&seq).cloned())
    }

    fn last_for_subject(&self, filter: &str) -> Result<Option<StoredMsg>, StorageError> {
        let last = if subject::is_match_all(filter) {
            self.msgs.keys().next_back().copied()
        } else if subject::is_literal(filter) {
            self.subjects.get(filter).and_then(|s| s.last().copied())
        } else {
            self.subjects
                .iter()
                .filter(|(s, _)| subject::matches(filter, s))
                .filter_map(|(_, set)| set.last().copied())
                .max()
        };
        Ok(last.and_then(|seq| self.msgs.get(&seq).cloned()))
    }

    fn next_matching(
        &self,
        start: u64,
        filters: &[&str],
    ) -> Result<Option<StoredMsg>, StorageError> {
        let any = |s: &str| filters.is_empty() || filters.iter().any(|f| subject::matches(f, s));
        if filters.is_empty() || filters.iter().any(|f| subject::is_match_all(f)) {
            return Ok(self.msgs.range(start..).next().map(|(_, m)| m.clone()));
        }
        for (_, m) in self.msgs.range(start..).take(LINEAR_SCAN) {
            if any(&m.subject) {
                return Ok(Some(m.clone()));
            }
        }
        let best = self
            .subjects
            .iter()
            .filter(|(s, _)| any(s))
            .filter_map(|(_, set)| set.range(start..).next().copied())
            .min();
        Ok(best.and_then(|seq| self.msgs.get(&seq).cloned()))
    }

    fn next_matching_batch(
        &self,
        start: u64,
        filters: &[&str],
        max: usize,
        max_bytes: usize,
    ) -> Result<Vec<StoredMsg>, StorageError> {
        let all = filters.is_empty() || filters.iter().any(|f| subject::is_match_all(f));
        if !all {
            // Sparse filters are served by the subject index, one message at a time.
            return crate::stream::next_matching_each(self, start, filters, max, max_bytes);
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        for m in self.msgs.range(start..).map(|(_, m)| m) {
            if out.len() >= max || bytes >= max_bytes {
                break;
            }
            bytes += m.subject.len() + m.headers.len() + m.payload.len();
            out.push(m.clone());
        }
        Ok(out)
    }

    fn remove(&mut self, seq: u64) -> Result<bool, StorageError> {
        let removed = self.remove_inner(seq);
        if removed && seq == self.first_seq {
            self.refresh_first();
        }
        if removed {
            self.written_tag = self.tag;
        }
        Ok(removed)
    }

    fn purge(&mut self, req: &PurgeRequest) -> Result<u64, StorageError> {
        let matching = match crate::stream::purge_filter(req) {
            None => self.msgs.len() as u64,
            Some(f) => self.subject_counts(f)?.values().sum(),
        };
        let plan = PurgePlan::new(req, matching)?;
        let victims: Vec<u64> = self
            .msgs
            .range(..plan.below)
            .filter(|(_, m)| plan.matches(&m.subject))
            .map(|(seq, _)| *seq)
            .take(usize::try_from(plan.max_remove).unwrap_or(usize::MAX))
            .collect();
        for seq in &victims {
            self.remove_inner(*seq);
        }
        if !victims.is_empty() || plan.is_everything(self.last_seq) {
            self.refresh_first();
            self.written_tag = self.tag;
        }
        if let Some(next) = plan.skip_target(&self.state()) {
            self.skip_to(next)?;
        }
        Ok(victims.len() as u64)
    }

    fn state(&self) -> StreamState {
        StreamState {
            msgs: self.msgs.len() as u64,
            bytes: self.bytes,
            first_seq: self.first_seq,
            first_ts: self.msgs.values().next().map_or(0, |m| m.timestamp_ns),
            last_seq: self.last_seq,
            last_ts: self.last_ts,
            num_subjects: self.subjects.len() as u64,
        }
    }

    fn deleted(&self) -> Result<Vec<u64>, StorageError> {
        let mut out = Vec::new();
        let mut expect = self.first_seq;
        for seq in self.msgs.keys() {
            out.extend(expect..*seq);
            expect = seq + 1;
        }
        Ok(out)
    }

    fn subject_counts(&self, filter: &str) -> Result<BTreeMap<String, u64>, StorageError> {
        Ok(self
            .subjects
            .iter()
            .filter(|(s, _)| subject::is_match_all(filter) || subject::matches(filter, s))
            .map(|(s, set)| (s.clone(), set.len() as u64))
            .collect())
    }

    fn subject_count(&self, subject: &str) -> u64 {
        self.subjects.get(subject).map_or(0, |s| s.len() as u64)
    }

    fn first_seq_for_subject(&self, subject: &str) -> Result<Option<u64>, StorageError> {
        Ok(self.subjects.get(subject).and_then(|s| s.first().copied()))
    }

    fn reset(&mut self) -> Result<(), StorageError> {
        let meta = std::mem::take(&mut self.meta);
        let tag = self.tag;
        *self = Self::new(self.uid);
        self.meta = meta;
        self.tag = tag;
        self.written_tag = tag;
        Ok(())
    }

    fn put_meta(&mut self, kind: u8, body: &[u8]) -> Result<(), StorageError> {
        if kind < crate::keys::META_USER_MIN {
            return Err(StorageError::corrupt(
                "sm_meta",
                format!("reserved meta kind {kind}"),
            ));
        }
        self.meta.insert(kind, body.to_vec());
        Ok(())
    }

    fn get_meta(&self, kind: u8) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.meta.get(&kind).cloned())
    }

    fn set_write_tag(&mut self, tag: u64) {
        self.tag = tag;
    }

    fn write_tag(&self) -> u64 {
        self.written_tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::stream::conformance::stream_conformance_tests!(|| (
        (),
        MemStreamStore::new(StreamUid(7))
    ));
}
