//! [`tokio_util::codec`] adapter over [`RemotingCommand::decode`] and
//! [`RemotingCommand::encode`]; all protocol logic lives in the pure functions.
//!
//! Use with `tokio_util::codec::Framed::new(socket, RemotingCodec::new())`. A decode error is
//! fatal: close the connection.

use std::io;

use bytes::BytesMut;
use thiserror::Error;
use tokio_util::codec::{Decoder, Encoder};

use crate::remoting::command::RemotingCommand;
use crate::remoting::error::FrameError;

/// Failure of the framed transport.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The socket failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The peer sent bytes that are not the remoting protocol, or a command cannot be encoded.
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// Stateless codec for remoting commands.
#[derive(Debug, Clone, Copy, Default)]
pub struct RemotingCodec {
    _private: (),
}

impl RemotingCodec {
    /// A codec; it holds no state, so one per connection costs nothing.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

impl Decoder for RemotingCodec {
    type Item = RemotingCommand;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<RemotingCommand>, CodecError> {
        Ok(RemotingCommand::decode(src)?)
    }
}

impl Encoder<RemotingCommand> for RemotingCodec {
    type Error = CodecError;

    fn encode(&mut self, item: RemotingCommand, dst: &mut BytesMut) -> Result<(), CodecError> {
        Ok(item.encode(dst)?)
    }
}

impl Encoder<&RemotingCommand> for RemotingCodec {
    type Error = CodecError;

    fn encode(&mut self, item: &RemotingCommand, dst: &mut BytesMut) -> Result<(), CodecError> {
        Ok(item.encode(dst)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::code::request_code;

    #[test]
    fn given_two_commands_in_one_buffer_when_decoding_should_yield_both_in_order() {
        let mut codec = RemotingCodec::new();
        let mut buf = BytesMut::new();
        let first = RemotingCommand::request(request_code::HEART_BEAT, 1).with_body(&b"{}"[..]);
        let second = RemotingCommand::oneway_request(request_code::UPDATE_CONSUMER_OFFSET, 2);
        codec.encode(&first, &mut buf).expect("encodable");
        codec.encode(second.clone(), &mut buf).expect("encodable");
        assert_eq!(codec.decode(&mut buf).expect("valid"), Some(first));
        assert_eq!(codec.decode(&mut buf).expect("valid"), Some(second));
        assert_eq!(codec.decode(&mut buf).expect("valid"), None, "buffer drained");
    }

    #[test]
    fn given_garbage_when_decoding_should_return_a_frame_error() {
        let mut codec = RemotingCodec::new();
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0][..]);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(CodecError::Frame(FrameError::NegativeLength(-1)))
        ));
    }
}
