//! Object store buckets through the official Rust client (async-nats 0.51): bucket create/bind/
//! delete, put and get of a 10 MiB object in 80 chunks (bytes and `SHA-256=` digest checked),
//! info, overwrite (old chunks purged), list, delete (meta tombstone, chunks purged), object and
//! bucket links (get through a link, across buckets), watch (puts and deletes, with history),
//! seal, and the stream the client creates. One node, plus an R3 store on three nodes where
//! every operation goes through a different node.
//!
//! Every test first ran against the real nats-server (`JETRAFT_TEST_SERVER=nats-server`).

use std::time::Duration;

use async_nats::jetstream::object_store::{self, GetErrorKind, ObjectInfo, ObjectStore};
use async_nats::jetstream::{self, Context};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE;
use futures_util::{StreamExt as _, TryStreamExt as _};
use jetraft_tests::harness::cluster::Cluster;
use jetraft_tests::harness::jsapi::{ELECTION, api, info_with_leader};
use jetraft_tests::harness::{assert_clean_log, wait_for, within};
use jetraft_tests::harness::{connect, start_server};
use rand::{RngCore as _, SeedableRng as _};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncReadExt as _;

const OP: Duration = Duration::from_secs(10);
/// Bound on moving a 10 MiB object (80 acknowledged chunk publishes, or one ordered consumer).
const BIG_OP: Duration = Duration::from_secs(120);
/// Size of the large object: 80 chunks of the default 128 KiB.
const BIG: usize = 10 * 1024 * 1024;
const CHUNK: usize = 128 * 1024;

fn config(bucket: &str, replicas: usize) -> object_store::Config {
    object_store::Config {
        bucket: bucket.to_string(),
        num_replicas: replicas,
        ..Default::default()
    }
}

async fn store(js: &Context, config: object_store::Config) -> ObjectStore {
    within(OP, "create object store", js.create_object_store(config))
        .await
        .expect("create object store")
}

/// `len` bytes from a seeded generator (incompressible, reproducible).
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// The digest string the clients store in object meta.
fn digest(bytes: &[u8]) -> String {
    format!("SHA-256={}", URL_SAFE.encode(Sha256::digest(bytes)))
}

async fn put(store: &ObjectStore, name: &str, bytes: &[u8]) -> ObjectInfo {
    let mut reader = bytes;
    within(BIG_OP, "put object", store.put(name, &mut reader))
        .await
        .expect("put object")
}

/// Reads the whole object (the client checks the digest when the last chunk arrives).
async fn get(store: &ObjectStore, name: &str) -> Vec<u8> {
    let mut obj = within(OP, "get object", store.get(name))
        .await
        .expect("get object");
    let mut out = Vec::new();
    within(BIG_OP, "read object", obj.read_to_end(&mut out))
        .await
        .expect("read object");
    out
}

async fn get_error(store: &ObjectStore, name: &str) -> GetErrorKind {
    match within(OP, "get object", store.get(name)).await {
        Ok(_) => panic!("get {name} succeeded"),
        Err(e) => e.kind(),
    }
}

async fn list(store: &ObjectStore) -> Vec<String> {
    let l = within(OP, "list", store.list()).await.expect("list");
    let infos: Vec<ObjectInfo> = within(OP, "list entries", l.try_collect())
        .await
        .expect("list entries");
    let mut names: Vec<String> = infos.into_iter().map(|i| i.name).collect();
    names.sort();
    names
}

/// The next watch update as `(name, deleted, size)`.
async fn next(w: &mut object_store::Watch) -> (String, bool, usize) {
    let i = within(OP, "watch update", w.next())
        .await
        .expect("watch ended")
        .expect("watch update");
    (i.name, i.deleted, i.size)
}

fn state(info: &Value) -> (u64, u64) {
    (
        info["state"]["messages"].as_u64().expect("messages"),
        info["state"]["num_subjects"].as_u64().unwrap_or_default(),
    )
}

