//! [`RemotingCommand`]: one request or response of the remoting protocol.
//!
//! A command is a small header (code, opaque, flags, remark and the string map of custom
//! fields) plus an opaque body. The header travels as JSON (serialize type 0, what every client
//! uses by default) or in RocketMQ's compact binary layout (type 1); a reply is always encoded in
//! the type of the request it answers.
//!
//! Decoding is lenient (see [`ExtFields`] and the JSON rules below); encoding is strict and
//! complete, because the Rust client deserialises response headers with a serde derive that
//! requires `code`, `language` (one of 14 exact names), `version`, `opaque`, `flag` and
//! `serializeTypeCurrentRPC`.
//!
//! JSON header rules on input:
//! * only `code` and `opaque` are required; `language`, `version`, `flag`, `remark`,
//!   `extFields` and `serializeTypeCurrentRPC` default when absent or `null`;
//! * integers may arrive as JSON numbers or numeric strings; an unknown `language` name is
//!   [`LanguageCode::Other`]; unknown top-level keys are ignored;
//! * the serialize type is taken from the frame, never from `serializeTypeCurrentRPC`.

use bytes::{BufMut, Bytes, BytesMut};

use crate::remoting::error::{FrameError, RefusedHeader};
use crate::remoting::ext::ExtFields;
use crate::remoting::frame::{
    decode_frame, Frame, FRAME_PREFIX_LEN, MAX_FRAME_LEN, MAX_HEADER_LEN,
};
use crate::remoting::{binary_header, json_header};

/// The `version` baiji puts in every command it sends: `V5_3_1` of RocketMQ's `MQVersion`.
///
/// Clients read it from responses: the Rust client refuses SQL92 subscriptions below 232 and the
/// broker-side version gates (`maxReconsumeTimes`, standard route JSON) are all far below.
pub const BROKER_VERSION: i32 = 475;

/// How a command's header is encoded; the high byte of the frame's second word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SerializeType {
    /// JSON text, the default of every client.
    #[default]
    Json,
    /// RocketMQ's binary layout (`RocketMQSerializable`).
    RocketMq,
}

impl SerializeType {
    /// The byte on the wire.
    #[must_use]
    pub const fn code(self) -> u8 {
        match self {
            Self::Json => 0,
            Self::RocketMq => 1,
        }
    }

    /// The type for a wire byte; `None` for anything but 0 and 1.
    #[must_use]
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Json),
            1 => Some(Self::RocketMq),
            _ => None,
        }
    }

    /// The name used in `serializeTypeCurrentRPC`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Json => "JSON",
            Self::RocketMq => "ROCKETMQ",
        }
    }

    /// The type for a `serializeTypeCurrentRPC` name (exact, upper case).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "JSON" => Some(Self::Json),
            "ROCKETMQ" => Some(Self::RocketMq),
            _ => None,
        }
    }
}

/// Programming language of the peer that sent a command (informational only).
///
/// Codes 0–11 are Java's `LanguageCode`; `RUST` (12) and `NODE_JS` (13) are rocketmq-rust's
/// additions. The Rust client rejects a response whose `language` is not one of these 14 names,
/// so baiji always sends [`LanguageCode::Java`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LanguageCode {
    /// `JAVA` (0): the Java client and broker; what baiji sends.
    #[default]
    Java,
    /// `CPP` (1).
    Cpp,
    /// `DOTNET` (2).
    Dotnet,
    /// `PYTHON` (3).
    Python,
    /// `DELPHI` (4).
    Delphi,
    /// `ERLANG` (5).
    Erlang,
    /// `RUBY` (6).
    Ruby,
    /// `OTHER` (7); also what any unknown name or code decodes to.
    Other,
    /// `HTTP` (8).
    Http,
    /// `GO` (9).
    Go,
    /// `PHP` (10).
    Php,
    /// `OMS` (11).
    Oms,
    /// `RUST` (12): rocketmq-client-rust.
    Rust,
    /// `NODE_JS` (13).
    NodeJs,
}

impl LanguageCode {
    /// Every language in code order.
    pub const ALL: [Self; 14] = [
        Self::Java,
        Self::Cpp,
        Self::Dotnet,
        Self::Python,
        Self::Delphi,
        Self::Erlang,
        Self::Ruby,
        Self::Other,
        Self::Http,
        Self::Go,
        Self::Php,
        Self::Oms,
        Self::Rust,
        Self::NodeJs,
    ];

