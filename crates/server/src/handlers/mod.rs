//! One module per Kafka API. Each declares the versions it serves in its
//! `SPEC`; the ApiVersions response is built from `APIS`, never by hand.
//!
//! `dispatch` routes one frame: it reads the header, refuses an unknown API
//! or version (ApiVersions answers those with its v0 fallback so clients
//! can negotiate), decodes the body with the bounded codec and encodes the
//! handler's response. A body that cannot be decoded closes the connection,
//! as Kafka does.
//!
//! A controller also answers Kafka clients on its CONTROLLER listener
//! (KIP-919, the admin client's `bootstrap.controllers` and the tools'
//! `--bootstrap-controller`): `dispatch_on_controller` routes the APIs of
//! `CONTROLLER_APIS` there and closes the connection on any other, as
//! Kafka's controllers do with an API their listener does not enable.

pub mod add_raft_voter;
pub mod alter_client_quotas;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_replica_log_dirs;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_config_resources;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
mod raft_voters;
pub mod remove_raft_voter;
pub mod sync_group;
pub mod unregister_broker;
pub mod update_features;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

use tarn_protocol::header::{begin_response, finish_frame, peek_header, RequestHeader};
use tarn_protocol::messages::fetch::{LeaderIdAndEpoch, NodeEndpoint};
use tarn_protocol::records::ResponseParts;
use tarn_protocol::{Decode, DecodeError, Encode, Reader, Version};

use crate::broker::Broker;

/// An API and the versions this broker answers.
#[derive(Debug, Clone, Copy)]
pub struct ApiSpec {
    pub key: i16,
    pub name: &'static str,
    pub min_version: i16,
    pub max_version: i16,
    /// The first flexible version (KIP-482) of this API.
    pub flexible_min: i16,
}

impl ApiSpec {
    pub fn serves(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }
}

pub const APIS: &[ApiSpec] = &[
    produce::SPEC,
    fetch::SPEC,
    list_offsets::SPEC,
    metadata::SPEC,
    offset_for_leader_epoch::SPEC,
    api_versions::SPEC,
    create_topics::SPEC,
    delete_topics::SPEC,
    init_producer_id::SPEC,
    describe_cluster::SPEC,
    delete_records::SPEC,
    describe_configs::SPEC,
    alter_configs::SPEC,
    create_partitions::SPEC,
    incremental_alter_configs::SPEC,
    offset_commit::SPEC,
    offset_fetch::SPEC,
    find_coordinator::SPEC,
    join_group::SPEC,
    heartbeat::SPEC,
    leave_group::SPEC,
    sync_group::SPEC,
    describe_groups::SPEC,
    describe_log_dirs::SPEC,
    describe_producers::SPEC,
    describe_quorum::SPEC,
    describe_topic_partitions::SPEC,
    elect_leaders::SPEC,
    alter_partition_reassignments::SPEC,
    alter_replica_log_dirs::SPEC,
    list_partition_reassignments::SPEC,
    describe_acls::SPEC,
    create_acls::SPEC,
    delete_acls::SPEC,
    list_groups::SPEC,
    delete_groups::SPEC,
    offset_delete::SPEC,
    describe_client_quotas::SPEC,
    alter_client_quotas::SPEC,
    describe_user_scram_credentials::SPEC,
    alter_user_scram_credentials::SPEC,
    list_config_resources::SPEC,
    unregister_broker::SPEC,
    update_features::SPEC,
    list_transactions::SPEC,
    add_raft_voter::SPEC,
    remove_raft_voter::SPEC,
];

pub fn spec(key: i16) -> Option<&'static ApiSpec> {
    APIS.iter().find(|s| s.key == key)
}

/// The leader hints of KIP-951 (Produce v10+, Fetch v16+): a partition
/// refused because this broker does not lead it names the leader and
/// epoch of this broker's image, and the response lists the endpoint of
/// each leader named that is registered and not fenced (Kafka's "alive"
/// brokers), once each.
#[derive(Debug, Default)]
pub struct LeaderHints {
    pub endpoints: Vec<NodeEndpoint>,
}

impl LeaderHints {
    /// The leader of `topic`'s `partition` in `image` (-1 and -1 when the
    /// image has none), noting its endpoint.
    pub fn leader(
        &mut self,
        image: &tarn_metadata::MetadataImage,
        topic: &str,
        partition: i32,
    ) -> LeaderIdAndEpoch {
        let Some(info) = image
            .topic(topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition_id == partition))
        else {
            return LeaderIdAndEpoch::default();
        };
        let alive = image.brokers.get(&info.leader).filter(|b| !b.fenced);
        if let Some(b) = alive {
            if !self.endpoints.iter().any(|e| e.node_id == b.broker_id) {
                self.endpoints.push(NodeEndpoint {
                    node_id: b.broker_id,
                    host: b.host.clone(),
                    port: b.port,
                    rack: b.rack.clone(),
                });
            }
        }
        LeaderIdAndEpoch {
            leader_id: info.leader,
            leader_epoch: info.leader_epoch,
        }
    }
}

