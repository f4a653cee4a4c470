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
mod tests;