    /// The name used in JSON headers.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Java => "JAVA",
            Self::Cpp => "CPP",
            Self::Dotnet => "DOTNET",
            Self::Python => "PYTHON",
            Self::Delphi => "DELPHI",
            Self::Erlang => "ERLANG",
            Self::Ruby => "RUBY",
            Self::Other => "OTHER",
            Self::Http => "HTTP",
            Self::Go => "GO",
            Self::Php => "PHP",
            Self::Oms => "OMS",
            Self::Rust => "RUST",
            Self::NodeJs => "NODE_JS",
        }
    }

    /// The byte used in binary headers.
    #[must_use]
    pub const fn code(self) -> u8 {
        match self {
            Self::Java => 0,
            Self::Cpp => 1,
            Self::Dotnet => 2,
            Self::Python => 3,
            Self::Delphi => 4,
            Self::Erlang => 5,
            Self::Ruby => 6,
            Self::Other => 7,
            Self::Http => 8,
            Self::Go => 9,
            Self::Php => 10,
            Self::Oms => 11,
            Self::Rust => 12,
            Self::NodeJs => 13,
        }
    }

    /// Language for a JSON name, ignoring letter case; unknown names are [`Self::Other`].
    #[must_use]
    pub fn from_name(name: &str) -> Self {
        Self::ALL.into_iter().find(|l| l.name().eq_ignore_ascii_case(name)).unwrap_or(Self::Other)
    }

    /// Language for a binary-header byte; unknown codes are [`Self::Other`].
    #[must_use]
    pub fn from_code(code: u8) -> Self {
        Self::ALL.into_iter().find(|l| l.code() == code).unwrap_or(Self::Other)
    }
}

/// One request or response.
///
/// Fields are public: processors read the request's fields directly and fill in a response made
/// with [`RemotingCommand::response_to`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotingCommand {
    /// Request code (in a request) or response code (in a response); see
    /// [`code`](crate::remoting::code).
    pub code: i32,
    /// Language of the sender.
    pub language: LanguageCode,
    /// `MQVersion` ordinal of the sender.
    pub version: i32,
    /// Request id chosen by the requester and echoed in the response.
    pub opaque: i32,
    /// Bit 0: response; bit 1: one-way request (see [`Self::FLAG_RESPONSE`],
    /// [`Self::FLAG_ONEWAY`]).
    pub flag: i32,
    /// Human-readable text, mostly the error of a failed response.
    pub remark: Option<String>,
    /// The custom header fields.
    pub ext_fields: ExtFields,
    /// Encoding of the header on the wire.
    pub serialize_type: SerializeType,
    /// The body; for decoded commands a view of the read buffer.
    pub body: Bytes,
}

impl Default for RemotingCommand {
    /// A request with code 0 as baiji would send it: language `JAVA`, version
    /// [`BROKER_VERSION`], JSON.
    fn default() -> Self {
        Self {
            code: 0,
            language: LanguageCode::Java,
            version: BROKER_VERSION,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: ExtFields::new(),
            serialize_type: SerializeType::Json,
            body: Bytes::new(),
        }
    }
}

impl RemotingCommand {
    /// Flag bit marking a response.
    pub const FLAG_RESPONSE: i32 = 1;
    /// Flag bit marking a one-way request, which must not be answered.
    pub const FLAG_ONEWAY: i32 = 2;

    /// A request from baiji (to a client or name server) with the given code and request id.
    #[must_use]
    pub fn request(code: i32, opaque: i32) -> Self {
        Self { code, opaque, ..Self::default() }
    }

    /// A one-way request (for example `NOTIFY_CONSUMER_IDS_CHANGED`) that the peer never answers.
    #[must_use]
    pub fn oneway_request(code: i32, opaque: i32) -> Self {
        Self { flag: Self::FLAG_ONEWAY, ..Self::request(code, opaque) }
    }

    /// The response to `request`: echoes its opaque and serialize type, sets the response flag,
    /// and identifies baiji as `JAVA` at [`BROKER_VERSION`].
    #[must_use]
    pub fn response_to(request: &Self, code: i32, remark: Option<String>) -> Self {
        Self {
            code,
            opaque: request.opaque,
            flag: Self::FLAG_RESPONSE,
            remark,
            serialize_type: request.serialize_type,
            ..Self::default()
        }
    }

    /// Replaces the body.
    #[must_use]
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Replaces the custom header fields.
    #[must_use]
    pub fn with_ext_fields(mut self, ext_fields: ExtFields) -> Self {
        self.ext_fields = ext_fields;
        self
    }

    /// Whether this is a response.
    #[must_use]
    pub fn is_response(&self) -> bool {
        self.flag & Self::FLAG_RESPONSE != 0
    }

    /// Whether this is a one-way request that must not be answered.
    #[must_use]
    pub fn is_oneway(&self) -> bool {
        self.flag & Self::FLAG_ONEWAY != 0
    }