#[tokio::test]
async fn obj_put_get_multi_chunk_object_info_overwrite_and_delete() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let store = store(
        &js,
        object_store::Config {
            description: Some("files".into()),
            ..config("FILES", 1)
        },
    )
    .await;

    // The stream behind the bucket is what the client asked for.
    let info = api(&nc, "$JS.API.STREAM.INFO.OBJ_FILES", Value::Null).await;
    let c = &info["config"];
    assert_eq!(
        c["subjects"],
        json!(["$O.FILES.C.>", "$O.FILES.M.>"]),
        "{info}"
    );
    assert_eq!(c["discard"], "new");
    assert_eq!(c["allow_rollup_hdrs"], true);
    assert_eq!(c["allow_direct"], true);
    assert_eq!(c["description"], "files");

    let big = data(BIG, 1);
    let put_info = put(&store, "dir/big.bin", &big).await;
    assert_eq!(put_info.size, BIG);
    assert_eq!(put_info.chunks, BIG / CHUNK);
    assert_eq!(put_info.digest.as_deref(), Some(digest(&big).as_str()));
    // 80 chunks on one subject, one meta message.
    let info = api(&nc, "$JS.API.STREAM.INFO.OBJ_FILES", Value::Null).await;
    assert_eq!(state(&info), (BIG as u64 / CHUNK as u64 + 1, 2), "{info}");

    let got = get(&store, "dir/big.bin").await;
    assert_eq!(got.len(), BIG);
    assert!(got == big, "object bytes differ");
    assert_eq!(digest(&got), digest(&big));

    let meta = within(OP, "info", store.info("dir/big.bin"))
        .await
        .expect("info");
    assert_eq!(meta.name, "dir/big.bin");
    assert_eq!(meta.bucket, "FILES");
    assert_eq!(meta.size, BIG);
    assert_eq!(meta.chunks, 80);
    assert_eq!(meta.nuid, put_info.nuid);
    assert!(!meta.deleted);
    assert_eq!(
        meta.options.as_ref().and_then(|o| o.max_chunk_size),
        Some(CHUNK)
    );
    // The meta subject is the base64url (padded) name.
    let m = api(
        &nc,
        "$JS.API.STREAM.MSG.GET.OBJ_FILES",
        json!({"last_by_subj": "$O.FILES.M.ZGlyL2JpZy5iaW4="}),
    )
    .await;
    assert!(m["error"].is_null(), "{m}");

    // An object that is not a multiple of the chunk size, and an empty object.
    let odd = data(3 * CHUNK + 17, 2);
    assert_eq!(put(&store, "odd", &odd).await.chunks, 4);
    assert!(get(&store, "odd").await == odd);
    let empty = put(&store, "empty", b"").await;
    assert_eq!((empty.size, empty.chunks), (0, 0));
    assert!(get(&store, "empty").await.is_empty());

    // Overwriting replaces meta (rollup) and purges the old chunks.
    let small = data(1000, 3);
    let over = put(&store, "dir/big.bin", &small).await;
    assert_ne!(over.nuid, put_info.nuid);
    assert!(get(&store, "dir/big.bin").await == small);
    let info = api(&nc, "$JS.API.STREAM.INFO.OBJ_FILES", Value::Null).await;
    // big: 1 chunk + meta; odd: 4 chunks + meta; empty: meta.
    assert_eq!(info["state"]["messages"], 8, "{info}");
    assert_eq!(
        list(&store).await,
        vec!["dir/big.bin".to_string(), "empty".into(), "odd".into()]
    );

    // Delete: a tombstone meta, chunks purged; info still reads it (deleted), get refuses.
    within(OP, "delete", store.delete("odd"))
        .await
        .expect("delete");
    let gone = within(OP, "info deleted", store.info("odd"))
        .await
        .expect("info of deleted object");
    assert!(gone.deleted);
    assert_eq!((gone.size, gone.chunks), (0, 0));
    assert_eq!(get_error(&store, "odd").await, GetErrorKind::NotFound);
    assert_eq!(get_error(&store, "never").await, GetErrorKind::NotFound);
    let info = api(&nc, "$JS.API.STREAM.INFO.OBJ_FILES", Value::Null).await;
    assert_eq!(info["state"]["messages"], 4, "{info}");
    assert_eq!(
        list(&store).await,
        vec!["dir/big.bin".to_string(), "empty".into()]
    );

    // Binding to the bucket again, then deleting it.
    let bound = within(OP, "bind", js.get_object_store("FILES"))
        .await
        .expect("bind");
    assert!(get(&bound, "dir/big.bin").await == small);
    within(OP, "delete bucket", js.delete_object_store("FILES"))
        .await
        .expect("delete bucket");
    assert!(
        within(OP, "bind deleted", js.get_object_store("FILES"))
            .await
            .is_err()
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn obj_links_to_objects_and_buckets() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let a = store(&js, config("LA", 1)).await;
    let b = store(&js, config("LB", 1)).await;
    let body = data(2 * CHUNK + 5, 4);
    let target = put(&a, "target", &body).await;

    // An object link in the same bucket: get follows it.
    let link = within(OP, "add link", a.add_link("alias", &target))
        .await
        .expect("add link");
    let l = link.options.as_ref().and_then(|o| o.link.as_ref());
    assert_eq!(l.map(|l| l.bucket.as_str()), Some("LA"));
    assert_eq!(l.and_then(|l| l.name.as_deref()), Some("target"));
    assert!(get(&a, "alias").await == body);
    let info = within(OP, "link info", a.info("alias"))
        .await
        .expect("link info");
    assert_eq!((info.size, info.chunks), (0, 0));

    // An object link across buckets.
    within(OP, "cross link", b.add_link("from-a", &target))
        .await
        .expect("cross-bucket link");
    assert!(get(&b, "from-a").await == body);

    // A bucket link: info reads it, get refuses it.
    let bl = within(OP, "bucket link", b.add_bucket_link("to-a", "LA"))
        .await
        .expect("bucket link");
    let l = bl.options.as_ref().and_then(|o| o.link.as_ref());
    assert_eq!(
        l.map(|l| (l.bucket.as_str(), l.name.is_none())),
        Some(("LA", true))
    );
    assert_eq!(get_error(&b, "to-a").await, GetErrorKind::BucketLink);

    // A link cannot point at a link, nor overwrite a real object.
    assert!(
        within(OP, "link to link", b.add_link("again", &link))
            .await
            .is_err()
    );
    assert!(
        within(OP, "link over object", a.add_link("target", &target))
            .await
            .is_err()
    );
    assert_eq!(
        list(&b).await,
        vec!["from-a".to_string(), "to-a".to_string()]
    );
    assert_clean_log(&srv);
}

