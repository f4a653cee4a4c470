//! The `MessagingService` implementation: routes, heartbeats, sessions and Telemetry here, the
//! producer RPCs in [`producer`](super::producer), the consumer RPCs in
//! [`consumer`](super::consumer). RPCs not listed (PullMessage, UpdateOffset, GetOffset,
//! QueryOffset, SyncLiteSubscription) keep the generated default: gRPC `UNIMPLEMENTED`, as
//! Apache's proxy answers for the same ones.

use crate::sync::Arc;
use std::net::SocketAddr;

use tokio::sync::mpsc;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Streaming};

use super::acl::{self, Caller, Needs};
use super::pb::messaging_service_server::MessagingService;
use super::pb::{
    self, telemetry_command, AckMessageRequest, AckMessageResponse, ChangeInvisibleDurationRequest,
    ChangeInvisibleDurationResponse, ClientType, Code, EndTransactionRequest,
    EndTransactionResponse, ForwardMessageToDeadLetterQueueRequest,
    ForwardMessageToDeadLetterQueueResponse, HeartbeatRequest, HeartbeatResponse,
    NotifyClientTerminationRequest, NotifyClientTerminationResponse, QueryAssignmentRequest,
    QueryAssignmentResponse, QueryRouteRequest, QueryRouteResponse, RecallMessageRequest,
    RecallMessageResponse, ReceiveMessageRequest, ReceiveMessageResponse, SendMessageRequest,
    SendMessageResponse, TelemetryCommand,
};
use super::session::{self, Session, SessionRefused, TelemetryItem, TELEMETRY_CHANNEL};
use super::status::{ok, status};
use super::{consumer, producer, route, settings, GrpcState};
use crate::broker::core::Core;
use crate::broker::security::acl::Acl;

/// What `ReceiveMessage` answers with: a stream of status, messages and a delivery timestamp.
pub(crate) type ReceiveStream = BoxStream<ReceiveMessageResponse>;

/// The service: the broker's shared state and the gRPC endpoint routes advertise.
#[derive(Debug, Clone)]
pub(crate) struct Messaging {
    /// The broker's core (store, topics, groups, transactions).
    pub(crate) core: Arc<Core>,
    /// The gRPC face's own state (sessions, renewals).
    pub(crate) grpc: Arc<GrpcState>,
    /// The address clients reach this broker's gRPC port at (routes name it).
    pub(crate) endpoint: SocketAddr,
    /// The other brokers' gRPC ports, for routes that span the cluster.
    pub(crate) peers: Arc<route::Peers>,
}

impl Messaging {
    /// `Ok` when the ACL (if any) admits `request`, checked before anything else (its
    /// session included); else the status to answer with ([`acl`]).
    fn admit<T: Needs>(&self, request: &Request<T>) -> Result<(), pb::Status> {
        acl::admit(self.grpc.acl.as_deref(), request)
    }

    /// The session of the client that sent `request`, created on first sight, or the status to
    /// answer with: `CLIENT_ID_REQUIRED` when it sent no `x-mq-client-id`, `TOO_MANY_REQUESTS`
    /// when `max-connections` clients have sessions already, or the request's connection
    /// created its share of them ([`session::connection_share`]).
    pub(crate) fn session<T>(&self, request: &Request<T>) -> Result<Arc<Session>, pb::Status> {
        match session::client_id(request.metadata()) {
            Some(id) => {
                let cap = self.core.config.max_connections.max(1);
                let peer = request.remote_addr();
                let session = self.grpc.sessions.get_or_create_within(&id, cap, peer);
                if let Ok(s) = &session {
                    let mut st = s.state();
                    if st.sdk.is_none() {
                        let md = request.metadata();
                        st.sdk = Some((
                            session::header(md, session::LANGUAGE_HEADER).unwrap_or_default(),
                            session::header(md, session::CLIENT_VERSION_HEADER).unwrap_or_default(),
                        ));
                    }
                }
                session.map_err(|why| {
                    let text = match why {
                        SessionRefused::Full => {
                            format!("this broker serves at most {cap} gRPC clients at once")
                        }
                        SessionRefused::ConnectionShare => format!(
                            "one connection may carry at most {} gRPC clients",
                            session::connection_share(cap)
                        ),
                    };
                    status(Code::TooManyRequests, text)
                })
            }
            None => Err(status(
                Code::ClientIdRequired,
                format!("the {} header is required", session::CLIENT_ID_HEADER),
            )),
        }
    }
}

