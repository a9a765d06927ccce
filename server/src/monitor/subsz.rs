//! `/subsz`: interest-index statistics and, with `subs=1`, the subscriptions, of every
//! account (each subscription names its account) or, with `acc`, of one account.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::MonitorView;
use super::{Params, QueryParams, Refused, bad_request, json_response, rfc3339};
use crate::bus::SubRef;
use crate::router::subject;
use crate::router::sublist::SublistStats;

/// Default page size.
const DEFAULT_LIMIT: usize = 1024;

/// `GET /subsz?subs&offset&limit&test&acc`. Bad values are refused with 400 as in nats-server:
/// `subs`, `offset`, `limit`, then a `test` that is not a publish subject.
pub(super) async fn handler(
    State(s): State<Arc<MonitorView>>,
    Query(q): Params,
) -> Result<Response, Refused> {
    let q = QueryParams(q);
    let subs = q.bool("subs")?;
    let offset = q.offset()?;
    let limit = q.limit(DEFAULT_LIMIT)?;
    let test = q.get("test");
    if let Some(t) = test
        && !is_publish_subject(t)
    {
        return Err(bad_request(format!(
            "invalid test subject, must be valid publish subject: {t}"
        )));
    }
    let account = q.get("acc").filter(|a| !a.is_empty());
    let namespaces: Vec<_> = s
        .bus
        .namespaces()
        .into_iter()
        .filter(|ns| account.is_none_or(|a| *ns.account == *a))
        .collect();
    let st = sum(namespaces.iter().map(|ns| ns.sublist.stats()));
    let mut fields = Map::new();
    fields.insert("server_id".into(), json!(s.node.server_id));
    fields.insert(
        "now".into(),
        json!(rfc3339(time::OffsetDateTime::now_utc())),
    );
    fields.extend(stats_json(&st));
    let mut body = Value::Object(fields);
    if subs || test.is_some() {
        // Remote interest counts in the totals (as in nats-server) but is not listed.
        let mut all: Vec<_> = namespaces
            .iter()
            .flat_map(|ns| ns.sublist.all())
            .filter_map(|(pattern, queue, sub)| match sub {
                SubRef::Local(sub) => Some((pattern, queue, sub)),
                SubRef::Remote(_) => None,
            })
            .collect();
        if let Some(t) = test {
            all.retain(|(pattern, _, _)| subject::matches(pattern, t));
        }
        all.sort_by_key(|(_, _, sub)| (sub.client.cid, sub.sid.clone()));
        let total = all.len();
        let list: Vec<Value> = all
            .iter()
            .skip(offset)
            .take(limit)
            .map(|(subj, queue, sub)| {
                let mut m = Map::new();
                m.insert("account".into(), json!(sub.client.account()));
                m.insert("account_tag".into(), json!(sub.client.account()));
                m.insert("subject".into(), json!(subj));
                if let Some(q) = queue {
                    m.insert("qgroup".into(), json!(q.as_ref()));
                }
                m.insert("sid".into(), json!(String::from_utf8_lossy(&sub.sid)));
                m.insert("msgs".into(), json!(sub.delivered.load(Ordering::Relaxed)));
                m.insert("cid".into(), json!(sub.client.cid));
                Value::Object(m)
            })
            .collect();
        if let Value::Object(m) = &mut body {
            m.insert("total".into(), json!(total));
            m.insert("offset".into(), json!(offset));
            m.insert("limit".into(), json!(limit));
            m.insert("subscriptions_list".into(), json!(list));
        }
    } else if let Value::Object(m) = &mut body {
        m.insert("total".into(), json!(0));
        m.insert("offset".into(), json!(offset));
        m.insert("limit".into(), json!(limit));
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// The statistics of several sublists as one, as nats-server adds them: counts summed, the
/// largest fanout, the hit rate over all matches and the mean fanout over all cached results.
/// A sublist's statistics as nats-server's `SublistStats` JSON (`/subsz`, `/accountz`).
pub(super) fn stats_json(st: &SublistStats) -> Map<String, Value> {
    let v = json!({
        "num_subscriptions": st.num_subscriptions,
        "num_cache": st.num_cache,
        "num_inserts": st.num_inserts,
        "num_removes": st.num_removes,
        "num_matches": st.num_matches,
        "cache_hit_rate": st.cache_hit_rate,
        "max_fanout": st.max_fanout,
        "avg_fanout": st.avg_fanout,
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn sum(stats: impl Iterator<Item = SublistStats>) -> SublistStats {
    let mut out = SublistStats::default();
    let (mut hits, mut fanout) = (0.0, 0.0);
    for st in stats {
        out.num_subscriptions += st.num_subscriptions;
        out.num_cache += st.num_cache;
        out.num_inserts += st.num_inserts;
        out.num_removes += st.num_removes;
        out.num_matches += st.num_matches;
        out.max_fanout = out.max_fanout.max(st.max_fanout);
        hits += st.cache_hit_rate * st.num_matches as f64;
        fanout += st.avg_fanout * st.num_cache as f64;
    }
    if out.num_matches > 0 {
        out.cache_hit_rate = hits / out.num_matches as f64;
    }
    if out.num_cache > 0 {
        out.avg_fanout = fanout / out.num_cache as f64;
    }
    out
}

/// nats-server's check of `test` (`IsValidLiteralSubject`): no empty token and no token that
/// is a lone wildcard. Unlike client subjects, blanks are not checked.
fn is_publish_subject(t: &str) -> bool {
    t.split('.')
        .all(|tok| !tok.is_empty() && tok != "*" && tok != ">")
}
