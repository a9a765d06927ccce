//! [`ApiOp`]: which `$JS.API` operation a request subject names. Pure parsing, no state.
//!
//! Unknown subjects, and known ones with missing or extra tokens, parse to `None`: nats-server
//! sends no answer at all for them (the client times out), and so do we.

pub use crate::jetstream::api::consumer_validate::CreateForm;

/// A `$JS.API` operation, with the names carried in its subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiOp {
    /// `$JS.API.INFO`
    AccountInfo,
    /// `$JS.API.STREAM.CREATE.<S>`
    StreamCreate(String),
    /// `$JS.API.STREAM.UPDATE.<S>`
    StreamUpdate(String),
    /// `$JS.API.STREAM.INFO.<S>`
    StreamInfo(String),
    /// `$JS.API.STREAM.DELETE.<S>`
    StreamDelete(String),
    /// `$JS.API.STREAM.NAMES`
    StreamNames,
    /// `$JS.API.STREAM.LIST`
    StreamList,
    /// `$JS.API.STREAM.PURGE.<S>`
    StreamPurge(String),
    /// `$JS.API.STREAM.MSG.GET.<S>`
    MsgGet(String),
    /// `$JS.API.STREAM.MSG.DELETE.<S>`
    MsgDelete(String),
    /// `$JS.API.DIRECT.GET.<S>` (request in the body)
    DirectGet(String),
    /// `$JS.API.DIRECT.GET.<S>.<subject...>` (last message on a subject)
    DirectGetLast(String, String),
    /// `$JS.API.STREAM.LEADER.STEPDOWN.<S>`
    StreamLeaderStepdown(String),
    /// `$JS.API.STREAM.PEER.REMOVE.<S>`
    StreamPeerRemove(String),
    /// `$JS.API.STREAM.SNAPSHOT.<S>`
    StreamSnapshot(String),
    /// `$JS.API.STREAM.RESTORE.<S>`
    StreamRestore(String),
    /// `$JS.API.META.LEADER.STEPDOWN`
    MetaLeaderStepdown,
    /// `$JS.API.SERVER.REMOVE` (a node leaves the cluster for good)
    ServerRemove,
    /// `$JS.API.SERVER.DRAIN` (a jetraft extension: drain a node for maintenance)
    ServerDrain,
    /// `$JS.API.CONSUMER.CREATE.<S>[.<C>[.<filter>]]` / `CONSUMER.DURABLE.CREATE.<S>.<C>`
    ConsumerCreate(String, CreateForm),
    /// `$JS.API.CONSUMER.INFO.<S>.<C>`
    ConsumerInfo(String, String),
    /// `$JS.API.CONSUMER.DELETE.<S>.<C>`
    ConsumerDelete(String, String),
    /// `$JS.API.CONSUMER.NAMES.<S>`
    ConsumerNames(String),
    /// `$JS.API.CONSUMER.LIST.<S>`
    ConsumerList(String),
    /// `$JS.API.CONSUMER.MSG.NEXT.<S>.<C>`
    ConsumerNext(String, String),
    /// `$JS.API.CONSUMER.PAUSE.<S>.<C>`
    ConsumerPause(String, String),
    /// `$JS.API.CONSUMER.UNPIN.<S>.<C>`
    ConsumerUnpin(String, String),
    /// `$JS.API.CONSUMER.LEADER.STEPDOWN.<S>.<C>`
    ConsumerLeaderStepdown(String, String),
}

/// The API prefix every operation lives under.
pub const API_PREFIX: &str = "$JS.API.";

