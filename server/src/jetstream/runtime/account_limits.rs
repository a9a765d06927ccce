//! An account's JetStream limits (`accounts { A: { jetstream: { ... } } }`) where nats-server
//! checks them, with its errors:
//! - stream config (with the other checks, `api::validate`): `max_bytes_required` (10113),
//!   `memory_max_stream_bytes` / `storage_max_stream_bytes` (10122);
//! - stream create: `max_streams` (10027); a stream's `max_consumers` above the account's
//!   (10026); the `max_bytes` streams reserve against `max_mem` / `max_file` (10028 / 10047),
//!   a stream without `max_bytes` reserving nothing;
//! - stream update: the reservation again, without the stream's old one;
//! - publish (on the stream leader, before proposing): a message that would take the
//!   account's stored bytes of its storage type past the limit is refused with 10002;
//! - consumer create: `max_consumers` per stream and `max_ack_pending` per consumer act as
//!   the stream's own limits where lower (`consumer::api`).
//!
//! Usage counts the replicas on the node that checks (the meta leader for streams, the
//! stream leader for publishes), as account info reports it: on a cluster whose streams have
//! fewer replicas than nodes the storage limit is approximate.

use super::JetStream;
use super::replica::LocalStream;
use crate::bus::internal::InternalMsg;
use crate::jetstream::account;
use crate::jetstream::api::types::{StorageType, StreamConfig};
use crate::jetstream::api::validate::MaxBytesLimits;
use crate::jetstream::api::{ApiError, ErrorKind};

impl JetStream {
    /// Whether the stream with key `name` may be created (`existing` false) or updated to
    /// `cfg` within its account's limits.
    pub(crate) fn check_stream_limits(
        &self,
        name: &str,
        cfg: &StreamConfig,
        existing: bool,
    ) -> Result<(), ApiError> {
        let acc = account::stream_account(name);
        let Some(limits) = self.accounts.limits(acc) else {
            return Ok(());
        };
        if !existing && limits.max_streams > 0 {
            let count = self.meta.read(|m| {
                m.streams()
                    .filter(|s| s.name != name && account::in_account(&s.name, acc))
                    .count()
            });
            if i64::try_from(count).unwrap_or(i64::MAX) >= limits.max_streams {
                return Err(ApiError::new(ErrorKind::MaximumStreamsLimit));
            }
        }
        if cfg.max_consumers > 0
            && limits.max_consumers > 0
            && cfg.max_consumers > limits.max_consumers
        {
            return Err(ApiError::new(ErrorKind::MaximumConsumersLimit));
        }
        let (limit, error) = match cfg.storage {
            StorageType::Memory => (limits.max_memory, ErrorKind::MemoryResourcesExceeded),
            StorageType::File => (limits.max_storage, ErrorKind::StorageResourcesExceeded),
        };
        if limit < 0 {
            // Unlimited (`$G`, `jetstream: enabled`): no need to read every other stream's
            // config (a create would cost a JSON parse per stream).
            return Ok(());
        }
        let reserved: i64 = self.meta.read(|m| {
            m.streams()
                .filter(|s| s.name != name && account::in_account(&s.name, acc))
                .filter_map(|s| serde_json::from_slice::<StreamConfig>(&s.config_json).ok())
                .filter(|c| c.storage == cfg.storage)
                .map(|c| reservation(&c))
                .sum()
        });
        if reserved.saturating_add(reservation(cfg)) > limit {
            return Err(ApiError::new(error));
        }
        Ok(())
    }

    /// What the account of the stream with key `name` asks of its `max_bytes`.
    pub(crate) fn max_bytes_limits(&self, name: &str) -> MaxBytesLimits {
        self.accounts
            .limits(account::stream_account(name))
            .map_or(MaxBytesLimits::NONE, |l| MaxBytesLimits {
                required: l.max_bytes_required,
                memory_max: l.memory_max_stream_bytes,
                storage_max: l.storage_max_stream_bytes,
            })
    }

    /// On the stream leader: keeps in `msgs` those (from the front, in order) that fit in the
    /// limit of `ls`'s account for its storage type and returns the others (to be answered
    /// with 10002); returns nothing when the account has no such limit.
    pub(super) fn split_over_account_limit(
        &self,
        ls: &LocalStream,
        msgs: &mut Vec<InternalMsg>,
    ) -> Vec<InternalMsg> {
        let acc = account::stream_account(&ls.name);
        let Some(limits) = self
            .accounts
            .limits(acc)
            .filter(|l| l.max_memory >= 0 || l.max_storage >= 0)
        else {
            // No storage limit (`$G`, `jetstream: enabled`): nothing to look up per publish.
            return Vec::new();
        };
        let (storage, limit) = {
            let sm = ls.sm.lock();
            let storage = sm.config().storage;
            let limit = match storage {
                StorageType::Memory => limits.max_memory,
                StorageType::File => limits.max_storage,
            };
            (storage, limit)
        };
        let Ok(limit) = u64::try_from(limit) else {
            return Vec::new();
        };
        let usage = self.account_usage(acc);
        let mut used = match storage {
            StorageType::Memory => usage.memory,
            StorageType::File => usage.storage,
        };
        let sm = ls.sm.lock();
        let fits = msgs
            .iter()
            .take_while(|m| {
                let size = sm.store().msg_size(
                    &m.subject,
                    m.hdrs.as_ref().map_or(0, |h| h.len()),
                    m.payload.len(),
                );
                used += size;
                used <= limit
            })
            .count();
        drop(sm);
        msgs.split_off(fits)
    }

    /// Answers publishes refused for the account's storage limit (10002).
    pub(super) fn refuse_over_limit(&self, ls: &LocalStream, refused: &[InternalMsg]) {
        let ack = crate::jetstream::api::types::PubAck::error(
            account::stream_name(&ls.name),
            ApiError::new(ErrorKind::AccountResourcesExceeded),
        )
        .to_json();
        for msg in refused {
            if let Some(reply) = &msg.reply {
                self.bus
                    .publish(&crate::bus::Msg::new(reply, ack.as_bytes()).in_account(&msg.account));
            }
        }
    }
}

/// What `account`'s streams reserve: (memory, file) bytes.
pub(super) fn reserved(js: &JetStream, account: &str) -> (u64, u64) {
    js.meta.read(|m| {
        m.streams()
            .filter(|s| account::in_account(&s.name, account))
            .filter_map(|s| serde_json::from_slice::<StreamConfig>(&s.config_json).ok())
            .fold((0, 0), |(mem, file), c| {
                let r = u64::try_from(reservation(&c)).unwrap_or(0);
                match c.storage {
                    StorageType::Memory => (mem + r, file),
                    StorageType::File => (mem, file + r),
                }
            })
    })
}

/// The bytes a stream reserves in its account: `max_bytes` times its replicas, nothing
/// without `max_bytes`.
pub(super) fn reservation(cfg: &StreamConfig) -> i64 {
    cfg.max_bytes.max(0).saturating_mul(cfg.num_replicas.max(1))
}
