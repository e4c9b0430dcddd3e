//! The Kafka wire as the proxy sees it: frames (a 4-byte big-endian size, then the bytes), the
//! request header's first fields, and the bodies the history needs, decoded with
//! nisshi-sans-io (the broker's own codec, generated from Kafka's message descriptors). A frame
//! is forwarded as it came, byte for byte, except the two responses that name broker
//! addresses (Metadata, FindCoordinator), which are decoded, rewritten and encoded again.

use bytes::Bytes;
use nisshi_sans_io::consumer::MemberAssignment;
use nisshi_sans_io::{
    Body, FetchRequest, FindCoordinatorResponse, Frame, Header, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, MetadataResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    SyncGroupRequest, SyncGroupResponse,
};
use serde::Serialize;
use std::io::Read;

/// The largest frame the proxy reads (bytes): a fetch response of the sizes the runs use is far
/// below it; a larger size is a broken stream, not a frame.
pub const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;

/// The API keys the proxy decodes (Kafka's numbering).
pub mod key {
    pub const FETCH: i16 = 1;
    pub const METADATA: i16 = 3;
    pub const OFFSET_COMMIT: i16 = 8;
    pub const OFFSET_FETCH: i16 = 9;
    pub const FIND_COORDINATOR: i16 = 10;
    pub const JOIN_GROUP: i16 = 11;
    pub const HEARTBEAT: i16 = 12;
    pub const LEAVE_GROUP: i16 = 13;
    pub const SYNC_GROUP: i16 = 14;
}

/// The name of an API key, for the history and reports.
pub fn api_name(api_key: i16) -> &'static str {
    match api_key {
        0 => "Produce",
        key::FETCH => "Fetch",
        2 => "ListOffsets",
        key::METADATA => "Metadata",
        key::OFFSET_COMMIT => "OffsetCommit",
        key::OFFSET_FETCH => "OffsetFetch",
        key::FIND_COORDINATOR => "FindCoordinator",
        key::JOIN_GROUP => "JoinGroup",
        key::HEARTBEAT => "Heartbeat",
        key::LEAVE_GROUP => "LeaveGroup",
        key::SYNC_GROUP => "SyncGroup",
        18 => "ApiVersions",
        _ => "other",
    }
}

/// Reads one frame, its size prefix included; `None` at a clean end of the stream.
pub fn read_frame(stream: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let length = i32::from_be_bytes(size);
    let length = usize::try_from(length)
        .ok()
        .filter(|length| *length <= FRAME_BYTES_MAX)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a frame of size {length}")))?;
    let mut frame = vec![0u8; 4 + length];
    frame[..4].copy_from_slice(&size);
    stream.read_exact(&mut frame[4..])?;
    Ok(Some(frame))
}

/// A request header's fixed fields: api key, api version, correlation id.
pub fn request_header(frame: &[u8]) -> Option<(i16, i16, i32)> {
    let field = |at: usize, n: usize| frame.get(at..at + n);
    let api_key = i16::from_be_bytes(field(4, 2)?.try_into().ok()?);
    let api_version = i16::from_be_bytes(field(6, 2)?.try_into().ok()?);
    let correlation_id = i32::from_be_bytes(field(8, 4)?.try_into().ok()?);
    Some((api_key, api_version, correlation_id))
}

/// A response's correlation id (the first field of every response header version).
pub fn response_correlation(frame: &[u8]) -> Option<i32> {
    Some(i32::from_be_bytes(frame.get(4..8)?.try_into().ok()?))
}

/// One topic partition and an offset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// What a request said, as far as the history needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Said {
    Commit {
        group: String,
        generation: i32,
        member: String,
        offsets: Vec<PartitionOffset>,
    },
    OffsetFetch {
        group: String,
    },
    Join {
        group: String,
        member: String,
    },
    Sync {
        group: String,
        generation: i32,
        member: String,
    },
    Heartbeat {
        group: String,
        generation: i32,
        member: String,
    },
    Leave {
        group: String,
        members: Vec<String>,
    },
    Fetch {
        offsets: Vec<PartitionOffset>,
    },
    Metadata,
    FindCoordinator,
    /// An API the history does not follow, or one the codec could not decode (`why`).
    Other {
        why: Option<String>,
    },
}