#[tonic::async_trait]
impl MessagingService for Messaging {
    async fn query_route(
        &self,
        request: Request<QueryRouteRequest>,
    ) -> Result<Response<QueryRouteResponse>, tonic::Status> {
        if let Err(s) = self.admit(&request).and_then(|()| self.session(&request).map(drop)) {
            return Ok(Response::new(QueryRouteResponse {
                status: Some(s),
                message_queues: vec![],
            }));
        }
        Ok(Response::new(route::query_route(self, request.get_ref()).await))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, tonic::Status> {
        let session = match self.admit(&request).and_then(|()| self.session(&request)) {
            Ok(s) => s,
            Err(s) => return Ok(Response::new(HeartbeatResponse { status: Some(s) })),
        };
        let hb = request.get_ref();
        let ty = ClientType::try_from(hb.client_type).unwrap_or(ClientType::Unspecified);
        if ty != ClientType::Unspecified {
            session.state().client_type = ty;
        }
        // The proxy answers UNRECOGNIZED_CLIENT_TYPE to a heartbeat before Settings; Python's
        // producer does not wait for the Settings reply, so its first heartbeat may come
        // first: baiji notes the client and answers OK.
        Ok(Response::new(HeartbeatResponse { status: Some(ok()) }))
    }

    async fn send_message(
        &self,
        request: Request<SendMessageRequest>,
    ) -> Result<Response<SendMessageResponse>, tonic::Status> {
        if let Err(s) = self.admit(&request) {
            return Ok(Response::new(SendMessageResponse { status: Some(s), entries: vec![] }));
        }
        Ok(Response::new(producer::send_message(self, request).await))
    }

    async fn query_assignment(
        &self,
        request: Request<QueryAssignmentRequest>,
    ) -> Result<Response<QueryAssignmentResponse>, tonic::Status> {
        if let Err(s) = self.admit(&request) {
            let refused = QueryAssignmentResponse { status: Some(s), assignments: vec![] };
            return Ok(Response::new(refused));
        }
        consumer::query_assignment(self, request).await
    }

    async fn receive_message(
        &self,
        request: Request<ReceiveMessageRequest>,
    ) -> Result<Response<ReceiveStream>, tonic::Status> {
        if let Err(s) = self.admit(&request) {
            return consumer::one_status(s);
        }
        consumer::receive_message(self, request).await
    }

    async fn ack_message(
        &self,
        request: Request<AckMessageRequest>,
    ) -> Result<Response<AckMessageResponse>, tonic::Status> {
        if let Err(s) = self.admit(&request) {
            return Ok(Response::new(AckMessageResponse { status: Some(s), entries: vec![] }));
        }
        consumer::ack_message(self, request).await
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<ForwardMessageToDeadLetterQueueResponse>, tonic::Status> {
        if let Err(s) = self.admit(&request) {
            let refused = ForwardMessageToDeadLetterQueueResponse { status: Some(s) };
            return Ok(Response::new(refused));
        }
        consumer::forward_message_to_dead_letter_queue(self, request).await
    }

    async fn end_transaction(
        &self,
        request: Request<EndTransactionRequest>,
    ) -> Result<Response<EndTransactionResponse>, tonic::Status> {
        if let Err(s) = self.admit(&request) {
            return Ok(Response::new(EndTransactionResponse { status: Some(s) }));
        }
        Ok(Response::new(producer::end_transaction(self, request)))
    }

    async fn recall_message(
        &self,
        request: Request<RecallMessageRequest>,
    ) -> Result<Response<RecallMessageResponse>, tonic::Status> {
        if let Err(s) = self.admit(&request) {
            let refused = RecallMessageResponse { status: Some(s), message_id: String::new() };
            return Ok(Response::new(refused));
        }
        Ok(Response::new(producer::recall_message(self, request)))
    }

    async fn telemetry(
        &self,
        request: Request<Streaming<TelemetryCommand>>,
    ) -> Result<Response<BoxStream<TelemetryCommand>>, tonic::Status> {
        // The stream's signature now; each Settings' rights as it comes (`read_telemetry`).
        let guard = self.grpc.acl.as_ref().map(|a| (Arc::clone(a), Caller::of(&request)));
        if let Some((acl, caller)) = &guard {
            caller
                .check(acl, TelemetryCommand::RPC, Ok(Vec::new()))
                .map_err(|r| acl::refused_grpc(&r))?;
        }
        let (tx, rx) = mpsc::channel::<TelemetryItem>(TELEMETRY_CHANNEL);
        let out: BoxStream<TelemetryCommand> =
            Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx));
        let session = match self.session(&request) {
            Ok(s) => s,
            Err(s) => {
                // One command with the status, then the stream ends (tx dropped).
                let _ = tx.try_send(Ok(TelemetryCommand { status: Some(s), command: None }));
                return Ok(Response::new(out));
            }
        };
        let stream_id = session.attach_telemetry(tx);
        let incoming = request.into_inner();
        tokio::spawn(read_telemetry(self.clone(), session, stream_id, incoming, guard));
        Ok(Response::new(out))
    }

