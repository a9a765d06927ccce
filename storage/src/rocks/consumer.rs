//! [`RocksConsumerStore`]: consumer states in the `consumers` column family,
//! `consumers[uid|name] = record(codec::encode(state))`, and each consumer's config record next
//! to them, `consumers[uid|0xFF|name] = record(body)` ([`keys::consumer_config`]).
//!
//! Invariants: a save is one put, atomic; a corrupt record is reported, never decoded as a state.
//! Saves skip the WAL like the stream's own writes (see [`crate::db`]): consumer states are
//! applied Raft state, recovered from the log after a crash.

use rocksdb::WriteBatch;

use crate::consumer::{ConsumerState, ConsumerStore, codec};
use crate::db::{ColumnFamily, Db};
use crate::stream::StreamUid;
use crate::{StorageError, keys, record};

const CF: &str = "consumers";

/// Consumer states of every stream on the node.
#[derive(Debug, Clone)]
pub struct RocksConsumerStore {
    db: Db,
}

impl RocksConsumerStore {
    /// A store over the node's database.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

impl ConsumerStore for RocksConsumerStore {
    fn save(
        &mut self,
        stream: StreamUid,
        name: &str,
        state: &ConsumerState,
    ) -> Result<(), StorageError> {
        let key = keys::consumer(stream.0, name);
        let mut batch = WriteBatch::default();
        let value = record::seal(&key, &codec::encode(state));
        batch.put_cf(&self.db.cf(ColumnFamily::Consumers)?, key, value);
        self.db.write_unlogged(batch)
    }

    fn load(&self, stream: StreamUid, name: &str) -> Result<Option<ConsumerState>, StorageError> {
        let key = keys::consumer(stream.0, name);
        let cf = self.db.cf(ColumnFamily::Consumers)?;
        match self.db.raw().get_pinned_cf(&cf, &key)? {
            Some(v) => Ok(Some(codec::decode(record::open(CF, &key, &v)?)?)),
            None => Ok(None),
        }
    }

    fn delete(&mut self, stream: StreamUid, name: &str) -> Result<bool, StorageError> {
        let existed = self.load(stream, name)?.is_some();
        let cf = self.db.cf(ColumnFamily::Consumers)?;
        let mut batch = WriteBatch::default();
        batch.delete_cf(&cf, keys::consumer_config(stream.0, name));
        if existed {
            batch.delete_cf(&cf, keys::consumer(stream.0, name));
        }
        self.db.write_unlogged(batch)?;
        Ok(existed)
    }

    fn list(&self, stream: StreamUid) -> Result<Vec<String>, StorageError> {
        let cf = self.db.cf(ColumnFamily::Consumers)?;
        let prefix = stream.0.to_be_bytes();
        let mut it = self.db.raw().raw_iterator_cf(&cf);
        it.seek(prefix);
        let mut out = Vec::new();
        while let Some(k) = it.key() {
            // The config records sort after every state of the stream.
            if !k.starts_with(&prefix) || k.get(8) == Some(&keys::CONSUMER_CONFIG) {
                break;
            }
            let name = std::str::from_utf8(&k[8..])
                .map_err(|_| StorageError::corrupt(CF, "consumer name is not UTF-8"))?;
            out.push(name.to_string());
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    fn save_config(
        &mut self,
        stream: StreamUid,
        name: &str,
        body: &[u8],
    ) -> Result<(), StorageError> {
        let key = keys::consumer_config(stream.0, name);
        let mut batch = WriteBatch::default();
        let value = record::seal(&key, body);
        batch.put_cf(&self.db.cf(ColumnFamily::Consumers)?, key, value);
        self.db.write_unlogged(batch)
    }

    fn configs(&self, stream: StreamUid) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        let cf = self.db.cf(ColumnFamily::Consumers)?;
        let prefix = keys::consumer_config(stream.0, "");
        let mut it = self.db.raw().raw_iterator_cf(&cf);
        it.seek(&prefix);
        let mut out = Vec::new();
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if !k.starts_with(&prefix) {
                break;
            }
            let name = std::str::from_utf8(&k[prefix.len()..])
                .map_err(|_| StorageError::corrupt(CF, "consumer name is not UTF-8"))?;
            out.push((name.to_string(), record::open(CF, k, v)?.to_vec()));
            it.next();
        }
        it.status()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::consumer::conformance::consumer_conformance_tests!(|| {
        let dir = tempfile::tempdir().unwrap();
        let s = RocksConsumerStore::new(Db::open(dir.path()).unwrap());
        (dir, s)
    });

    #[test]
    fn flipped_byte_in_state_is_corrupt_not_data() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let mut s = RocksConsumerStore::new(db.clone());
        let mut st = ConsumerState::default();
        st.record_delivery(5, 1, 99);
        s.save(StreamUid(1), "c", &st).unwrap();
        let key = keys::consumer(1, "c");
        let mut v = db.get(ColumnFamily::Consumers, &key).unwrap().unwrap();
        let last = v.len() - 1;
        v[last] ^= 0x40;
        db.put_synced(&[(ColumnFamily::Consumers, &key, &v)])
            .unwrap();
        assert!(matches!(
            s.load(StreamUid(1), "c"),
            Err(StorageError::Corrupt { .. })
        ));
    }
}
