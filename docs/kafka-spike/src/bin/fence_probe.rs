//! Drives nisshi-broker 0.6.0's group coordinator (Controller) directly, in process,
//! to observe `offset_commit_fence` outcomes for older/newer/matching generations
//! in the Forming and Formed states.

use std::time::Instant;

use bytes::Bytes;
use nisshi_broker::coordinator::group::{Coordinator, OffsetCommit, administrator::Controller};
use nisshi_sans_io::{
    Body, ErrorCode, JoinGroupResponse, OffsetCommitResponse, SyncGroupResponse,
    create_topics_request::CreatableTopic,
    join_group_request::JoinGroupRequestProtocol,
    offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic},
    sync_group_request::SyncGroupRequestAssignment,
};
use nisshi_storage::{BrokerRegistrationRequest, Storage, StorageContainer};
use url::Url;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
const G: &str = "g0";
const T: &str = "t0";
// session timeout: the coordinator's join pause is ~max(1s, ST/2); it must be long
// enough that A is not expired while B's join is pending.
const ST: i32 = 6000;

fn protocols() -> Vec<JoinGroupRequestProtocol> {
    vec![JoinGroupRequestProtocol::default()
        .name("range".into())
        .metadata(Bytes::from_static(b"x"))]
}

async fn join<C: Coordinator>(c: &C, member: &str) -> Res<JoinGroupResponse> {
    let p = protocols();
    let b = c
        .join(Some("probe"), G, ST, Some(ST), member, None, "consumer", Some(&p), None)
        .await?;
    Ok(JoinGroupResponse::try_from(b)?)
}

async fn sync<C: Coordinator>(c: &C, gen_: i32, member: &str, assign: &[&str]) -> Res<SyncGroupResponse> {
    let a: Vec<SyncGroupRequestAssignment> = assign
        .iter()
        .map(|m| SyncGroupRequestAssignment::default().member_id((*m).into()).assignment(Bytes::from_static(b"a")))
        .collect();
    let b = c
        .sync(G, gen_, member, None, Some("consumer"), Some("range"), Some(&a))
        .await?;
    Ok(SyncGroupResponse::try_from(b)?)
}

async fn commit<C: Coordinator>(c: &C, gen_: i32, member: &str, offset: i64) -> Res<ErrorCode> {
    let topics = [OffsetCommitRequestTopic::default().name(T.into()).partitions(Some(vec![
        OffsetCommitRequestPartition::default()
            .partition_index(0)
            .committed_offset(offset)
            .committed_leader_epoch(Some(0))
            .commit_timestamp(None)
            .committed_metadata(Some("".into())),
    ]))];
    let b: Body = c
        .offset_commit(OffsetCommit {
            group_id: G,
            generation_id_or_member_epoch: Some(gen_),
            member_id: Some(member),
            group_instance_id: None,
            retention_time_ms: None,
            topics: Some(&topics),
        })
        .await?;
    let r = OffsetCommitResponse::try_from(b)?;
    let code = r.topics.unwrap_or_default()[0].partitions.clone().unwrap_or_default()[0].error_code;
    Ok(ErrorCode::try_from(code)?)
}

#[tokio::main]
async fn main() -> Res<()> {
    let tmp = tempfile::Builder::new().prefix("nisshi-fence-").tempdir()?;
    let cwd = std::env::current_dir()?;
    let depth = cwd.components().count() - 1;
    let url = Url::parse(&format!(
        "sqlite:{}{}",
        "../".repeat(depth),
        tmp.path().join("f.db").to_str().unwrap().trim_start_matches('/')
    ))?;
    let storage = StorageContainer::builder()
        .cluster_id("fence")
        .node_id(111)
        .advertised_listener(Url::parse("tcp://127.0.0.1:9092")?)
        .storage(url)
        .build()
        .await?;
    storage
        .register_broker(BrokerRegistrationRequest {
            broker_id: 111,
            cluster_id: "fence".into(),
            incarnation_id: uuid::Uuid::now_v7(),
            rack: None,
        })
        .await?;
    _ = storage
        .create_topic(
            CreatableTopic::default()
                .name(T.into())
                .num_partitions(1)
                .replication_factor(0)
                .assignments(Some(vec![]))
                .configs(Some(vec![])),
            false,
        )
        .await?;
    let c = Controller::with_storage(storage.clone())?;
    let t = Instant::now();

    // A joins alone -> generation g_a, Formed after sync.
    let a = join(&c, "").await?.member_id; // MemberIdRequired hands out an id
    let ja = join(&c, &a).await?;
    println!("A join: err={:?} gen={} leader={}", ErrorCode::try_from(ja.error_code)?, ja.generation_id, ja.leader == a);
    let sa = sync(&c, ja.generation_id, &a, &[&a]).await?;
    println!("A sync: err={:?}", ErrorCode::try_from(sa.error_code)?);
    let g_a = ja.generation_id;
    println!("[Formed gen {g_a}] A commit gen {g_a} (match)      -> {:?}", commit(&c, g_a, &a, 1).await?);
    println!("[Formed gen {g_a}] A commit gen {} (newer)      -> {:?}", g_a + 1, commit(&c, g_a + 1, &a, 1).await?);
    println!("[Formed gen {g_a}] A commit gen {} (older)     -> {:?}", g_a - 1, commit(&c, g_a - 1, &a, 1).await?);
    println!("[Formed gen {g_a}] generation-less, no member id -> {:?}", commit(&c, -1, "", 1).await?);
    println!("[Formed gen {g_a}] unknown member id           -> {:?}", commit(&c, g_a, "nobody", 1).await?);

    // B joins -> rebalance, group goes Forming at a bumped generation.
    let b = join(&c, "").await?.member_id;
    let jb = join(&c, &b).await?;
    println!("B join: err={:?} gen={} leader_is_a={}", ErrorCode::try_from(jb.error_code)?, jb.generation_id, jb.leader == a);
    let g_b = jb.generation_id;
    println!("[Forming gen {g_b}] A commit gen {g_a} (older)    -> {:?}", commit(&c, g_a, &a, 2).await?);
    println!("[Forming gen {g_b}] A commit gen {g_b} (match)    -> {:?}", commit(&c, g_b, &a, 2).await?);
    println!("[Forming gen {g_b}] A commit gen {} (newer)    -> {:?}", g_b + 1, commit(&c, g_b + 1, &a, 2).await?);

    // A rejoins, leader syncs, B syncs -> Formed at the new generation.
    let ja2 = join(&c, &a).await?;
    println!("A rejoin: err={:?} gen={}", ErrorCode::try_from(ja2.error_code)?, ja2.generation_id);
    let g2 = ja2.generation_id;
    let leader = if ja2.leader == a { a.clone() } else { b.clone() };
    let sl = sync(&c, g2, &leader, &[&a, &b]).await?;
    let other = if leader == a { &b } else { &a };
    let so = sync(&c, g2, other, &[]).await?;
    println!("sync leader: {:?}, sync other: {:?}", ErrorCode::try_from(sl.error_code)?, ErrorCode::try_from(so.error_code)?);
    println!("[after sync gen {g2}] A commit gen {g_a} (older)  -> {:?}", commit(&c, g_a, &a, 3).await?);
    println!("[after sync gen {g2}] A commit gen {g2} (match)  -> {:?}", commit(&c, g2, &a, 3).await?);
    println!("probe wall ms={}", t.elapsed().as_millis());
    Ok(())
}
