//! Tag subscriptions: parsing expressions and matching messages.
//!
//! An expression is `*` (or empty) for everything, or tag names joined by `||`. Names are
//! trimmed and empty pieces dropped, so `"TagA || TagB"` means `TagA` or `TagB`.
//!
//! RocketMQ's broker filters by `codeSet` (the tags' `String.hashCode`) alone. That breaks for
//! rocketmq-client-rust 1.0.0, which was measured sending the trimmed names in `tagsSet` but the
//! hashes of the *untrimmed* pieces (`"TagA "`, `" TagB"`) in `codeSet` for `"TagA || TagB"`.
//! [`TagMatcher::for_subscription`] therefore matches by the names in `tagsSet` when there are
//! any and falls back to `codeSet` otherwise; clients re-check names, so a hash match that is a
//! collision is harmless either way.

use crate::remoting::body::{ExpressionType, SubscriptionData};
use crate::remoting::properties::{self, tag_hash};

/// The expression that subscribes to every message.
pub const SUB_ALL: &str = "*";

/// A parsed tag expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriptionExpr {
    /// Every message, tagged or not.
    All,
    /// Messages whose tag is one of these trimmed, non-empty names (in expression order,
    /// without duplicates).
    Tags(Vec<String>),
}

impl SubscriptionExpr {
    /// Parses an expression. `*`, an empty string and an expression with no non-empty tag all
    /// mean [`SubscriptionExpr::All`], as in Java's `FilterAPI`.
    ///
    /// # Examples
    ///
    /// ```
    /// use baiji::remoting::subscription::SubscriptionExpr;
    ///
    /// assert_eq!(SubscriptionExpr::parse(" * "), SubscriptionExpr::All);
    /// assert_eq!(
    ///     SubscriptionExpr::parse("TagA || TagB"),
    ///     SubscriptionExpr::Tags(vec!["TagA".into(), "TagB".into()]),
    /// );
    /// ```
    #[must_use]
    pub fn parse(expression: &str) -> Self {
        let expression = expression.trim();
        if expression.is_empty() || expression == SUB_ALL {
            return Self::All;
        }
        // Duplicates are dropped through a set (linear), keeping the first occurrence's order.
        let mut seen = std::collections::HashSet::new();
        let tags: Vec<String> = expression
            .split("||")
            .map(str::trim)
            .filter(|t| !t.is_empty() && seen.insert(*t))
            .map(str::to_owned)
            .collect();
        if tags.is_empty() {
            Self::All
        } else {
            Self::Tags(tags)
        }
    }

    /// `String.hashCode` of each tag: the `codeSet` a correct client sends.
    #[must_use]
    pub fn codes(&self) -> Vec<i32> {
        match self {
            Self::All => Vec::new(),
            Self::Tags(tags) => tags.iter().map(|t| tag_hash(t)).collect(),
        }
    }
}

/// Broker-side filter of one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagMatcher {
    /// Every message matches.
    All,
    /// Messages whose tag equals one of these names.
    Names(Vec<String>),
    /// Messages whose tags-code is one of these hashes.
    Codes(Vec<i32>),
}

impl TagMatcher {
    /// The matcher for a parsed expression.
    #[must_use]
    pub fn from_expr(expr: SubscriptionExpr) -> Self {
        match expr {
            SubscriptionExpr::All => Self::All,
            SubscriptionExpr::Tags(tags) => Self::Names(tags),
        }
    }

    /// The matcher for a subscription's parts, following the rule in the module docs:
    /// `*`/empty `sub_string` → all; else names from `tags_set` (trimmed, `*` meaning all);
    /// else `code_set`; else the names parsed from `sub_string`.
    #[must_use]
    pub fn from_parts(sub_string: &str, tags_set: &[String], code_set: &[i32]) -> Self {
        let sub = sub_string.trim();
        if sub.is_empty() || sub == SUB_ALL {
            return Self::All;
        }
        let names: Vec<String> = tags_set
            .iter()
            .map(|t| t.trim())
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        if names.iter().any(|t| t == SUB_ALL) {
            return Self::All;
        }
        if !names.is_empty() {
            return Self::Names(names);
        }
        if !code_set.is_empty() {
            return Self::Codes(code_set.to_vec());
        }
        Self::from_expr(SubscriptionExpr::parse(sub))
    }

    /// The matcher for a heartbeat subscription. Non-TAG expressions (SQL92) match every tag:
    /// the broker evaluates them on properties ([`crate::remoting::sql92`]).
    #[must_use]
    pub fn for_subscription(sub: &SubscriptionData) -> Self {
        if sub.expression_type != ExpressionType::Tag {
            return Self::All;
        }
        Self::from_parts(&sub.sub_string, &sub.tags_set, &sub.code_set)
    }

    /// Whether a message with tag `tag` (`None` when it has no `TAGS` property) matches.
    /// Untagged messages match only [`TagMatcher::All`].
    #[must_use]
    pub fn matches_tag(&self, tag: Option<&str>) -> bool {
        match (self, tag) {
            (Self::All, _) => true,
            (_, None) => false,
            (Self::Names(names), Some(tag)) => names.iter().any(|n| n == tag),
            (Self::Codes(codes), Some(tag)) => codes.contains(&tag_hash(tag)),
        }
    }

    /// Whether a message with this properties string matches.
    #[must_use]
    pub fn matches_properties(&self, props: &[u8]) -> bool {
        match self {
            Self::All => true,
            _ => self.matches_tag(properties::find(props, properties::TAGS)),
        }
    }
}

#[cfg(test)]
mod tests;