impl ApiOp {
    /// Parses a request subject; `None` for anything nats-server would not answer.
    pub fn parse(subject: &str) -> Option<ApiOp> {
        let rest = subject.strip_prefix(API_PREFIX)?;
        let tokens: Vec<&str> = rest.split('.').collect();
        let one = |name: &str| Some(name.to_string());
        match tokens.as_slice() {
            ["INFO"] => Some(ApiOp::AccountInfo),
            ["STREAM", "CREATE", s] => one(s).map(ApiOp::StreamCreate),
            ["STREAM", "UPDATE", s] => one(s).map(ApiOp::StreamUpdate),
            ["STREAM", "INFO", s] => one(s).map(ApiOp::StreamInfo),
            ["STREAM", "DELETE", s] => one(s).map(ApiOp::StreamDelete),
            ["STREAM", "NAMES"] => Some(ApiOp::StreamNames),
            ["STREAM", "LIST"] => Some(ApiOp::StreamList),
            ["STREAM", "PURGE", s] => one(s).map(ApiOp::StreamPurge),
            ["STREAM", "MSG", "GET", s] => one(s).map(ApiOp::MsgGet),
            ["STREAM", "MSG", "DELETE", s] => one(s).map(ApiOp::MsgDelete),
            ["STREAM", "LEADER", "STEPDOWN", s] => one(s).map(ApiOp::StreamLeaderStepdown),
            ["STREAM", "PEER", "REMOVE", s] => one(s).map(ApiOp::StreamPeerRemove),
            ["STREAM", "SNAPSHOT", s] => one(s).map(ApiOp::StreamSnapshot),
            ["STREAM", "RESTORE", s] => one(s).map(ApiOp::StreamRestore),
            ["META", "LEADER", "STEPDOWN"] => Some(ApiOp::MetaLeaderStepdown),
            ["SERVER", "REMOVE"] => Some(ApiOp::ServerRemove),
            ["SERVER", "DRAIN"] => Some(ApiOp::ServerDrain),
            ["DIRECT", "GET", s] => one(s).map(ApiOp::DirectGet),
            ["CONSUMER", "CREATE", s] => {
                Some(ApiOp::ConsumerCreate(s.to_string(), CreateForm::Plain))
            }
            ["CONSUMER", "CREATE", s, c] => Some(ApiOp::ConsumerCreate(
                s.to_string(),
                CreateForm::Named(c.to_string()),
            )),
            ["CONSUMER", "CREATE", s, c, filter @ ..] => Some(ApiOp::ConsumerCreate(
                s.to_string(),
                CreateForm::Filtered {
                    name: c.to_string(),
                    filter: filter.join("."),
                },
            )),
            ["CONSUMER", "DURABLE", "CREATE", s, c] => Some(ApiOp::ConsumerCreate(
                s.to_string(),
                CreateForm::Durable(c.to_string()),
            )),
            ["CONSUMER", "INFO", s, c] => Some(ApiOp::ConsumerInfo(s.to_string(), c.to_string())),
            ["CONSUMER", "DELETE", s, c] => {
                Some(ApiOp::ConsumerDelete(s.to_string(), c.to_string()))
            }
            ["CONSUMER", "NAMES", s] => one(s).map(ApiOp::ConsumerNames),
            ["CONSUMER", "LIST", s] => one(s).map(ApiOp::ConsumerList),
            ["CONSUMER", "MSG", "NEXT", s, c] => {
                Some(ApiOp::ConsumerNext(s.to_string(), c.to_string()))
            }
            ["CONSUMER", "PAUSE", s, c] => Some(ApiOp::ConsumerPause(s.to_string(), c.to_string())),
            ["CONSUMER", "UNPIN", s, c] => Some(ApiOp::ConsumerUnpin(s.to_string(), c.to_string())),
            ["CONSUMER", "LEADER", "STEPDOWN", s, c] => {
                Some(ApiOp::ConsumerLeaderStepdown(s.to_string(), c.to_string()))
            }
            ["DIRECT", "GET", s, subject @ ..] if !subject.is_empty() => {
                Some(ApiOp::DirectGetLast(s.to_string(), subject.join(".")))
            }
            _ => None,
        }
        .filter(|op| op.stream().is_none_or(|s| !s.is_empty()))
    }

