//! Name-server and topic-administration headers: GET_ROUTEINFO_BY_TOPIC (105), REGISTER_BROKER
//! (103), UNREGISTER_BROKER (104), UPDATE_AND_CREATE_TOPIC (17) and DELETE_TOPIC_IN_BROKER /
//! _IN_NAMESRV (215/216).

use crate::remoting::error::HeaderError;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::{put_opt_i64, put_opt_str, FromExtFields, ToExtFields};

/// GET_ROUTEINFO_BY_TOPIC request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetRouteInfoRequestHeader<'a> {
    /// `topic`.
    pub topic: &'a str,
    /// `acceptStandardJsonOnly`; false when absent (baiji emits standard JSON regardless).
    pub accept_standard_json_only: bool,
}

impl<'a> FromExtFields<'a> for GetRouteInfoRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: ext.required_str("topic")?,
            accept_standard_json_only: ext
                .optional_bool("acceptStandardJsonOnly")?
                .unwrap_or(false),
        })
    }
}

impl ToExtFields for GetRouteInfoRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("topic", self.topic);
        if self.accept_standard_json_only {
            ext.insert_bool("acceptStandardJsonOnly", true);
        }
    }
}

/// REGISTER_BROKER request (broker → name server); the body is a
/// [`RegisterBrokerBody`](crate::remoting::body::RegisterBrokerBody).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterBrokerRequestHeader<'a> {
    /// `brokerName`.
    pub broker_name: &'a str,
    /// `brokerAddr`, `ip:port` clients dial.
    pub broker_addr: &'a str,
    /// `clusterName`.
    pub cluster_name: &'a str,
    /// `haServerAddr`, `ip:port` (unused by baiji but required).
    pub ha_server_addr: &'a str,
    /// `brokerId`: 0 for a master.
    pub broker_id: i64,
    /// `heartbeatTimeoutMillis`.
    pub heartbeat_timeout_millis: Option<i64>,
    /// `enableActingMaster`.
    pub enable_acting_master: Option<bool>,
    /// `compressed`: the body is deflated (baiji never sends that).
    pub compressed: bool,
    /// `bodyCrc32`: CRC32 of the body `& 0x7FFFFFFF`, or 0 to skip the check.
    pub body_crc32: i32,
}

impl<'a> FromExtFields<'a> for RegisterBrokerRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            broker_name: ext.required_str("brokerName")?,
            broker_addr: ext.required_str("brokerAddr")?,
            cluster_name: ext.required_str("clusterName")?,
            ha_server_addr: ext.required_str("haServerAddr")?,
            broker_id: ext.required_i64("brokerId")?,
            heartbeat_timeout_millis: ext.optional_i64("heartbeatTimeoutMillis")?,
            enable_acting_master: ext.optional_bool("enableActingMaster")?,
            compressed: ext.optional_bool("compressed")?.unwrap_or(false),
            body_crc32: ext.optional_i32("bodyCrc32")?.unwrap_or(0),
        })
    }
}

impl ToExtFields for RegisterBrokerRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("brokerName", self.broker_name);
        ext.insert("brokerAddr", self.broker_addr);
        ext.insert("clusterName", self.cluster_name);
        ext.insert("haServerAddr", self.ha_server_addr);
        ext.insert_i64("brokerId", self.broker_id);
        put_opt_i64(ext, "heartbeatTimeoutMillis", self.heartbeat_timeout_millis);
        if let Some(enable) = self.enable_acting_master {
            ext.insert_bool("enableActingMaster", enable);
        }
        ext.insert_bool("compressed", self.compressed);
        ext.insert_i64("bodyCrc32", i64::from(self.body_crc32));
    }
}

/// REGISTER_BROKER response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterBrokerResponseHeader {
    /// `haServerAddr` of the master.
    pub ha_server_addr: Option<String>,
    /// `masterAddr`.
    pub master_addr: Option<String>,
}

impl FromExtFields<'_> for RegisterBrokerResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            ha_server_addr: ext.optional_str("haServerAddr").map(str::to_owned),
            master_addr: ext.optional_str("masterAddr").map(str::to_owned),
        })
    }
}

impl ToExtFields for RegisterBrokerResponseHeader {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        put_opt_str(ext, "haServerAddr", self.ha_server_addr.as_deref());
        put_opt_str(ext, "masterAddr", self.master_addr.as_deref());
    }
}

