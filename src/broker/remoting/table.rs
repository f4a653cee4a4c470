//! The one request-code → processor table. Unknown codes get `REQUEST_CODE_NOT_SUPPORTED`
//! with the request's `opaque`, and the connection stays open.

use crate::sync::Arc;

use super::namesrv;
use super::processor::{
    admin, client, config, group, lock, offset, pop, pull, query, relay, reply, retry, send, stats,
    transaction,
};
use crate::broker::core::Core;
use crate::broker::remoting::{reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::code::{request_code as rc, response_code};
use crate::remoting::RemotingCommand;

/// Which table a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The broker port.
    Broker,
    /// The name-server port.
    NameServer,
}

/// A request processor.
pub(crate) type Handler = fn(&Arc<Core>, &Arc<RemotingState>, &ConnCtx, RemotingCommand) -> Reply;

/// The broker's processors, sorted by code.
pub(crate) const BROKER: &[(i32, &str, Handler)] = &[
    (rc::SEND_MESSAGE, "SEND_MESSAGE", send::send_message),
    (rc::PULL_MESSAGE, "PULL_MESSAGE", pull::pull_message),
    (rc::QUERY_MESSAGE, "QUERY_MESSAGE", query::query_message),
    (rc::QUERY_CONSUMER_OFFSET, "QUERY_CONSUMER_OFFSET", offset::query_consumer_offset),
    (rc::UPDATE_CONSUMER_OFFSET, "UPDATE_CONSUMER_OFFSET", offset::update_consumer_offset),
    (rc::UPDATE_AND_CREATE_TOPIC, "UPDATE_AND_CREATE_TOPIC", admin::update_and_create_topic),
    (
        rc::UPDATE_AND_CREATE_TOPIC_LIST,
        "UPDATE_AND_CREATE_TOPIC_LIST",
        admin::update_and_create_topic_list,
    ),
    (rc::GET_ALL_TOPIC_CONFIG, "GET_ALL_TOPIC_CONFIG", admin::get_all_topic_config),
    (rc::UPDATE_BROKER_CONFIG, "UPDATE_BROKER_CONFIG", config::update_broker_config),
    (rc::GET_BROKER_CONFIG, "GET_BROKER_CONFIG", config::get_broker_config),
    (rc::GET_BROKER_RUNTIME_INFO, "GET_BROKER_RUNTIME_INFO", stats::get_broker_runtime_info),
    (
        rc::SEARCH_OFFSET_BY_TIMESTAMP,
        "SEARCH_OFFSET_BY_TIMESTAMP",
        offset::search_offset_by_timestamp,
    ),
    (rc::GET_MAX_OFFSET, "GET_MAX_OFFSET", offset::get_max_offset),
    (rc::GET_MIN_OFFSET, "GET_MIN_OFFSET", offset::get_min_offset),
    (
        rc::GET_EARLIEST_MSG_STORETIME,
        "GET_EARLIEST_MSG_STORETIME",
        offset::get_earliest_msg_storetime,
    ),
    (rc::VIEW_MESSAGE_BY_ID, "VIEW_MESSAGE_BY_ID", query::view_message_by_id),
    (rc::HEART_BEAT, "HEART_BEAT", client::heart_beat),
    (rc::UNREGISTER_CLIENT, "UNREGISTER_CLIENT", client::unregister_client),
    (rc::CONSUMER_SEND_MSG_BACK, "CONSUMER_SEND_MSG_BACK", retry::consumer_send_msg_back),
    (rc::END_TRANSACTION, "END_TRANSACTION", transaction::end_transaction),
    (
        rc::GET_CONSUMER_LIST_BY_GROUP,
        "GET_CONSUMER_LIST_BY_GROUP",
        client::get_consumer_list_by_group,
    ),
    (rc::LOCK_BATCH_MQ, "LOCK_BATCH_MQ", lock::lock_batch_mq),
    (rc::UNLOCK_BATCH_MQ, "UNLOCK_BATCH_MQ", lock::unlock_batch_mq),
    (rc::CHECK_CLIENT_CONFIG, "CHECK_CLIENT_CONFIG", client::check_client_config),
    (
        rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
        group::update_and_create_subscription_group,
    ),
    (
        rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
        group::get_all_subscription_group_config,
    ),
    (rc::GET_TOPIC_STATS_INFO, "GET_TOPIC_STATS_INFO", stats::get_topic_stats_info),
    (
        rc::GET_CONSUMER_CONNECTION_LIST,
        "GET_CONSUMER_CONNECTION_LIST",
        stats::get_consumer_connection_list,
    ),
    (
        rc::GET_PRODUCER_CONNECTION_LIST,
        "GET_PRODUCER_CONNECTION_LIST",
        stats::get_producer_connection_list,
    ),
    (rc::DELETE_SUBSCRIPTIONGROUP, "DELETE_SUBSCRIPTIONGROUP", group::delete_subscription_group),
    (rc::GET_CONSUME_STATS, "GET_CONSUME_STATS", stats::get_consume_stats),
    (rc::DELETE_TOPIC_IN_BROKER, "DELETE_TOPIC_IN_BROKER", admin::delete_topic_in_broker),
    (
        rc::INVOKE_BROKER_TO_RESET_OFFSET,
        "INVOKE_BROKER_TO_RESET_OFFSET",
        group::invoke_broker_to_reset_offset,
    ),
    (
        rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
        "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST",
        group::update_and_create_subscription_group_list,
    ),
    (
        rc::QUERY_TOPIC_CONSUME_BY_WHO,
        "QUERY_TOPIC_CONSUME_BY_WHO",
        stats::query_topic_consume_by_who,
    ),
    (rc::QUERY_CONSUME_TIME_SPAN, "QUERY_CONSUME_TIME_SPAN", offset::query_consume_time_span),
    (
        rc::GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
        "GET_SYSTEM_TOPIC_LIST_FROM_BROKER",
        admin::get_system_topic_list_from_broker,
    ),
    (rc::GET_CONSUMER_RUNNING_INFO, "GET_CONSUMER_RUNNING_INFO", relay::get_consumer_running_info),
    (rc::CONSUME_MESSAGE_DIRECTLY, "CONSUME_MESSAGE_DIRECTLY", relay::consume_message_directly),
    (rc::SEND_MESSAGE_V2, "SEND_MESSAGE_V2", send::send_message),
    (rc::VIEW_BROKER_STATS_DATA, "VIEW_BROKER_STATS_DATA", stats::view_broker_stats_data),
    (rc::GET_BROKER_CONSUME_STATS, "GET_BROKER_CONSUME_STATS", stats::get_broker_consume_stats),
    (rc::SEND_BATCH_MESSAGE, "SEND_BATCH_MESSAGE", send::send_batch_message),
    (rc::SEND_REPLY_MESSAGE, "SEND_REPLY_MESSAGE", reply::send_reply_message),
    (rc::SEND_REPLY_MESSAGE_V2, "SEND_REPLY_MESSAGE_V2", reply::send_reply_message),
    (rc::GET_ALL_PRODUCER_INFO, "GET_ALL_PRODUCER_INFO", stats::get_all_producer_info),
    (rc::GET_TOPIC_CONFIG, "GET_TOPIC_CONFIG", admin::get_topic_config),
    (
        rc::GET_SUBSCRIPTIONGROUP_CONFIG,
        "GET_SUBSCRIPTIONGROUP_CONFIG",
        group::get_subscription_group_config,
    ),
    (rc::LITE_PULL_MESSAGE, "LITE_PULL_MESSAGE", pull::pull_message),
    (rc::RECALL_MESSAGE, "RECALL_MESSAGE", super::processor::recall::recall_message),
    (rc::QUERY_ASSIGNMENT, "QUERY_ASSIGNMENT", pop::query_assignment),
    (rc::SET_MESSAGE_REQUEST_MODE, "SET_MESSAGE_REQUEST_MODE", pop::set_message_request_mode),
    (
        rc::GET_ALL_MESSAGE_REQUEST_MODE,
        "GET_ALL_MESSAGE_REQUEST_MODE",
        pop::get_all_message_request_mode,
    ),
    (
        rc::DELETE_TOPIC_IN_BROKER_LIST,
        "DELETE_TOPIC_IN_BROKER_LIST",
        admin::delete_topic_in_broker_list,
    ),
    (
        rc::DELETE_SUBSCRIPTIONGROUP_LIST,
        "DELETE_SUBSCRIPTIONGROUP_LIST",
        group::delete_subscription_group_list,
    ),
    (rc::POP_MESSAGE, "POP_MESSAGE", pop::pop_message),
    (rc::ACK_MESSAGE, "ACK_MESSAGE", pop::ack_message),
    (rc::CHANGE_MESSAGE_INVISIBLETIME, "CHANGE_MESSAGE_INVISIBLETIME", pop::change_invisible_time),
    (rc::BATCH_ACK_MESSAGE, "BATCH_ACK_MESSAGE", pop::batch_ack_message),
];