/// What a response answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "response", rename_all = "snake_case")]
pub enum Answer {
    /// Per partition, the error code (0: the commit was accepted).
    Committed {
        errors: Vec<(String, i32, i16)>,
    },
    Joined {
        error: i16,
        generation: i32,
        member: String,
        leader: String,
    },
    Synced {
        error: i16,
        assigned: Vec<(String, i32)>,
    },
    Error {
        error: i16,
    },
    /// A broker address rewritten to the proxy's (`count` addresses).
    Rewritten {
        count: usize,
    },
    Other {
        why: Option<String>,
    },
}

/// Decodes what a request says; a frame the codec refuses is `Other` with the reason.
pub fn said(frame: &[u8], api_key: i16) -> Said {
    let decoded = match Frame::request_from_bytes(frame) {
        Ok(decoded) => decoded,
        Err(error) => return Said::Other { why: Some(format!("undecodable: {error:?}")) },
    };
    said_of(decoded.body, api_key).unwrap_or_else(|why| Said::Other { why: Some(why) })
}

fn said_of(body: Body, api_key: i16) -> Result<Said, String> {
    let unexpected = |_| format!("the body is not {}'s", api_name(api_key));
    Ok(match api_key {
        key::OFFSET_COMMIT => {
            let request = OffsetCommitRequest::try_from(body).map_err(unexpected)?;
            let mut offsets = Vec::new();
            for topic in request.topics.unwrap_or_default() {
                for partition in topic.partitions.unwrap_or_default() {
                    offsets.push(PartitionOffset {
                        topic: topic.name.clone(),
                        partition: partition.partition_index,
                        offset: partition.committed_offset,
                    });
                }
            }
            Said::Commit {
                group: request.group_id,
                generation: request.generation_id_or_member_epoch.unwrap_or(-1),
                member: request.member_id.unwrap_or_default(),
                offsets,
            }
        }
        key::OFFSET_FETCH => {
            let request = OffsetFetchRequest::try_from(body).map_err(unexpected)?;
            let group = match (request.group_id, request.groups) {
                (Some(group), _) => group,
                (None, Some(groups)) => groups.into_iter().map(|g| g.group_id).collect::<Vec<_>>().join(","),
                (None, None) => String::new(),
            };
            Said::OffsetFetch { group }
        }
        key::JOIN_GROUP => {
            let request = JoinGroupRequest::try_from(body).map_err(unexpected)?;
            Said::Join { group: request.group_id, member: request.member_id }
        }
        key::SYNC_GROUP => {
            let request = SyncGroupRequest::try_from(body).map_err(unexpected)?;
            Said::Sync { group: request.group_id, generation: request.generation_id, member: request.member_id }
        }
        key::HEARTBEAT => {
            let request = HeartbeatRequest::try_from(body).map_err(unexpected)?;
            Said::Heartbeat { group: request.group_id, generation: request.generation_id, member: request.member_id }
        }
        key::LEAVE_GROUP => {
            let request = LeaveGroupRequest::try_from(body).map_err(unexpected)?;
            let mut members: Vec<String> = request.member_id.into_iter().collect();
            members.extend(request.members.unwrap_or_default().into_iter().map(|m| m.member_id));
            Said::Leave { group: request.group_id, members }
        }
        key::FETCH => {
            let request = FetchRequest::try_from(body).map_err(unexpected)?;
            let mut offsets = Vec::new();
            for topic in request.topics.unwrap_or_default() {
                let name = match (topic.topic, topic.topic_id) {
                    (Some(name), _) => name,
                    (None, Some(id)) => id.iter().map(|b| format!("{b:02x}")).collect(),
                    (None, None) => String::new(),
                };
                for partition in topic.partitions.unwrap_or_default() {
                    let (partition, offset) = (partition.partition, partition.fetch_offset);
                    offsets.push(PartitionOffset { topic: name.clone(), partition, offset });
                }
            }
            Said::Fetch { offsets }
        }
        key::METADATA => Said::Metadata,
        key::FIND_COORDINATOR => Said::FindCoordinator,
        _ => Said::Other { why: None },
    })
}

/// Decodes what a response answered (for the APIs the history follows).
pub fn answer(frame: &[u8], api_key: i16, api_version: i16) -> Answer {
    let follows =
        matches!(api_key, key::OFFSET_COMMIT | key::JOIN_GROUP | key::SYNC_GROUP | key::HEARTBEAT | key::LEAVE_GROUP);
    if !follows {
        return Answer::Other { why: None };
    }
    let decoded = match Frame::response_from_bytes(frame, api_key, api_version) {
        Ok(decoded) => decoded,
        Err(error) => return Answer::Other { why: Some(format!("undecodable: {error:?}")) },
    };
    answer_of(decoded.body, api_key).unwrap_or_else(|why| Answer::Other { why: Some(why) })
}