    /// The operation with the stream it names replaced by that stream's key in `account`
    /// (see [`crate::jetstream::account`]).
    pub fn keyed(mut self, account: &str) -> Self {
        let stream = match &mut self {
            ApiOp::StreamCreate(s)
            | ApiOp::StreamUpdate(s)
            | ApiOp::StreamInfo(s)
            | ApiOp::StreamDelete(s)
            | ApiOp::StreamPurge(s)
            | ApiOp::MsgGet(s)
            | ApiOp::MsgDelete(s)
            | ApiOp::DirectGet(s)
            | ApiOp::DirectGetLast(s, _)
            | ApiOp::StreamLeaderStepdown(s)
            | ApiOp::StreamPeerRemove(s)
            | ApiOp::StreamSnapshot(s)
            | ApiOp::StreamRestore(s)
            | ApiOp::ConsumerCreate(s, _)
            | ApiOp::ConsumerInfo(s, _)
            | ApiOp::ConsumerDelete(s, _)
            | ApiOp::ConsumerNames(s)
            | ApiOp::ConsumerList(s)
            | ApiOp::ConsumerNext(s, _)
            | ApiOp::ConsumerPause(s, _)
            | ApiOp::ConsumerUnpin(s, _)
            | ApiOp::ConsumerLeaderStepdown(s, _) => Some(s),
            ApiOp::AccountInfo
            | ApiOp::StreamNames
            | ApiOp::StreamList
            | ApiOp::MetaLeaderStepdown
            | ApiOp::ServerRemove
            | ApiOp::ServerDrain => None,
        };
        if let Some(s) = stream {
            *s = crate::jetstream::account::stream_key(account, s);
        }
        self
    }

    /// The cluster operations only the system account may run (nats-server answers them
    /// only there; jetraft without accounts answers them in `$G`).
    pub fn is_cluster_op(&self) -> bool {
        matches!(
            self,
            ApiOp::MetaLeaderStepdown | ApiOp::ServerRemove | ApiOp::ServerDrain
        )
    }

    /// The subjects of the cluster operations.
    pub const CLUSTER_OP_SUBJECTS: [&'static str; 3] = [
        "$JS.API.META.LEADER.STEPDOWN",
        "$JS.API.SERVER.REMOVE",
        "$JS.API.SERVER.DRAIN",
    ];

    /// The stream the operation names, if any.
    pub fn stream(&self) -> Option<&str> {
        match self {
            ApiOp::StreamCreate(s)
            | ApiOp::StreamUpdate(s)
            | ApiOp::StreamInfo(s)
            | ApiOp::StreamDelete(s)
            | ApiOp::StreamPurge(s)
            | ApiOp::MsgGet(s)
            | ApiOp::MsgDelete(s)
            | ApiOp::DirectGet(s)
            | ApiOp::DirectGetLast(s, _)
            | ApiOp::StreamLeaderStepdown(s)
            | ApiOp::StreamPeerRemove(s)
            | ApiOp::StreamSnapshot(s)
            | ApiOp::StreamRestore(s)
            | ApiOp::ConsumerCreate(s, _)
            | ApiOp::ConsumerInfo(s, _)
            | ApiOp::ConsumerDelete(s, _)
            | ApiOp::ConsumerNames(s)
            | ApiOp::ConsumerList(s)
            | ApiOp::ConsumerNext(s, _)
            | ApiOp::ConsumerPause(s, _)
            | ApiOp::ConsumerUnpin(s, _)
            | ApiOp::ConsumerLeaderStepdown(s, _) => Some(s),
            ApiOp::AccountInfo
            | ApiOp::StreamNames
            | ApiOp::StreamList
            | ApiOp::MetaLeaderStepdown
            | ApiOp::ServerRemove => None,
            ApiOp::ServerDrain => None,
        }
    }

    /// Which node answers: the meta leader, the stream's leader, or any replica of the stream.
    pub fn owner(&self) -> Owner {
        match self {
            // Account info and stream names/lists too, as on nats-server: a node other than the
            // meta leader may not have applied a stream the same client just created.
            ApiOp::StreamCreate(_)
            | ApiOp::StreamUpdate(_)
            | ApiOp::StreamDelete(_)
            | ApiOp::StreamPeerRemove(_)
            | ApiOp::StreamRestore(_)
            | ApiOp::MetaLeaderStepdown
            | ApiOp::ServerRemove
            | ApiOp::ServerDrain
            | ApiOp::AccountInfo
            | ApiOp::StreamNames
            | ApiOp::StreamList => Owner::MetaLeader,
            ApiOp::StreamInfo(_)
            | ApiOp::StreamPurge(_)
            | ApiOp::MsgGet(_)
            | ApiOp::MsgDelete(_)
            | ApiOp::StreamLeaderStepdown(_)
            | ApiOp::StreamSnapshot(_)
            | ApiOp::ConsumerCreate(..)
            | ApiOp::ConsumerInfo(..)
            | ApiOp::ConsumerDelete(..)
            | ApiOp::ConsumerNames(_)
            | ApiOp::ConsumerList(_)
            | ApiOp::ConsumerNext(..)
            | ApiOp::ConsumerPause(..)
            | ApiOp::ConsumerUnpin(..)
            | ApiOp::ConsumerLeaderStepdown(..)
            // Direct gets too: the leader answers once it confirmed it still leads, so a read
            // never returns less than a write acknowledged before it (nats-server lets any
            // replica answer; see the README).
            | ApiOp::DirectGet(_)
            | ApiOp::DirectGetLast(..) => Owner::StreamLeader,
        }
    }
}

