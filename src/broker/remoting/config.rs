//! The remoting face's section of the broker configuration (file and flag keys stay flat: see
//! [`BrokerConfig`](crate::broker::BrokerConfig)).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde::Deserialize;

use crate::broker::security::sign::Credentials;

/// The remoting face's settings: its listeners, the registrar, pulls and connection bounds
/// (one section of [`BrokerConfig`](crate::broker::BrokerConfig)).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct RemotingConfig {
    /// Address the broker listens on (RocketMQ: `listenPort`, default 10911).
    pub listen: SocketAddr,
    /// The embedded name server's address; `None` disables it. Ignored when
    /// `namesrv-addr` is set.
    pub namesrv_listen: Option<SocketAddr>,
    /// The fast ("VIP") port, on `listen`'s host (RocketMQ: `fastListenPort`, on by default at
    /// `listenPort - 2`): the same protocol, processors, ACL and TLS as `listen`. Clients with
    /// `vipChannelEnabled` (the dashboard, Java clients up to 4.4 by default) send their broker
    /// calls there. `None` (the default): the bound `listen` port minus 2; `Some(0)`: none;
    /// `Some(p)`: port `p`. A port in use is logged as a warning and the broker serves without
    /// it (as it does when `listen`'s port minus 2 cannot be bound at all).
    pub fast_listen_port: Option<u16>,
    /// Seconds between re-registrations with external name servers (RocketMQ:
    /// `registerNameServerPeriod`, 30 s).
    pub register_interval_secs: u64,
    /// The account the broker signs its requests to external name servers with (RocketMQ 5:
    /// `innerClientAuthenticationCredentials`, the same JSON:
    /// `{"accessKey":"...","secretKey":"..."}`); needed when they check ACL (registering is
    /// an admin code there). `None` (the default): unsigned.
    pub inner_client_authentication_credentials: Option<Credentials>,
    /// Longest a suspended pull is held, milliseconds (clients ask for 15 s; their RPC
    /// timeout is 30 s).
    pub long_poll_max_ms: u64,
    /// Most bytes of messages one pull answers with (RocketMQ:
    /// `maxTransferBytesOnMessageInMemory`, 256 KiB). The client's `maxMsgBytes` is ignored, as
    /// RocketMQ 5 ignores it; the first message is returned whatever its size, and the client
    /// pulls again for the rest.
    pub max_transfer_bytes_on_message_in_memory: usize,
    /// Most messages one pull answers with (RocketMQ: `maxTransferCountOnMessageInMemory`, 32);
    /// fewer if the client asks for fewer.
    pub max_transfer_count_on_message_in_memory: usize,
    /// A connection with no traffic either way for this long is closed, seconds (RocketMQ:
    /// `serverChannelMaxIdleTimeSeconds`, 120; 0: never).
    pub server_channel_max_idle_time_seconds: u64,
    /// Most pulls one connection may have suspended (long polling); one more is answered at
    /// once, as if its hold had expired.
    pub max_suspended_pulls_per_connection: usize,
    /// While more than this many bytes of one connection's answers wait to be written, the
    /// broker reads no more of its requests (RocketMQ: `writeBufferHighWaterMark`, 4 MiB).
    pub write_buffer_high_water_mark: usize,
    /// How a group whose mode no `SET_MESSAGE_REQUEST_MODE` set reads a topic, as
    /// `QUERY_ASSIGNMENT` tells clients that ask (RocketMQ: `defaultMessageRequestMode`):
    /// `PULL` (default) or `POP`. Only clients with client-side rebalancing off ask.
    pub default_message_request_mode: String,
}

impl Default for RemotingConfig {
    fn default() -> Self {
        RemotingConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 10911),
            namesrv_listen: Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9876)),
            fast_listen_port: None,
            register_interval_secs: 30,
            inner_client_authentication_credentials: None,
            long_poll_max_ms: 25_000,
            max_transfer_bytes_on_message_in_memory: 256 * 1024,
            max_transfer_count_on_message_in_memory: 32,
            server_channel_max_idle_time_seconds: 120,
            max_suspended_pulls_per_connection: 1024,
            write_buffer_high_water_mark: 4 * 1024 * 1024,
            default_message_request_mode: "PULL".into(),
        }
    }
}

impl RemotingConfig {
    /// The byte bound of one pull's messages: the configured one, kept below the frame limit
    /// with room for the response header.
    pub(crate) fn pull_max_bytes(&self) -> usize {
        const HEADER_ROOM: usize = 1024 * 1024;
        self.max_transfer_bytes_on_message_in_memory
            .clamp(1, crate::remoting::frame::MAX_FRAME_LEN - HEADER_ROOM)
    }

    /// The cap on suspended pulls of one connection, kept to what a channel can hold.
    pub(crate) fn suspended_pull_cap(&self) -> usize {
        self.max_suspended_pulls_per_connection.min(1 << 20)
    }

    /// Whether groups pop by default (`default-message-request-mode = "POP"`).
    pub(crate) fn pop_by_default(&self) -> bool {
        self.default_message_request_mode.eq_ignore_ascii_case("POP")
    }

    /// The fast port's address for a broker port bound at `bound`, and whether it was derived
    /// from it (`listen`'s port minus 2) rather than asked for; `None` when turned off (or
    /// when the broker port is below 3, so that no port minus 2 exists).
    pub(crate) fn fast_addr(&self, bound: SocketAddr) -> Option<(SocketAddr, bool)> {
        match self.fast_listen_port {
            Some(0) => None,
            Some(p) => Some((SocketAddr::new(bound.ip(), p), false)),
            None => bound
                .port()
                .checked_sub(2)
                .filter(|p| *p > 0)
                .map(|p| (SocketAddr::new(bound.ip(), p), true)),
        }
    }

    /// The message-count bound of one pull (at least one).
    pub(crate) fn pull_max_count(&self) -> usize {
        self.max_transfer_count_on_message_in_memory.max(1)
    }

    /// Checks the values a start would refuse.
    ///
    /// # Errors
    /// The reason, for a request mode that is neither `PULL` nor `POP`.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !["PULL", "POP"]
            .iter()
            .any(|m| self.default_message_request_mode.eq_ignore_ascii_case(m))
        {
            return Err(format!(
                "default-message-request-mode must be PULL or POP, not `{}`",
                self.default_message_request_mode
            ));
        }
        Ok(())
    }
}
