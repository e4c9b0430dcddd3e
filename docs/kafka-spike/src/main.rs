//! Feasibility spike: an in-process Kafka-compatible broker (nisshi-broker 0.6.0,
//! libsql/SQLite storage in a temporary directory, loopback port) driven end to end
//! by a real Kafka client with consumer groups (rdkafka / bundled librdkafka).
//!
//! Steps: start broker -> create topic (1 partition) -> produce 3 records ->
//! consumer in group "g0" subscribes and consumes them -> commit offset 3 ->
//! read the committed offset back (member's committed() and a fresh OffsetFetch)
//! -> shut everything down.

use std::{
    net::{TcpListener as StdListener, TcpStream},
    path::{Component, Path},
    time::{Duration, Instant},
};

use nisshi_broker::{NODE_ID, broker::Broker, coordinator::group::administrator::Controller};
use nisshi_storage::ArcDynStorage;
use rdkafka::{
    ClientConfig, Message, Offset, TopicPartitionList,
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, CommitMode, Consumer},
    producer::{FutureProducer, FutureRecord},
};
use url::Url;
use uuid::Uuid;

const TOPIC: &str = "t0";
const GROUP: &str = "g0";

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// nisshi-storage's lite engine always joins the `sqlite:` URL's host and path onto
/// the process's current directory (it strips a leading '/'), so an absolute temp
/// dir has to be expressed relative to cwd. An opaque-path URL (`sqlite:../../x`)
/// keeps its `..` segments (no dot-segment normalisation), which makes that possible.
fn sqlite_url_for(db: &Path) -> Res<Url> {
    let cwd = std::env::current_dir()?;
    let depth = cwd
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let rel_root = "../".repeat(depth);
    let abs = db.to_str().ok_or("non-utf8 temp path")?;
    let url = Url::parse(&format!("sqlite:{rel_root}{}", abs.trim_start_matches('/')))?;
    Ok(url)
}

