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

use crate::remoting::code::response_code;
use crate::remoting::error::{FrameError, RefusedHeader};
use crate::remoting::ext::ExtFields;
use crate::remoting::frame::{
    decode_frame, Frame, FRAME_PREFIX_LEN, MAX_FRAME_LEN, MAX_HEADER_LEN,
};
use crate::remoting::header_codec::{self, HeaderRef, LanguageCode, SerializeType};

/// The `version` baiji puts in every command it sends: `V5_3_1` of RocketMQ's `MQVersion`.
///
/// Clients read it from responses: the Rust client refuses SQL92 subscriptions below 232 and the
/// broker-side version gates (`maxReconsumeTimes`, standard route JSON) are all far below.
pub const BROKER_VERSION: i32 = 475;

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
        let parts = header_codec::decode(frame.serialize_type, &frame.header)?;
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
        header_codec::encode(self.serialize_type, &self.header_ref(), dst)?;
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

    /// The header fields, borrowed for the encoders.
    pub(crate) fn header_ref(&self) -> HeaderRef<'_> {
        HeaderRef {
            code: self.code,
            language: self.language,
            version: self.version,
            opaque: self.opaque,
            flag: self.flag,
            remark: self.remark.as_deref(),
            ext_fields: &self.ext_fields,
        }
    }

    fn header_size_hint(&self) -> usize {
        160 + self.remark.as_ref().map_or(0, String::len)
            + self.ext_fields.text_len()
            + 8 * self.ext_fields.len()
    }
}

impl RefusedHeader {
    /// The error answer (`SYSTEM_ERROR`, the reason as remark), or `None` when the command was a
    /// response or a one-way request, which are never answered.
    #[must_use]
    pub fn response(&self) -> Option<RemotingCommand> {
        let request = RemotingCommand {
            code: self.code,
            opaque: self.opaque,
            flag: self.flag,
            serialize_type: self.serialize_type,
            ..RemotingCommand::default()
        };
        (!request.is_response() && !request.is_oneway()).then(|| {
            RemotingCommand::response_to(
                &request,
                response_code::SYSTEM_ERROR,
                Some(self.reason.clone()),
            )
        })
    }
}

#[cfg(test)]
mod tests;
