//! Accounts without JetStream (see [`JsAccounts`] for which have it): a request to `$JS.API`
//! there gets nats-server's answer for an account without JetStream (10039 `JetStream not
//! enabled for account`, with the operation's response type).
//! As on nats-server, DIRECT.GET and pull requests find no responders there, and an unknown
//! API subject is taken but not answered.

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::api::not_enabled_for_account_json;
use super::consumer::NEXT_PREFIX;
use super::next_msg;
use crate::bus::internal::{AcceptFn, InternalSub};
use crate::bus::{Bus, Msg};
use crate::jetstream::account::JsAccounts;
use crate::jetstream::op::ApiOp;
use crate::router::SublistError;

/// Answers `$JS.API` requests in every account (`$G` included) without JetStream until
/// `cancel`.
pub fn serve_accounts_without_jetstream(
    bus: &Bus,
    enabled: &JsAccounts,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> Result<(), SublistError> {
    let accounts = bus.accounts();
    let global: std::sync::Arc<str> = std::sync::Arc::from(crate::config::GLOBAL_ACCOUNT);
    for account in accounts.names().chain(std::iter::once(&global)) {
        if enabled.enabled(account) {
            continue;
        }
        // The system account answers the cluster operations without JetStream of its own
        // (`JetStream::spawn_cluster_op_tasks`).
        let cluster_ops = enabled.runs_cluster_ops(account);
        let accept: AcceptFn = std::sync::Arc::new(move |subject: &str| {
            let cluster_op = cluster_ops && ApiOp::CLUSTER_OP_SUBJECTS.contains(&subject);
            !(subject.starts_with("$JS.API.DIRECT.GET.")
                || subject.starts_with(NEXT_PREFIX)
                || cluster_op)
        });
        let sub = bus
            .namespace(account)
            .internal
            .subscribe_filtered("$JS.API.>", accept)?;
        let bus = bus.clone();
        let cancel = cancel.clone();
        let account = account.clone();
        tasks.spawn(async move { answer_loop(bus, &account, sub, cancel).await });
    }
    Ok(())
}

async fn answer_loop(bus: Bus, account: &str, mut sub: InternalSub, cancel: CancellationToken) {
    while let Some(msg) = next_msg(&mut sub, &cancel).await {
        let (Some(op), Some(reply)) = (ApiOp::parse(&msg.subject), msg.reply.as_deref()) else {
            continue;
        };
        let json = not_enabled_for_account_json(&op);
        bus.publish(&Msg::new(reply, json.as_bytes()).in_account(account));
    }
}