/// The name server's processors, sorted by code.
pub(crate) const NAMESRV: &[(i32, &str, Handler)] = &[
    (rc::REGISTER_BROKER, "REGISTER_BROKER", namesrv::register_broker),
    (rc::UNREGISTER_BROKER, "UNREGISTER_BROKER", namesrv::unregister_broker),
    (rc::GET_ROUTEINFO_BY_TOPIC, "GET_ROUTEINFO_BY_TOPIC", namesrv::get_route_info),
    (rc::GET_BROKER_CLUSTER_INFO, "GET_BROKER_CLUSTER_INFO", namesrv::get_broker_cluster_info),
    (
        rc::WIPE_WRITE_PERM_OF_BROKER,
        "WIPE_WRITE_PERM_OF_BROKER",
        namesrv::wipe_write_perm_of_broker,
    ),
    (
        rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
        namesrv::get_all_topic_list,
    ),
    (rc::DELETE_TOPIC_IN_NAMESRV, "DELETE_TOPIC_IN_NAMESRV", namesrv::delete_topic_in_namesrv),
    (
        rc::REGISTER_TOPIC_IN_NAMESRV,
        "REGISTER_TOPIC_IN_NAMESRV",
        namesrv::register_topic_in_namesrv,
    ),
    (rc::GET_TOPICS_BY_CLUSTER, "GET_TOPICS_BY_CLUSTER", namesrv::get_topics_by_cluster),
    (
        rc::GET_SYSTEM_TOPIC_LIST_FROM_NS,
        "GET_SYSTEM_TOPIC_LIST_FROM_NS",
        namesrv::get_system_topic_list,
    ),
    (rc::ADD_WRITE_PERM_OF_BROKER, "ADD_WRITE_PERM_OF_BROKER", namesrv::add_write_perm_of_broker),
];