/// With no authorizer every operation on a topic is allowed: READ, WRITE,
/// CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS and ALTER_CONFIGS, as
/// bits of Kafka's AclOperation codes.
pub const TOPIC_AUTHORIZED_OPERATIONS: i32 =
    1 << 3 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 10 | 1 << 11;
/// Likewise for the cluster: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION,
/// DESCRIBE_CONFIGS, ALTER_CONFIGS and IDEMPOTENT_WRITE.
pub const CLUSTER_AUTHORIZED_OPERATIONS: i32 =
    1 << 5 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 12;

/// The authorized-operations field: the bit set when the client asked
/// for it, Kafka's "not requested" value otherwise.
pub fn authorized_operations(requested: bool, operations: i32) -> i32 {
    if requested {
        operations
    } else {
        i32::MIN
    }
}

/// Everything a handler knows about the request besides its body.
pub struct RequestContext {
    pub header: RequestHeader,
    pub version: Version,
    pub peer: SocketAddr,
    /// The broker the client sent the request to: this one, or the one
    /// that forwarded it to this active controller. A broker's own
    /// configs are altered through the broker they name (Kafka's check).
    pub receiving_node: i32,
    /// The kind of listener the client reached.
    pub endpoint: Endpoint,
}

/// Kafka's EndpointType (KIP-919): what kind of listener a request came
/// in on, which decides the APIs it may use and what DescribeCluster
/// lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Broker,
    Controller,
}

impl Endpoint {
    /// The code DescribeCluster uses for it.
    pub fn code(self) -> i8 {
        match self {
            Endpoint::Broker => 1,
            Endpoint::Controller => 2,
        }
    }
}

/// The APIs a controller serves to Kafka clients on its CONTROLLER
/// listener: those Kafka's controller handles, less the ones Tarn does not
/// implement (delegation tokens) and the quorum's and
/// brokers' own RPCs, which Tarn carries under private keys.
pub const CONTROLLER_APIS: &[i16] = &[
    api_versions::KEY,
    create_topics::KEY,
    delete_topics::KEY,
    create_partitions::KEY,
    describe_configs::KEY,
    alter_configs::KEY,
    incremental_alter_configs::KEY,
    alter_client_quotas::KEY,
    alter_user_scram_credentials::KEY,
    elect_leaders::KEY,
    alter_partition_reassignments::KEY,
    list_partition_reassignments::KEY,
    describe_acls::KEY,
    create_acls::KEY,
    delete_acls::KEY,
    describe_cluster::KEY,
    describe_quorum::KEY,
    unregister_broker::KEY,
    update_features::KEY,
    add_raft_voter::KEY,
    remove_raft_voter::KEY,
];

