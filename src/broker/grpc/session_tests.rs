//! The session table's per-connection share (review-e77444b M7), over loopback TCP with a
//! tonic client: one connection inventing client ids is refused past its share, while another
//! connection still gets sessions.

use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::Request;

use super::pb::messaging_service_client::MessagingServiceClient;
use super::pb::{Code, QueryRouteRequest, Resource};
use super::session::connection_share;
use crate::broker::{BrokerConfig, RunningBroker};

async fn broker(max_connections: usize) -> RunningBroker {
    let mut config = BrokerConfig::default();
    config.remoting.listen = "127.0.0.1:0".parse().unwrap();
    config.remoting.namesrv_listen = None;
    config.remoting.fast_listen_port = Some(0);
    config.grpc.grpc_listen = Some("127.0.0.1:0".parse().unwrap());
    config.core.max_connections = max_connections;
    crate::broker::start(config).await.unwrap()
}

async fn connect(b: &RunningBroker) -> MessagingServiceClient<Channel> {
    let uri = format!("http://{}", b.grpc_addr().unwrap());
    MessagingServiceClient::new(Endpoint::from_shared(uri).unwrap().connect().await.unwrap())
}

/// The status code of a QueryRoute sent as client `id`.
async fn route_as(c: &mut MessagingServiceClient<Channel>, id: &str) -> i32 {
    let mut r = Request::new(QueryRouteRequest {
        topic: Some(Resource { name: "SessionShareTopic".into(), ..Resource::default() }),
        endpoints: None,
    });
    r.metadata_mut().insert("x-mq-client-id", MetadataValue::try_from(id).unwrap());
    let answer = c.query_route(r).await.unwrap().into_inner();
    answer.status.map_or(-1, |s| s.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_one_connection_inventing_client_ids_when_past_its_share_should_refuse_it_and_serve_another(
) {
    let max = 16;
    let share = connection_share(max);
    let b = broker(max).await;
    let mut one = connect(&b).await;
    for i in 0..share {
        assert_eq!(route_as(&mut one, &format!("made-up-{i}")).await, Code::Ok as i32);
    }
    assert_eq!(
        route_as(&mut one, "made-up-more").await,
        Code::TooManyRequests as i32,
        "past its share of {share}"
    );
    assert_eq!(route_as(&mut one, "made-up-0").await, Code::Ok as i32, "its own still served");
    let mut other = connect(&b).await;
    assert_eq!(route_as(&mut other, "a-real-client").await, Code::Ok as i32, "others get room");
    b.shutdown().await;
}