    /// Takes the next complete command off the front of `src`; `Ok(None)` until one has arrived.
    ///
    /// # Errors
    ///
    /// A [`FrameError`] if the frame or its header is malformed; the connection must be closed.
    ///
    /// # Examples
    ///
    /// ```
    /// use baiji::remoting::code::{request_code, response_code};
    /// use baiji::remoting::RemotingCommand;
    /// use bytes::BytesMut;
    ///
    /// let mut request = RemotingCommand::request(request_code::GET_MAX_OFFSET, 7);
    /// request.ext_fields.insert("topic", "T");
    /// request.ext_fields.insert("queueId", "0");
    /// let mut wire = BytesMut::new();
    /// request.encode(&mut wire)?;
    ///
    /// let received = RemotingCommand::decode(&mut wire)?.expect("a whole frame arrived");
    /// assert_eq!(received.ext_fields.required_i32("queueId")?, 0);
    ///
    /// let mut response = RemotingCommand::response_to(&received, response_code::SUCCESS, None);
    /// response.ext_fields.insert_i64("offset", 42);
    /// assert!(response.is_response());
    /// assert_eq!(response.opaque, 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decode(src: &mut BytesMut) -> Result<Option<Self>, FrameError> {
        match decode_frame(src)? {
            Some(frame) => Self::from_frame(frame).map(Some),
            None => Ok(None),
        }
    }

    /// Parses the header of a frame; the body is moved over without copying.
    ///
    /// # Errors
    ///
    /// [`FrameError::MalformedJsonHeader`] or [`FrameError::MalformedBinaryHeader`] if the header
    /// cannot be read at all. Well-formed headers with bad custom fields decode fine; their
    /// fields are checked later by the typed headers. [`FrameError::HeaderRefused`] (not fatal)
    /// for a header over a decoding limit.
    pub fn from_frame(frame: Frame) -> Result<Self, FrameError> {
        let parts = match frame.serialize_type {
            SerializeType::Json => json_header::decode(&frame.header)?,
            SerializeType::RocketMq => binary_header::decode(&frame.header)?,
        };
        if let Some(reason) = parts.refused {
            return Err(FrameError::HeaderRefused(Box::new(RefusedHeader {
                code: parts.code,
                opaque: parts.opaque,
                flag: parts.flag,
                serialize_type: frame.serialize_type,
                reason,
            })));
        }
        Ok(Self {
            code: parts.code,
            language: parts.language,
            version: parts.version,
            opaque: parts.opaque,
            flag: parts.flag,
            remark: parts.remark,
            ext_fields: parts.ext_fields,
            serialize_type: frame.serialize_type,
            body: frame.body,
        })
    }

    /// Appends the whole frame (prefix, header, body) to `dst`.
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLarge`] or [`FrameError::HeaderTooLarge`] if the frame would exceed the
    /// protocol limits, or a [`FrameError`] for a value the binary header cannot hold. On error
    /// `dst` is left as it was.
    pub fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        self.encode_head(dst)?;
        dst.extend_from_slice(&self.body);
        Ok(())
    }

    /// Appends the prefix and header only, with the length field already counting the body, so
    /// a writer can send [`body`](Self::body) separately (for example with a vectored write)
    /// instead of copying it into `dst`.
    ///
    /// # Errors
    ///
    /// As for [`encode`](Self::encode).
    pub fn encode_head(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        let start = dst.len();
        let result = self.write_head(dst, start);
        if result.is_err() {
            dst.truncate(start);
        }
        result
    }

    fn write_head(&self, dst: &mut BytesMut, start: usize) -> Result<(), FrameError> {
        dst.reserve(FRAME_PREFIX_LEN + self.header_size_hint());
        dst.put_bytes(0, FRAME_PREFIX_LEN);
        let header_start = dst.len();
        match self.serialize_type {
            SerializeType::Json => json_header::encode(self, dst),
            SerializeType::RocketMq => binary_header::encode(self, dst)?,
        }
        let header_len = dst.len() - header_start;
        if header_len > MAX_HEADER_LEN {
            return Err(FrameError::HeaderTooLarge(header_len));
        }
        let wire_len = FRAME_PREFIX_LEN + header_len + self.body.len();
        if wire_len > MAX_FRAME_LEN {
            return Err(FrameError::TooLarge { length: wire_len, max: MAX_FRAME_LEN });
        }
        // Both values are below 2^24 + 2^24 and so fit an i32.
        let length = i32::try_from(wire_len - 4).unwrap_or(i32::MAX);
        let word = (i32::from(self.serialize_type.code()) << 24)
            | i32::try_from(header_len).unwrap_or(0x00FF_FFFF);
        let mut prefix = [0u8; FRAME_PREFIX_LEN];
        prefix[..4].copy_from_slice(&length.to_be_bytes());
        prefix[4..].copy_from_slice(&word.to_be_bytes());
        if let Some(slot) = dst.get_mut(start..start + FRAME_PREFIX_LEN) {
            slot.copy_from_slice(&prefix);
        }
        Ok(())
    }

    fn header_size_hint(&self) -> usize {
        160 + self.remark.as_ref().map_or(0, String::len)
            + self.ext_fields.text_len()
            + 8 * self.ext_fields.len()
    }
}

/// The header fields shared by both header encodings.
#[derive(Debug)]
pub(crate) struct HeaderParts {
    pub(crate) code: i32,
    pub(crate) language: LanguageCode,
    pub(crate) version: i32,
    pub(crate) opaque: i32,
    pub(crate) flag: i32,
    pub(crate) remark: Option<String>,
    pub(crate) ext_fields: ExtFields,
    /// Set when the header exceeds a decoding limit: why. The fields above are then only what
    /// could be read cheaply (at least `code`, `opaque` and `flag`).
    pub(crate) refused: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::code::{request_code, response_code};

    fn send_request(serialize_type: SerializeType) -> RemotingCommand {
        let ext: ExtFields = [
            ("producerGroup", "PG"),
            ("topic", "T"),
            ("queueId", "3"),
            ("properties", "TAGS\u{1}a\u{2}"),
        ]
        .into_iter()
        .collect();
        RemotingCommand {
            code: request_code::SEND_MESSAGE,
            language: LanguageCode::Rust,
            version: 474,
            opaque: 77,
            flag: 0,
            remark: None,
            ext_fields: ext,
            serialize_type,
            body: Bytes::from_static(b"hello"),
        }
    }

    fn round_trip(cmd: &RemotingCommand) -> RemotingCommand {
        let mut buf = BytesMut::new();
        cmd.encode(&mut buf).expect("encodable");
        let decoded = RemotingCommand::decode(&mut buf).expect("decodable").expect("complete");
        assert!(buf.is_empty(), "exactly one frame was written");
        decoded
    }

    #[test]
    fn given_json_command_when_round_tripping_should_be_identical() {
        let cmd = send_request(SerializeType::Json);
        assert_eq!(round_trip(&cmd), cmd);
    }

    #[test]
    fn given_binary_command_when_round_tripping_should_be_identical() {
        let mut cmd = send_request(SerializeType::RocketMq);
        cmd.remark = Some("détail".into());
        assert_eq!(round_trip(&cmd), cmd);
    }

    #[test]
    fn given_request_when_building_response_should_echo_opaque_and_type() {
        for st in [SerializeType::Json, SerializeType::RocketMq] {
            let req = send_request(st);
            let resp =
                RemotingCommand::response_to(&req, response_code::SYSTEM_ERROR, Some("x".into()));
            assert_eq!(resp.opaque, 77, "responses echo the request opaque");
            assert_eq!(resp.serialize_type, st, "replies use the request's serialize type");
            assert!(resp.is_response() && !resp.is_oneway());
            assert_eq!(resp.language, LanguageCode::Java);
            assert_eq!(resp.version, BROKER_VERSION);
        }
        let notify = RemotingCommand::oneway_request(request_code::NOTIFY_CONSUMER_IDS_CHANGED, 5);
        assert!(notify.is_oneway() && !notify.is_response());
    }

    #[test]
    fn given_body_when_encoding_head_only_should_count_body_in_length() {
        let cmd = send_request(SerializeType::Json);
        let mut head = BytesMut::new();
        cmd.encode_head(&mut head).expect("encodable");
        let mut full = BytesMut::new();
        cmd.encode(&mut full).expect("encodable");
        assert_eq!(&full[..head.len()], &head[..], "head is a prefix of the full frame");
        assert_eq!(full.len(), head.len() + cmd.body.len());
    }

    #[test]
    fn given_oversized_body_when_encoding_should_fail_and_leave_buffer_unchanged() {
        let cmd = send_request(SerializeType::Json).with_body(vec![0u8; MAX_FRAME_LEN]);
        let mut buf = BytesMut::from(&b"keep"[..]);
        assert!(matches!(cmd.encode(&mut buf), Err(FrameError::TooLarge { .. })));
        assert_eq!(&buf[..], b"keep", "a failed encode must not leave partial output");
    }

    #[test]
    fn given_language_names_and_codes_should_map_both_ways() {
        for l in LanguageCode::ALL {
            assert_eq!(LanguageCode::from_name(l.name()), l);
            assert_eq!(LanguageCode::from_code(l.code()), l);
        }
        assert_eq!(LanguageCode::from_name("COBOL"), LanguageCode::Other);
        assert_eq!(LanguageCode::from_name("rust"), LanguageCode::Rust);
        assert_eq!(LanguageCode::from_code(200), LanguageCode::Other);
        assert_eq!(SerializeType::from_name("ROCKETMQ"), Some(SerializeType::RocketMq));
        assert_eq!(SerializeType::from_code(2), None);
    }
}