fn answer_of(body: Body, api_key: i16) -> Result<Answer, String> {
    let unexpected = |_| format!("the body is not {}'s response", api_name(api_key));
    Ok(match api_key {
        key::OFFSET_COMMIT => {
            let response = OffsetCommitResponse::try_from(body).map_err(unexpected)?;
            let mut errors = Vec::new();
            for topic in response.topics.unwrap_or_default() {
                for partition in topic.partitions.unwrap_or_default() {
                    errors.push((topic.name.clone(), partition.partition_index, partition.error_code));
                }
            }
            Answer::Committed { errors }
        }
        key::JOIN_GROUP => {
            let response = JoinGroupResponse::try_from(body).map_err(unexpected)?;
            Answer::Joined {
                error: response.error_code,
                generation: response.generation_id,
                member: response.member_id,
                leader: response.leader,
            }
        }
        key::SYNC_GROUP => {
            let response = SyncGroupResponse::try_from(body).map_err(unexpected)?;
            let mut assigned = Vec::new();
            if response.error_code == 0 && !response.assignment.is_empty() {
                let assignment = MemberAssignment::try_from(Bytes::clone(&response.assignment))
                    .map_err(|error| format!("an assignment the consumer protocol cannot read: {error:?}"))?;
                for topic in assignment.assignment.assigned_partitions {
                    assigned.extend(topic.partitions.iter().map(|p| (topic.topic.clone(), *p)));
                }
            }
            Answer::Synced { error: response.error_code, assigned }
        }
        key::HEARTBEAT => {
            let response = nisshi_sans_io::HeartbeatResponse::try_from(body).map_err(unexpected)?;
            Answer::Error { error: response.error_code }
        }
        key::LEAVE_GROUP => {
            let response = nisshi_sans_io::LeaveGroupResponse::try_from(body).map_err(unexpected)?;
            Answer::Error { error: response.error_code }
        }
        _ => Answer::Other { why: None },
    })
}

/// A broker address a response named that the proxy does not front.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unfronted {
    pub host: String,
    pub port: i32,
}

/// Rewrites the broker addresses of a Metadata or FindCoordinator response to `to` when they
/// are `upstream`'s; the frame encoded again, and how many addresses changed. An address of
/// another broker is refused: the proxy fronts one.
pub fn rewrite(
    frame: &[u8],
    api_key: i16,
    api_version: i16,
    upstream: (&str, u16),
    to: (&str, u16),
) -> Result<(Vec<u8>, usize), RewriteError> {
    let decoded = Frame::response_from_bytes(frame, api_key, api_version)
        .map_err(|error| RewriteError::Undecodable(format!("{error:?}")))?;
    let Header::Response { correlation_id } = decoded.header else {
        return Err(RewriteError::Undecodable("a request header in a response".into()));
    };
    let fronted = |host: &str, port: i32| {
        let local = matches!(host, "127.0.0.1" | "localhost" | "::1") || host == upstream.0;
        let local_upstream = matches!(upstream.0, "127.0.0.1" | "localhost" | "::1");
        port == i32::from(upstream.1) && (host == upstream.0 || (local && local_upstream))
    };
    let mut count = 0;
    let mut swap = |host: &mut String, port: &mut i32| -> Result<(), RewriteError> {
        if !fronted(host, *port) {
            return Err(RewriteError::Unfronted(Unfronted { host: host.clone(), port: *port }));
        }
        *host = to.0.to_string();
        *port = i32::from(to.1);
        count += 1;
        Ok(())
    };
    let body = match api_key {
        key::METADATA => {
            let mut response = MetadataResponse::try_from(decoded.body)
                .map_err(|_| RewriteError::Undecodable("not a Metadata response".into()))?;
            for broker in response.brokers.iter_mut().flatten() {
                swap(&mut broker.host, &mut broker.port)?;
            }
            Body::from(response)
        }
        key::FIND_COORDINATOR => {
            let mut response = FindCoordinatorResponse::try_from(decoded.body)
                .map_err(|_| RewriteError::Undecodable("not a FindCoordinator response".into()))?;
            // Versions 0-3 name one coordinator; 4 and later a list (an error entry names none).
            if let (Some(host), Some(port)) = (response.host.as_mut(), response.port.as_mut()) {
                if response.error_code.unwrap_or(0) == 0 {
                    swap(host, port)?;
                }
            }
            for coordinator in response.coordinators.iter_mut().flatten() {
                if coordinator.error_code == 0 {
                    swap(&mut coordinator.host, &mut coordinator.port)?;
                }
            }
            Body::from(response)
        }
        _ => return Ok((frame.to_vec(), 0)),
    };
    let encoded = Frame::response(Header::Response { correlation_id }, body, api_key, api_version)
        .map_err(|error| RewriteError::Unencodable(format!("{error:?}")))?;
    Ok((encoded.to_vec(), count))
}