    async fn notify_client_termination(
        &self,
        request: Request<NotifyClientTerminationRequest>,
    ) -> Result<Response<NotifyClientTerminationResponse>, tonic::Status> {
        if let Err(s) = self.admit(&request) {
            return Ok(Response::new(NotifyClientTerminationResponse { status: Some(s) }));
        }
        match session::client_id(request.metadata()) {
            Some(id) => {
                self.grpc.sessions.remove(&id);
                self.grpc.renewals.forget_client(&id);
                Ok(Response::new(NotifyClientTerminationResponse { status: Some(ok()) }))
            }
            None => Ok(Response::new(NotifyClientTerminationResponse {
                status: Some(status(Code::ClientIdRequired, "x-mq-client-id is required")),
            })),
        }
    }

    async fn change_invisible_duration(
        &self,
        request: Request<ChangeInvisibleDurationRequest>,
    ) -> Result<Response<ChangeInvisibleDurationResponse>, tonic::Status> {
        if let Err(s) = self.admit(&request) {
            let refused =
                ChangeInvisibleDurationResponse { status: Some(s), receipt_handle: String::new() };
            return Ok(Response::new(refused));
        }
        consumer::change_invisible_duration(self, request).await
    }
}

/// Reads one client's Telemetry commands until the stream ends: each `Settings` is stored and
/// answered at once with the merged settings (1.3); results of server commands are only noted.
/// Under an ACL (`guard`: it and the stream's caller) a command its account may not send ends
/// the stream with the refusal, unapplied.
async fn read_telemetry(
    svc: Messaging,
    session: Arc<Session>,
    stream_id: u64,
    mut incoming: Streaming<TelemetryCommand>,
    guard: Option<(Arc<Acl>, Caller)>,
) {
    loop {
        let cmd = match incoming.message().await {
            Ok(Some(cmd)) => cmd,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(client = session.client_id(), error = %e, "telemetry stream failed");
                break;
            }
        };
        session.touch();
        if let Some((acl, caller)) = &guard {
            if let Err(r) = caller.check(acl, TelemetryCommand::RPC, cmd.needs()) {
                session.fail_telemetry(stream_id, acl::refused_grpc(&r));
                break;
            }
        }
        match cmd.command {
            Some(telemetry_command::Command::Settings(client)) => {
                let reply = match settings::merge(&svc.core, client) {
                    Ok(merged) => {
                        session.state().settings = Some(merged.clone());
                        if let Some(pb::settings::PubSub::Publishing(_)) = &merged.pub_sub {
                            session.state().client_type = ClientType::Producer;
                            for topic in session.topics() {
                                // A producer of a topic with undecided half messages joined:
                                // the checker asks it now (gRPC producers' group is the topic).
                                svc.core.transactions.producer_joined(&topic);
                            }
                        }
                        TelemetryCommand {
                            status: Some(ok()),
                            command: Some(telemetry_command::Command::Settings(merged)),
                        }
                    }
                    Err(s) => TelemetryCommand { status: Some(s), command: None },
                };
                if !session.push(reply) {
                    tracing::debug!(
                        client = session.client_id(),
                        "the settings reply was not queued"
                    );
                }
            }
            Some(other) => {
                let other = match other {
                    c @ (telemetry_command::Command::ThreadStackTrace(_)
                    | telemetry_command::Command::VerifyMessageResult(_)
                    | telemetry_command::Command::VerifyMessageCommand(_)) => {
                        if svc.grpc.relays.answered(session.client_id(), cmd.status, c) {
                            continue;
                        }
                        None
                    }
                    c => Some(c),
                };
                tracing::debug!(client = session.client_id(), command = ?other, "telemetry from client");
            }
            None => {}
        }
    }
    session.detach_telemetry(stream_id);
}