/// Answers one request with the processor the table names for its code.
pub(crate) fn dispatch(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    role: Role,
    req: RemotingCommand,
) -> Reply {
    let table = match role {
        Role::Broker => BROKER,
        Role::NameServer => NAMESRV,
    };
    match table.binary_search_by_key(&req.code, |(code, _, _)| *code) {
        Ok(i) => {
            if let Some(refused) =
                face.acl.as_ref().and_then(|acl| super::acl::check(acl, role, ctx, &req))
            {
                return refused;
            }
            let start = std::time::Instant::now();
            let reply = (table[i].2)(core, face, ctx, req);
            if let Reply::Now(resp) = &reply {
                face.rpc.observe(role, i, resp.code, start.elapsed());
            }
            reply
        }
        Err(_) => {
            let code = req.code;
            tracing::debug!(code, peer = %ctx.peer, "request code not supported");
            reply_error(
                &req,
                response_code::REQUEST_CODE_NOT_SUPPORTED,
                format!(" request type {code} not supported"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_tables_when_checked_should_be_sorted_without_duplicates() {
        for (name, table) in [("broker", BROKER), ("namesrv", NAMESRV)] {
            for w in table.windows(2) {
                assert!(
                    w[0].0 < w[1].0,
                    "{name}: {} must come before {} and appear once",
                    w[0].1,
                    w[1].1
                );
            }
            for (code, label, _) in table.iter() {
                assert_eq!(
                    crate::remoting::code::request_code::name(*code),
                    Some(*label),
                    "{name}: the label of code {code} is its RocketMQ name"
                );
            }
        }
    }
}