impl ApiOp {
    /// Whether the request reads stored messages (the leader confirms it still leads first).
    pub fn reads_messages(&self) -> bool {
        matches!(
            self,
            ApiOp::MsgGet(_) | ApiOp::DirectGet(_) | ApiOp::DirectGetLast(..)
        )
    }
}

/// Where an API request must be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The meta group's leader (stream create/update/delete, cluster operations).
    MetaLeader,
    /// The stream group's leader (reads and writes that must be linearizable).
    StreamLeader,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_names_the_stream_of_the_account() {
        let keyed =
            |subject: &str, account: &str| ApiOp::parse(subject).map(|op| op.keyed(account));
        assert_eq!(
            keyed("$JS.API.STREAM.INFO.ORDERS", "$G"),
            Some(ApiOp::StreamInfo("ORDERS".into()))
        );
        assert_eq!(
            keyed("$JS.API.CONSUMER.MSG.NEXT.ORDERS.work", "A"),
            Some(ApiOp::ConsumerNext("A/ORDERS".into(), "work".into()))
        );
        assert_eq!(
            keyed("$JS.API.STREAM.INFO.A/ORDERS", "$G"),
            Some(ApiOp::StreamInfo("$G/A/ORDERS".into()))
        );
        assert_eq!(keyed("$JS.API.INFO", "A"), Some(ApiOp::AccountInfo));
    }

    #[test]
    fn parses_known_subjects() {
        let cases = [
            ("$JS.API.INFO", ApiOp::AccountInfo),
            ("$JS.API.STREAM.CREATE.S", ApiOp::StreamCreate("S".into())),
            ("$JS.API.STREAM.MSG.GET.S", ApiOp::MsgGet("S".into())),
            ("$JS.API.STREAM.NAMES", ApiOp::StreamNames),
            ("$JS.API.META.LEADER.STEPDOWN", ApiOp::MetaLeaderStepdown),
            ("$JS.API.SERVER.REMOVE", ApiOp::ServerRemove),
            ("$JS.API.SERVER.DRAIN", ApiOp::ServerDrain),
            ("$JS.API.DIRECT.GET.S", ApiOp::DirectGet("S".into())),
            (
                "$JS.API.DIRECT.GET.S.a.b.c",
                ApiOp::DirectGetLast("S".into(), "a.b.c".into()),
            ),
        ];
        for (subject, want) in cases {
            assert_eq!(ApiOp::parse(subject), Some(want), "{subject}");
        }
    }

    #[test]
    fn unknown_or_malformed_subjects_get_no_answer() {
        for subject in [
            "$JS.API.BOGUS.THING",
            "$JS.API.STREAM.INFO",
            "$JS.API.STREAM.INFO.a.b",
            "$JS.API.STREAM.TEMPLATE.NAMES",
            "$JS.API.INFO.x",
            "$JS.API.STREAM.CREATE.",
            "other",
        ] {
            assert_eq!(ApiOp::parse(subject), None, "{subject}");
        }
    }

    #[test]
    fn owners() {
        assert_eq!(ApiOp::StreamCreate("S".into()).owner(), Owner::MetaLeader);
        assert_eq!(ApiOp::StreamInfo("S".into()).owner(), Owner::StreamLeader);
        assert_eq!(ApiOp::StreamNames.owner(), Owner::MetaLeader);
    }
}