/// Why a response naming broker addresses could not be rewritten.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RewriteError {
    Undecodable(String),
    Unencodable(String),
    Unfronted(Unfronted),
}

impl std::fmt::Display for RewriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RewriteError::Undecodable(why) => write!(f, "a response naming brokers the codec cannot decode: {why}"),
            RewriteError::Unencodable(why) => write!(f, "a rewritten response the codec cannot encode: {why}"),
            RewriteError::Unfronted(Unfronted { host, port }) => {
                write!(f, "the broker named {host}:{port}, a broker this proxy does not front")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nisshi_sans_io::metadata_response::MetadataResponseBroker;

    /// A Metadata response naming the upstream broker comes back naming the proxy, the rest
    /// of it unchanged; one naming another broker is refused.
    #[test]
    fn a_metadata_response_is_rewritten_to_the_proxy_and_another_broker_is_refused() {
        for version in [1i16, 4, 7, 9, 12] {
            let broker = |host: &str, port: i32| {
                MetadataResponseBroker::default().node_id(111).host(host.into()).port(port).rack(None)
            };
            let response = MetadataResponse::default()
                .throttle_time_ms(Some(0))
                .brokers(Some(vec![broker("127.0.0.1", 9092)]))
                .cluster_id(Some("onceproof".into()))
                .controller_id(Some(111))
                .topics(Some(vec![]))
                .cluster_authorized_operations((8..=10).contains(&version).then_some(i32::MIN));
            let header = Header::Response { correlation_id: 7 };
            let frame =
                Frame::response(header.clone(), response.clone().into(), key::METADATA, version).expect("encoded");
            let (rewritten, count) = rewrite(&frame, key::METADATA, version, ("127.0.0.1", 9092), ("127.0.0.1", 40001))
                .unwrap_or_else(|e| panic!("version {version}: {e}"));
            assert_eq!(count, 1, "version {version}");
            let back = Frame::response_from_bytes(&rewritten[..], key::METADATA, version).expect("decodes");
            let back = MetadataResponse::try_from(back.body).expect("a Metadata response");
            let brokers = back.brokers.expect("brokers");
            assert_eq!((brokers[0].host.as_str(), brokers[0].port, brokers[0].node_id), ("127.0.0.1", 40001, 111));
            assert_eq!(response_correlation(&rewritten), Some(7));
            let other = response.brokers(Some(vec![broker("10.0.0.9", 9092)]));
            let frame = Frame::response(header, other.into(), key::METADATA, version).expect("encoded");
            let refused = rewrite(&frame, key::METADATA, version, ("127.0.0.1", 9092), ("127.0.0.1", 40001));
            assert!(matches!(refused, Err(RewriteError::Unfronted(_))), "version {version}: {refused:?}");
        }
    }

    /// An OffsetCommit request's group, generation, member and offsets are read from its frame.
    #[test]
    fn an_offset_commit_request_is_read_into_the_history() {
        use nisshi_sans_io::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
        for version in [2i16, 7, 8] {
            let partition = OffsetCommitRequestPartition::default()
                .partition_index(1)
                .committed_offset(42)
                .committed_leader_epoch(Some(-1))
                .committed_metadata(Some(String::new()));
            let topic = OffsetCommitRequestTopic::default().name("t".into()).partitions(Some(vec![partition]));
            let request = OffsetCommitRequest::default()
                .group_id("g".into())
                .generation_id_or_member_epoch(Some(3))
                .member_id(Some("m-1".into()))
                .retention_time_ms(Some(-1))
                .topics(Some(vec![topic]));
            let header = Header::Request {
                api_key: key::OFFSET_COMMIT,
                api_version: version,
                correlation_id: 5,
                client_id: Some("c".into()),
            };
            let frame = Frame::request(header, request.into()).expect("encoded");
            assert_eq!(request_header(&frame), Some((key::OFFSET_COMMIT, version, 5)));
            let offsets = vec![PartitionOffset { topic: "t".into(), partition: 1, offset: 42 }];
            let expected = Said::Commit { group: "g".into(), generation: 3, member: "m-1".into(), offsets };
            assert_eq!(said(&frame, key::OFFSET_COMMIT), expected, "version {version}");
        }
    }
}
