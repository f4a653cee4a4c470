//! Raw remoting requests the harnesses build by hand (no client crate).

use baiji::remoting::code::request_code as rc;
use baiji::remoting::header::{SendHeaderVersion, SendMessageRequestHeader};
use baiji::remoting::{ExtFields, RemotingCommand};

/// A `SEND_MESSAGE` (V1 header) or `SEND_MESSAGE_V2` (V2) of `body` with `properties` to
/// `queue` of `topic` (auto-created from `TBW102` with `default_queues` queues), from
/// producer group `group`, opaque 0.
pub(crate) fn send(
    version: SendHeaderVersion,
    (group, topic, queue, default_queues): (&str, &str, i32, i32),
    properties: &str,
    body: impl Into<bytes::Bytes>,
) -> RemotingCommand {
    let h = SendMessageRequestHeader {
        producer_group: group,
        topic,
        default_topic: "TBW102",
        default_topic_queue_nums: default_queues,
        queue_id: queue,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        flag: 0,
        properties,
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
        broker_name: None,
    };
    let mut ext = ExtFields::new();
    h.write_ext_fields_as(&mut ext, version);
    let code = match version {
        SendHeaderVersion::V1 => rc::SEND_MESSAGE,
        _ => rc::SEND_MESSAGE_V2,
    };
    RemotingCommand::request(code, 0).with_ext_fields(ext).with_body(body)
}
