//! The admin codes with the real client: `resetOffsetByTime` (INVOKE_BROKER_TO_RESET_OFFSET,
//! which the broker turns into RESET_CONSUMER_CLIENT_OFFSET to each running client) moves a
//! running push consumer back, as RocketMQ's `Broker2Client.resetOffset` does.

use baiji::remoting::client::request_once;
use baiji::remoting::code::{request_code, response_code};
use baiji::remoting::{ExtFields, RemotingCommand};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_running_consumer_when_an_admin_resets_its_offsets_to_time_zero_should_receive_everything_again(
) {
    const N: usize = 20;
    let fx = Fixture::new("reset").await;
    let group = unique("reset_g");
    let opts = PushOptions::new(&group, &fx.topic, "*");
    let addr = fx.broker.broker_addr().expect("a broker address").to_string();
    // A second group that never consumes keeps the messages retained after the first one
    // committed them (baiji frees what every group acknowledged): there is something to go
    // back to.
    let holder = format!(
        r#"{{"clientID":"127.0.0.1@holder","producerDataSet":[],"consumerDataSet":[{{"groupName":"{}","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{{"topic":"{}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}}],"unitMode":false}}]}}"#,
        unique("holder_g"),
        fx.topic
    );
    let hb = RemotingCommand::request(request_code::HEART_BEAT, 0).with_body(holder.into_bytes());
    let r = request_once(addr.as_str(), hb, PATIENCE).await.expect("the heartbeat is answered");
    assert_eq!(r.code, response_code::SUCCESS, "the holding group is registered: {r:?}");
    let (consumer, mut rx) = fx.consumer("reset-m1", &opts).await;
    let sent = send_series(&fx.producer, &fx.topic, Some("TagR"), "reset-", "reset ", N).await;
    let got = receive(&mut rx, N, PATIENCE, "before the reset").await;
    assert_exactly_once(&group, &sent, &got);
    wait_committed_to_end(&fx.broker, &group, &fx.topic).await;

    // What rocketmq-admin-cli's `offset resetOffsetByTime -t 0` sends to the broker.
    let mut ext = ExtFields::new();
    ext.insert("topic", &fx.topic);
    ext.insert("group", &group);
    ext.insert_i64("timestamp", 0);
    ext.insert_bool("isForce", false);
    let req = RemotingCommand::request(request_code::INVOKE_BROKER_TO_RESET_OFFSET, 0)
        .with_ext_fields(ext);
    let r = request_once(addr.as_str(), req, PATIENCE).await.expect("the reset is answered");
    assert_eq!(r.code, response_code::SUCCESS, "the reset is done: {r:?}");

    // The consumer is moved back to the start and receives every message again, once.
    let again = receive(&mut rx, N, PATIENCE, "after the reset").await;
    assert_exactly_once(&group, &sent, &again);
    fx.shutdown(vec![consumer]).await;
}