#[tokio::test]
async fn obj_watch_sees_puts_and_deletes() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let store = store(&js, config("W", 1)).await;
    put(&store, "old", b"old").await;

    // Updates only (deliver new).
    let mut w = within(OP, "watch", store.watch()).await.expect("watch");
    put(&store, "x", &data(CHUNK + 1, 5)).await;
    assert_eq!(next(&mut w).await, ("x".into(), false, CHUNK + 1));
    within(OP, "delete", store.delete("x"))
        .await
        .expect("delete");
    assert_eq!(next(&mut w).await, ("x".into(), true, 0));
    put(&store, "x", b"again").await;
    assert_eq!(next(&mut w).await, ("x".into(), false, 5));

    // With history: the latest meta of every object first (deleted ones included), then updates.
    let mut h = within(OP, "watch with history", store.watch_with_history())
        .await
        .expect("watch with history");
    // (Read before deleting: the delete's rollup removes the meta it replaces, so a delete
    // racing with the initial delivery would hide the old meta.)
    let mut seen = vec![next(&mut h).await, next(&mut h).await];
    seen.sort();
    assert_eq!(seen, vec![("old".into(), false, 3), ("x".into(), false, 5)]);
    within(OP, "delete old", store.delete("old"))
        .await
        .expect("delete old");
    assert_eq!(next(&mut h).await, ("old".into(), true, 0));
    assert_eq!(next(&mut w).await, ("old".into(), true, 0));
    assert_clean_log(&srv);
}