impl RequestContext {
    pub fn client_id(&self) -> &str {
        self.header.client_id.as_deref().unwrap_or("")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("malformed request: {0}")]
    Decode(#[from] DecodeError),
    #[error("unknown API key {0}")]
    UnknownApi(i16),
    #[error("{api} v{version} is not supported")]
    UnsupportedVersion { api: &'static str, version: i16 },
    #[error("forwarding {api} to the active controller failed: {reason}")]
    Forwarding { api: &'static str, reason: String },
}

/// The admin requests a broker forwards to the active controller, which
/// plans and commits them (Kafka's forwarding, KIP-590). AddRaftVoter
/// forwards itself, as its answer may take longer than others'.
const FORWARDED: &[i16] = &[
    create_topics::KEY,
    delete_topics::KEY,
    create_partitions::KEY,
    alter_configs::KEY,
    incremental_alter_configs::KEY,
    alter_client_quotas::KEY,
    alter_user_scram_credentials::KEY,
    elect_leaders::KEY,
    alter_partition_reassignments::KEY,
    list_partition_reassignments::KEY,
    create_acls::KEY,
    delete_acls::KEY,
    unregister_broker::KEY,
    update_features::KEY,
    describe_quorum::KEY,
    remove_raft_voter::KEY,
];

/// Encodes a response frame for the request in `ctx`.
pub fn encode_response<T: Encode>(ctx: &RequestContext, response: &T) -> Bytes {
    let mut out = begin_response(
        ctx.header.correlation_id,
        ctx.header.api_key,
        ctx.version.flexible,
    );
    response.encode(&mut out, ctx.version);
    finish_frame(out)
}

/// Encodes a Fetch response whose records may be file ranges: the frame
/// comes back as parts, the file ranges to be sent with sendfile.
pub fn encode_fetch_response(
    ctx: &RequestContext,
    response: &tarn_protocol::messages::fetch::FetchResponseOut,
) -> ResponseParts {
    let mut out = begin_response(
        ctx.header.correlation_id,
        ctx.header.api_key,
        ctx.version.flexible,
    );
    response.encode(&mut out, ctx.version);
    ResponseParts::assemble(out, response.records())
}

macro_rules! route {
    ($broker:expr, $ctx:expr, $body:expr, [$($module:ident),*]) => {
        match $ctx.header.api_key {
            produce::KEY => {
                let request = Decode::decode($body, $ctx.version)?;
                Ok(produce::handle($broker, &$ctx, request)
                    .await
                    .map(|r| ResponseParts::bytes(encode_response(&$ctx, &r))))
            }
            fetch::KEY => {
                let request = Decode::decode($body, $ctx.version)?;
                let response = fetch::handle($broker, &$ctx, request).await;
                Ok(Some(encode_fetch_response(&$ctx, &response)))
            }
            $( $module::KEY => {
                let request = Decode::decode($body, $ctx.version)?;
                let response = $module::handle($broker, &$ctx, request).await;
                Ok(Some(ResponseParts::bytes(encode_response(&$ctx, &response))))
            } )*
            key => Err(RequestError::UnknownApi(key)),
        }
    };
}

/// Handles one request frame; `None` means no response is owed (acks=0).
pub async fn dispatch(
    broker: &Arc<Broker>,
    peer: SocketAddr,
    frame: Bytes,
) -> Result<Option<ResponseParts>, RequestError> {
    dispatch_received_by(broker, peer, frame, broker.node_id).await
}

/// Handles one request frame a Kafka client sent to this controller's
/// CONTROLLER listener; an API outside `CONTROLLER_APIS` is refused as
/// unknown there.
pub async fn dispatch_on_controller(
    broker: &Arc<Broker>,
    peer: SocketAddr,
    frame: Bytes,
) -> Result<Option<ResponseParts>, RequestError> {
    dispatch_at(broker, peer, frame, broker.node_id, Endpoint::Controller).await
}

/// [`dispatch`] of a frame that `receiving_node` received from its client
/// (and forwarded here, when it is another broker).
pub async fn dispatch_received_by(
    broker: &Arc<Broker>,
    peer: SocketAddr,
    frame: Bytes,
    receiving_node: i32,
) -> Result<Option<ResponseParts>, RequestError> {
    dispatch_at(broker, peer, frame, receiving_node, Endpoint::Broker).await
}

async fn dispatch_at(
    broker: &Arc<Broker>,
    peer: SocketAddr,
    frame: Bytes,
    receiving_node: i32,
    endpoint: Endpoint,
) -> Result<Option<ResponseParts>, RequestError> {
    let (api_key, api_version, correlation_id) = peek_header(&frame)?;
    if endpoint == Endpoint::Controller && !CONTROLLER_APIS.contains(&api_key) {
        return Err(RequestError::UnknownApi(api_key));
    }
    let spec = spec(api_key).ok_or(RequestError::UnknownApi(api_key))?;
    if !spec.serves(api_version) {
        if api_key == api_versions::KEY {
            return Ok(Some(ResponseParts::bytes(
                api_versions::unsupported_version_reply(correlation_id),
            )));
        }
        return Err(RequestError::UnsupportedVersion {
            api: spec.name,
            version: api_version,
        });
    }
    if FORWARDED.contains(&api_key)
        && !broker.is_active_controller()
        && !(api_key == incremental_alter_configs::KEY
            && incremental_alter_configs::names_broker_loggers(
                &frame,
                Version::new(api_version, spec.flexible_min),
            ))
    {
        if let Some(answer) = crate::controller::forward(broker, &frame).await {
            return match answer {
                Ok(response) => Ok(Some(ResponseParts::bytes(Bytes::from(response)))),
                Err(refusal) => Err(RequestError::Forwarding {
                    api: spec.name,
                    reason: refusal.to_string(),
                }),
            };
        }
    }
    let version = Version::new(api_version, spec.flexible_min);
    let mut body = Reader::new(frame);
    let header = RequestHeader::decode(&mut body, version.flexible)?;
    let ctx = RequestContext {
        header,
        version,
        peer,
        receiving_node,
        endpoint,
    };
    let body = &mut body;
    let started = std::time::Instant::now();
    let result = route!(
        broker,
        ctx,
        body,
        [
            list_offsets,
            metadata,
            offset_for_leader_epoch,
            api_versions,
            create_topics,
            delete_topics,
            init_producer_id,
            describe_cluster,
            delete_records,
            describe_configs,
            alter_configs,
            create_partitions,
            incremental_alter_configs,
            offset_commit,
            offset_fetch,
            find_coordinator,
            join_group,
            heartbeat,
            leave_group,
            sync_group,
            describe_groups,
            describe_log_dirs,
            describe_producers,
            describe_quorum,
            describe_topic_partitions,
            elect_leaders,
            alter_partition_reassignments,
            alter_replica_log_dirs,
            list_partition_reassignments,
            describe_acls,
            create_acls,
            delete_acls,
            list_groups,
            delete_groups,
            offset_delete,
            describe_client_quotas,
            alter_client_quotas,
            describe_user_scram_credentials,
            alter_user_scram_credentials,
            list_config_resources,
            unregister_broker,
            update_features,
            list_transactions,
            add_raft_voter,
            remove_raft_voter
        ]
    );
    broker
        .metrics
        .request_done(api_key, api_version, started.elapsed());
    result
}
