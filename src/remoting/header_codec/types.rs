//! [`SerializeType`] and [`LanguageCode`], the two enums a header carries. This file imports
//! nothing, so that every other file of `remoting` (`error.rs`'s
//! [`RefusedHeader`](crate::remoting::RefusedHeader) among them) can name them without
//! closing a circle.

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

#[cfg(test)]
mod tests;
