//! Topic administration: `UPDATE_AND_CREATE_TOPIC` and its list form, `DELETE_TOPIC_IN_BROKER`
//! and its list form, `GET_ALL_TOPIC_CONFIG`, `GET_TOPIC_CONFIG`, `GET_SYSTEM_TOPIC_LIST_FROM_BROKER`.

use crate::sync::Arc;

use super::{bad_body, bad_header, store_error};
use crate::broker::core::topics;
use crate::broker::core::Core;
use crate::broker::remoting::{json_reply, ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::{
    CreateTopicListRequestBody, DeleteTopicListRequestBody, JsonBody, TopicList,
};
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{CreateTopicRequestHeader, DeleteTopicRequestHeader, FromExtFields};
use crate::remoting::RemotingCommand;

/// `UPDATE_AND_CREATE_TOPIC` (17). An in-memory topic cannot change its queue count once it
/// exists; asking for another count keeps the existing one and says so.
pub(crate) fn update_and_create_topic(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match CreateTopicRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let conf = match topics::admin_topic_config(
        h.topic,
        h.read_queue_nums.into(),
        h.write_queue_nums.into(),
        h.perm.into(),
        h.topic_sys_flag.into(),
        h.order,
    ) {
        Ok(c) => c,
        Err(remark) => return reply_error(&req, response_code::SYSTEM_ERROR, remark),
    };
    let read = conf.read_queue_nums;
    let write = conf.write_queue_nums;
    #[cfg(feature = "replicas")]
    if let Some(replica) = core.replica() {
        // Answered once the broker set holds the topic (every replica creates it alike).
        let (replica, tx) = (Arc::clone(replica), _ctx.tx.clone());
        tokio::spawn(async move {
            let reply = match replica.create_topic(&conf).await {
                Ok(queues) => created(&req, &conf.topic_name, (read, write), queues),
                Err(e) => reply_error(&req, response_code::SERVICE_NOT_AVAILABLE, e.to_string()),
            };
            if let Reply::Now(resp) = reply {
                if !req.is_oneway() {
                    // The connection is gone when this fails: nobody waits for the answer.
                    let _ = tx.send(*resp).await;
                }
            }
        });
        return Reply::Nothing;
    }
    match core.create_topic(conf) {
        Ok(c) => created(&req, h.topic, (read, write), c.read_queue_nums),
        Err(e) => store_error(&req, &e),
    }
}

/// The answer to a topic creation that left `topic` with `queues` queues, asked for
/// `(read, write)`.
fn created(req: &RemotingCommand, topic: &str, (read, write): (u32, u32), queues: u32) -> Reply {
    if queues != read.max(write) && queues != read {
        return Reply::now(RemotingCommand::response_to(
            req,
            response_code::SUCCESS,
            Some(format!(
                "topic {} exists with {queues} queues; baiji cannot change the queue count of a live topic",
                quote(topic)
            )),
        ));
    }
    Reply::now(ok(req, Default::default()))
}

/// `DELETE_TOPIC_IN_BROKER` (215): the topic and everything in it.
pub(crate) fn delete_topic_in_broker(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match DeleteTopicRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    if topics::is_system_topic(h.topic) {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("The topic[{}] is conflict with system topic.", quote(h.topic)),
        );
    }
    // On a broker set the other replicas would keep the topic, and a new one of the same name
    // would take other offsets on the leader than on them.
    if let Err(why) = core.unreplicated("topic deletions are") {
        return reply_error(&req, response_code::SYSTEM_ERROR, why);
    }
    core.delete_topic(h.topic);
    Reply::now(ok(&req, Default::default()))
}

/// `DELETE_TOPIC_IN_BROKER_LIST` (5002, RocketMQ's batch form of 215, what rocketmq-admin-cli's
/// `deleteTopic` sends): body `{"topicList":[…]}`, each topic as [`delete_topic_in_broker`].
/// All or nothing: a list naming a system topic, or an empty list, deletes none.
pub(crate) fn delete_topic_in_broker_list(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let body = match DeleteTopicListRequestBody::from_json_slice(&req.body) {
        Ok(b) => b,
        Err(e) => return bad_body(&req, "DeleteTopicListRequestBody", e),
    };
    if body.topic_list.is_empty() {
        return reply_error(&req, response_code::SYSTEM_ERROR, "topic list is empty.".to_string());
    }
    if let Some(t) = body.topic_list.iter().find(|t| topics::is_system_topic(t)) {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("The topic[{}] is conflict with system topic.", quote(t)),
        );
    }
    if let Err(why) = core.unreplicated("topic deletions are") {
        return reply_error(&req, response_code::SYSTEM_ERROR, why);
    }
    for topic in &body.topic_list {
        core.delete_topic(topic);
    }
    Reply::now(ok(&req, Default::default()))
}