fn free_loopback_port() -> Res<u16> {
    let l = StdListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn step<T>(name: &str, t: Instant, r: Res<T>) -> Option<T> {
    match r {
        Ok(v) => {
            println!("STEP {name}: OK ({} ms)", t.elapsed().as_millis());
            Some(v)
        }
        Err(e) => {
            println!("STEP {name}: FAILED after {} ms: {e}", t.elapsed().as_millis());
            None
        }
    }
}

fn main() -> Res<()> {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }

    let all = Instant::now();
    let tmp = tempfile::Builder::new().prefix("nisshi-spike-").tempdir()?;
    let db = tmp.path().join("nisshi.db");
    let storage = sqlite_url_for(&db)?;
    let port = free_loopback_port()?;
    let bootstrap = format!("127.0.0.1:{port}");
    println!("storage url: {storage}  (db file {})", db.display());
    println!("listener: tcp://{bootstrap}");

    // The broker gets its own tokio runtime so that shutting that runtime down
    // stops the broker: 0.6.0 exposes no public cancellation handle (Broker::main
    // only stops on SIGINT/SIGTERM), so we spawn `serve()` and abort/drop it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    // ---- 1. start broker in process ----
    let t = Instant::now();
    let listener = Url::parse(&format!("tcp://{bootstrap}"))?;
    let broker = rt.block_on(
        Broker::<Controller<ArcDynStorage>, ArcDynStorage>::builder()
            .node_id(NODE_ID)
            .cluster_id("spike")
            .incarnation_id(Uuid::now_v7())
            .advertised_listener(listener.clone())
            .storage(storage)
            .listener(listener)
            .silent(true)
            .build(),
    );
    let Some(mut broker) = step("broker build (storage open + DDL)", t, broker.map_err(Into::into))
    else {
        return Ok(());
    };
    let serve = rt.spawn(async move {
        let r = broker.serve(tokio::time::Instant::now()).await;
        if let Err(e) = &r {
            eprintln!("broker serve error: {e:?}");
        }
        r
    });
    let ready: Res<()> = (|| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if TcpStream::connect(&bootstrap).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err("broker port never became connectable".into())
    })();
    step("broker listening (build -> accept)", t, ready);
    println!("TIME startup_ms={}", t.elapsed().as_millis());

    // ---- 2. create topic with 1 partition via admin API ----
    let t = Instant::now();
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()?;
    let created: Res<()> = rt.block_on(async {
        let res = admin
            .create_topics(
                &[NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await?;
        for r in res {
            r.map_err(|(name, code)| format!("create {name}: {code:?}"))?;
        }
        Ok(())
    });
    step("create topic t0 (1 partition)", t, created);

    // ---- 3. produce 3 records ----
    let t = Instant::now();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("message.timeout.ms", "10000")
        .set("linger.ms", "0")
        .create()?;
    let produced: Res<Vec<(i32, i64)>> = rt.block_on(async {
        let mut out = vec![];
        for i in 0..3 {
            let key = format!("k{i}");
            let payload = format!("v{i}");
            let d = producer
                .send(
                    FutureRecord::to(TOPIC).key(&key).payload(&payload),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(e, _)| e)?;
            out.push((d.partition, d.offset));
        }
        Ok(out)
    });
    if let Some(p) = step("produce 3 records", t, produced) {
        println!("  delivered (partition, offset): {p:?}");
    }
    drop(producer);

    // ---- 4. consumer in group g0: subscribe, consume ----
    let t = Instant::now();
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &bootstrap)
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000");
    // e.g. SPIKE_RDKAFKA_DEBUG=cgrp,protocol to see Join/Sync/Heartbeat/OffsetCommit
    if let Ok(d) = std::env::var("SPIKE_RDKAFKA_DEBUG") {
        cfg.set("debug", d);
    }
    // Extra consumer properties, e.g. SPIKE_CONSUMER_PROPS="topic.metadata.refresh.interval.ms=100"
    if let Ok(extra) = std::env::var("SPIKE_CONSUMER_PROPS") {
        for kv in extra.split(',').filter(|s| !s.is_empty()) {
            if let Some((k, v)) = kv.split_once('=') {
                cfg.set(k, v);
            }
        }
    }
    let consumer: BaseConsumer = cfg.create()?;
    consumer.subscribe(&[TOPIC])?;
    let mut first_ms = None;
    let consumed: Res<Vec<(i64, String)>> = (|| {
        let mut got = vec![];
        let deadline = Instant::now() + Duration::from_secs(45);
        while got.len() < 3 && Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(e)) => println!("  poll error (continuing): {e}"),
                Some(Ok(m)) => {
                    if first_ms.is_none() {
                        first_ms = Some(t.elapsed().as_millis());
                    }
                    let v = m
                        .payload()
                        .map(|p| String::from_utf8_lossy(p).into_owned())
                        .unwrap_or_default();
                    got.push((m.offset(), v));
                }
            }
        }
        if got.len() < 3 {
            return Err(format!("only consumed {} of 3: {got:?}", got.len()).into());
        }
        Ok(got)
    })();
    if let Some(c) = step("subscribe + consume 3 (group g0)", t, consumed) {
        println!("  consumed (offset, value): {c:?}");
    }
    println!("TIME first_consume_ms={first_ms:?} (subscribe -> first record, incl. Join/SyncGroup)");
    if let Ok(a) = consumer.assignment() {
        println!("  assignment: {:?}", a.elements().iter().map(|e| (e.topic().to_owned(), e.partition())).collect::<Vec<_>>());
    }
    println!("  group metadata present: {}", consumer.group_metadata().is_some());

    // ---- 5. commit offset 3 (OffsetCommit with member id + generation) ----
    let t = Instant::now();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, Offset::Offset(3))?;
    let committed: Res<()> = consumer.commit(&tpl, CommitMode::Sync).map_err(Into::into);
    step("commit offset 3", t, committed);
    println!("TIME commit_ms={}", t.elapsed().as_millis());

    // ---- 6. read back: committed() of the member, then a fresh OffsetFetch ----
    let t = Instant::now();
    let back: Res<Vec<(i32, Offset)>> = consumer
        .committed(Duration::from_secs(10))
        .map(|l| l.elements().iter().map(|e| (e.partition(), e.offset())).collect())
        .map_err(Into::into);
    if let Some(b) = step("committed() (OffsetFetch by member)", t, back) {
        println!("  committed: {b:?}");
    }

    // Leave the group (LeaveGroup), then fetch with a brand-new non-member client.
    let t = Instant::now();
    consumer.unsubscribe();
    drop(consumer);
    println!("  consumer closed in {} ms", t.elapsed().as_millis());

    let t = Instant::now();
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .create()?;
    let mut q = TopicPartitionList::new();
    q.add_partition(TOPIC, 0);
    let fresh: Res<Vec<(i32, Offset)>> = probe
        .committed_offsets(q, Duration::from_secs(10))
        .map(|l| l.elements().iter().map(|e| (e.partition(), e.offset())).collect())
        .map_err(Into::into);
    if let Some(b) = step("committed_offsets() from fresh client (OffsetFetch)", t, fresh) {
        println!("  committed: {b:?}");
        println!(
            "RESULT committed offset read back == 3: {}",
            b.first().map(|(_, o)| *o == Offset::Offset(3)).unwrap_or(false)
        );
    }
    drop(probe);
    drop(admin);

    // ---- 7. shutdown ----
    let t = Instant::now();
    serve.abort();
    rt.shutdown_timeout(Duration::from_secs(5));
    let closed = TcpStream::connect(&bootstrap).is_err();
    step(
        "broker shutdown (abort serve + runtime shutdown)",
        t,
        if closed { Ok(()) } else { Err("port still accepting".into()) },
    );
    let db_size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
    println!("  sqlite db size before cleanup: {db_size} bytes");
    tmp.close()?;
    println!("TIME total_ms={}", all.elapsed().as_millis());
    Ok(())
}