#[tokio::test]
async fn obj_seal_makes_the_bucket_read_only() {
    let srv = start_server().await;
    let nc = connect(&srv).await;
    let js = jetstream::new(nc.clone());
    let mut store = store(&js, config("SEAL", 1)).await;
    let body = data(CHUNK + 9, 6);
    put(&store, "kept", &body).await;
    within(OP, "seal", store.seal()).await.expect("seal");
    let info = api(&nc, "$JS.API.STREAM.INFO.OBJ_SEAL", Value::Null).await;
    assert_eq!(info["config"]["sealed"], true, "{info}");
    // Reads still work; writes, deletes and purges are refused.
    assert!(get(&store, "kept").await == body);
    let mut reader: &[u8] = b"nope";
    assert!(
        within(OP, "put sealed", store.put("new", &mut reader))
            .await
            .is_err()
    );
    assert!(
        within(OP, "delete sealed", store.delete("kept"))
            .await
            .is_err()
    );
    assert!(get(&store, "kept").await == body);
    let info = api(&nc, "$JS.API.STREAM.INFO.OBJ_SEAL", Value::Null).await;
    assert_eq!(info["state"]["messages"], 3, "{info}");
    assert_clean_log(&srv);
}

#[tokio::test]
async fn obj_r3_store_across_nodes() {
    let cluster = Cluster::start(3, "obj").await.expect("cluster");
    let c0 = connect(cluster.node(0)).await;
    let c1 = connect(cluster.node(1)).await;
    let c2 = connect(cluster.node(2)).await;
    let js0 = jetstream::new(c0.clone());
    // Retried: the first request can time out while the meta group elects its leader.
    let s0 = wait_for("R3 store created", ELECTION, || {
        let js0 = js0.clone();
        async move { js0.create_object_store(config("R3", 3)).await.ok() }
    })
    .await;
    let info = info_with_leader(&c1, "OBJ_R3").await;
    assert_eq!(info["config"]["num_replicas"], 3, "{info}");
    let s1 = within(OP, "bind n2", jetstream::new(c1).get_object_store("R3"))
        .await
        .expect("bind n2");
    let s2 = within(
        OP,
        "bind n3",
        jetstream::new(c2.clone()).get_object_store("R3"),
    )
    .await
    .expect("bind n3");

    let mut w = within(OP, "watch", s2.watch()).await.expect("watch");
    let big = data(BIG, 7);
    let put_info = put(&s0, "big", &big).await;
    assert_eq!(put_info.chunks, 80);
    assert_eq!(next(&mut w).await, ("big".into(), false, BIG));
    for s in [&s1, &s2] {
        let got = get(s, "big").await;
        assert!(got == big, "object bytes differ");
    }
    let small = data(700, 8);
    put(&s1, "small", &small).await;
    assert_eq!(next(&mut w).await, ("small".into(), false, 700));
    within(OP, "link", s2.add_link("alias", &put_info))
        .await
        .expect("link");
    assert_eq!(next(&mut w).await.0, "alias");
    assert!(get(&s0, "alias").await == big);
    assert_eq!(
        list(&s0).await,
        vec!["alias".to_string(), "big".into(), "small".into()]
    );

    within(OP, "delete", s2.delete("big"))
        .await
        .expect("delete");
    assert_eq!(next(&mut w).await, ("big".into(), true, 0));
    assert_eq!(get_error(&s1, "big").await, GetErrorKind::NotFound);
    let info = info_with_leader(&c2, "OBJ_R3").await;
    // small: 1 chunk + meta; big: tombstone; alias: meta.
    assert_eq!(info["state"]["messages"], 4, "{info}");
    assert_eq!(list(&s1).await, vec!["alias".to_string(), "small".into()]);
    cluster.assert_clean_logs();
}