/// `GET_ALL_TOPIC_CONFIG` (21).
pub(crate) fn get_all_topic_config(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let wrapper = core.topics.serialize_wrapper();
    json_reply(&req, &wrapper)
}

/// `UPDATE_AND_CREATE_TOPIC_LIST` (18, `mqadmin updateTopicList`): body
/// `{"topicConfigList":[TopicConfig…]}`, each entry checked as `UPDATE_AND_CREATE_TOPIC`
/// checks its header, all before any is created (a list with one bad entry creates none).
/// Topics that exist keep their queue count, and the remark names them.
pub(crate) fn update_and_create_topic_list(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let body = match CreateTopicListRequestBody::from_json_slice(&req.body) {
        Ok(b) => b,
        Err(e) => return bad_body(&req, "CreateTopicListRequestBody", e),
    };
    let mut confs = Vec::with_capacity(body.topic_config_list.len());
    for t in &body.topic_config_list {
        match topics::admin_topic_config(
            &t.topic_name,
            t.read_queue_nums.into(),
            t.write_queue_nums.into(),
            t.perm.into(),
            t.topic_sys_flag.into(),
            t.order,
        ) {
            Ok(mut c) => {
                c.attributes = t.attributes.clone();
                confs.push(c);
            }
            Err(remark) => return reply_error(&req, response_code::SYSTEM_ERROR, remark),
        }
    }
    // On a broker set each topic must go through the set; this batch form is not replicated
    // yet (rocketmq-admin-cli's and mqadmin's `updateTopic` send the single form).
    if let Err(why) = core.unreplicated("topic list creations are") {
        return reply_error(&req, response_code::SYSTEM_ERROR, why);
    }
    let mut kept = Vec::new();
    for conf in confs {
        let (name, read, write) =
            (conf.topic_name.clone(), conf.read_queue_nums, conf.write_queue_nums);
        match core.create_topic(conf) {
            Ok(c) if c.read_queue_nums != read.max(write) && c.read_queue_nums != read => {
                kept.push(format!("{} ({})", quote(&name), c.read_queue_nums));
            }
            Ok(_) => {}
            Err(e) => return store_error(&req, &e),
        }
    }
    let remark = (!kept.is_empty()).then(|| {
        format!(
            "topics exist with other queue counts, kept: {}; baiji cannot change the queue count of a live topic",
            kept.join(", ")
        )
    });
    Reply::now(RemotingCommand::response_to(&req, response_code::SUCCESS, remark))
}

/// `GET_TOPIC_CONFIG` (351, the dashboard's topic dialog and its "send message"): header
/// `topic` (and `lo`, for static topics, which baiji has not); body the topic's config as
/// RocketMQ's `TopicConfigAndQueueMapping` (a `TopicConfig`, without `mappingDetail`), or
/// `TOPIC_NOT_EXIST`.
pub(crate) fn get_topic_config(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let topic = match req.ext_fields.required_str("topic") {
        Ok(t) => t,
        Err(e) => return bad_header(&req, &e),
    };
    match core.topics.get(topic) {
        Some(c) => json_reply(&req, &c),
        None => reply_error(
            &req,
            response_code::TOPIC_NOT_EXIST,
            format!("No topic in this broker. topic: {topic}"),
        ),
    }
}

/// `GET_SYSTEM_TOPIC_LIST_FROM_BROKER` (305): body a `TopicList` of this broker's system
/// topics (see [`topics::system_topics`]).
pub(crate) fn get_system_topic_list_from_broker(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let topic_list = topics::system_topics(&core.topics, &core.config.cluster_name);
    json_reply(&req, &TopicList { topic_list, broker_addr: None })
}