/// UNREGISTER_BROKER request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnregisterBrokerRequestHeader<'a> {
    /// `brokerName`.
    pub broker_name: &'a str,
    /// `brokerAddr`.
    pub broker_addr: &'a str,
    /// `clusterName`.
    pub cluster_name: &'a str,
    /// `brokerId`.
    pub broker_id: i64,
}

impl<'a> FromExtFields<'a> for UnregisterBrokerRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            broker_name: ext.required_str("brokerName")?,
            broker_addr: ext.required_str("brokerAddr")?,
            cluster_name: ext.required_str("clusterName")?,
            broker_id: ext.required_i64("brokerId")?,
        })
    }
}

impl ToExtFields for UnregisterBrokerRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("brokerName", self.broker_name);
        ext.insert("brokerAddr", self.broker_addr);
        ext.insert("clusterName", self.cluster_name);
        ext.insert_i64("brokerId", self.broker_id);
    }
}

/// UPDATE_AND_CREATE_TOPIC request (`CreateTopicRequestHeader`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateTopicRequestHeader<'a> {
    /// `topic`.
    pub topic: &'a str,
    /// `defaultTopic`.
    pub default_topic: Option<&'a str>,
    /// `readQueueNums`.
    pub read_queue_nums: i32,
    /// `writeQueueNums`.
    pub write_queue_nums: i32,
    /// `perm`: PermName bits (READ 4, WRITE 2, INHERIT 1).
    pub perm: i32,
    /// `topicFilterType`: `SINGLE_TAG` when absent.
    pub topic_filter_type: &'a str,
    /// `topicSysFlag`; 0 when absent.
    pub topic_sys_flag: i32,
    /// `order`; false when absent.
    pub order: bool,
    /// `attributes` (5.x, `+key=value,...`).
    pub attributes: Option<&'a str>,
    /// `force` (5.x); false when absent.
    pub force: bool,
}

impl<'a> CreateTopicRequestHeader<'a> {
    /// What a client's `createTopic` sends: `queues` read and write queues, read-write
    /// permission, single-tag filtering, `TBW102` as the template.
    pub fn read_write(topic: &'a str, queues: i32) -> Self {
        CreateTopicRequestHeader {
            topic,
            default_topic: Some("TBW102"),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: 6,
            topic_filter_type: "SINGLE_TAG",
            topic_sys_flag: 0,
            order: false,
            attributes: None,
            force: false,
        }
    }
}

impl<'a> FromExtFields<'a> for CreateTopicRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: ext.required_str("topic")?,
            default_topic: ext.optional_str("defaultTopic"),
            read_queue_nums: ext.required_i32("readQueueNums")?,
            write_queue_nums: ext.required_i32("writeQueueNums")?,
            perm: ext.required_i32("perm")?,
            topic_filter_type: match ext.optional_str("topicFilterType") {
                None | Some("") => "SINGLE_TAG",
                Some(t) => t,
            },
            topic_sys_flag: ext.optional_i32("topicSysFlag")?.unwrap_or(0),
            order: ext.optional_bool("order")?.unwrap_or(false),
            attributes: ext.optional_str("attributes"),
            force: ext.optional_bool("force")?.unwrap_or(false),
        })
    }
}

impl ToExtFields for CreateTopicRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("topic", self.topic);
        put_opt_str(ext, "defaultTopic", self.default_topic);
        ext.insert_i64("readQueueNums", i64::from(self.read_queue_nums));
        ext.insert_i64("writeQueueNums", i64::from(self.write_queue_nums));
        ext.insert_i64("perm", i64::from(self.perm));
        ext.insert("topicFilterType", self.topic_filter_type);
        ext.insert_i64("topicSysFlag", i64::from(self.topic_sys_flag));
        ext.insert_bool("order", self.order);
        put_opt_str(ext, "attributes", self.attributes);
        ext.insert_bool("force", self.force);
    }
}

/// DELETE_TOPIC_IN_BROKER / DELETE_TOPIC_IN_NAMESRV request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteTopicRequestHeader<'a> {
    /// `topic`.
    pub topic: &'a str,
}

impl<'a> FromExtFields<'a> for DeleteTopicRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self { topic: ext.required_str("topic")? })
    }
}

impl ToExtFields for DeleteTopicRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("topic", self.topic);
    }
}

#[cfg(test)]
mod tests;
