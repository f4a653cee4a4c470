//! SQL92 subscription filters: RocketMQ's selector grammar, parsed by hand and evaluated on a
//! message's properties.
//!
//! A consumer that subscribes with `MessageSelector.bySql("a > 5 AND region = 'east'")` asks
//! the broker to deliver only the messages whose *properties* satisfy the expression. The
//! grammar and the evaluation rules below are those of RocketMQ 5's `filter` module
//! (`SelectorParser.jj`, `ComparisonExpression`, `UnaryExpression`, `LogicExpression`,
//! `ConstantExpression`), itself a trimmed copy of ActiveMQ's JMS selectors. RocketMQ's quirks
//! are kept on purpose, because a user's subscription must select the same messages on baiji as
//! on a RocketMQ broker.
//!
//! # Grammar
//!
//! ```text
//! selector   := or                                   (tokens after it are ignored, see below)
//! or         := and ( OR and )*
//! and        := equality ( AND equality )*
//! equality   := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
//! comparison := unary ( ('>' | '>=' | '<' | '<=') unary
//!                     | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
//!                     | [NOT] BETWEEN unary AND unary
//!                     | [NOT] IN '(' string ( ',' string )* ')' )*
//! unary      := '+' unary | '-' unary | NOT unary | primary
//! primary    := literal | identifier | '(' or ')'
//! literal    := 'string' | decimal | float | TRUE | FALSE | NULL
//! ```
//!
//! Keywords are case-insensitive; identifiers are `[A-Za-z_$][A-Za-z0-9_$]*` (no dots);
//! strings are single-quoted with `''` for a quote; `123` and `123L` are integers (`int` when
//! they fit, else `long`), `1.5`, `.5`, `5.`, `1e3` are doubles; `--` comments run to a line
//! end and `/* */` comments are skipped. Like RocketMQ's generated parser, which has no `<EOF>`
//! rule, parsing stops at the first token that cannot continue the expression: `a = 1 b = 2`
//! selects `a = 1` (the token after the expression must still be a valid token).
//!
//! # Semantics
//!
//! Property values are strings; a missing property is `NULL`. Evaluation is three-valued
//! (`TRUE`, `FALSE`, `NULL`) and a message matches only when the result is `TRUE`.
//!
//! | construct | rule |
//! |---|---|
//! | `AND`, `OR`, `NOT` | SQL's three-valued logic, evaluated left to right with short-circuit |
//! | `x > y` (and `>=`, `<`, `<=`) | `NULL` if either side is; a string compared with a number is parsed as that number's type (`int`, `long`, `double`); two strings are both parsed as doubles |
//! | `x = y`, `x <> y` | `NULL = NULL` is `TRUE`; `NULL = v` is `NULL`, `v = NULL` is `FALSE` (so `'v' <> prop` matches when `prop` is missing); mixed types convert as above; a string against a boolean is `Boolean.valueOf` (only `true`, any case, is true) |
//! | `IS [NOT] NULL` | whether the property is missing |
//! | `BETWEEN lo AND hi` | `x >= lo AND x <= hi`; `NOT BETWEEN` is `x < lo OR x > hi` |
//! | `IN ('a', ...)` | only on a property; `NULL` when it is missing |
//! | `CONTAINS`, `STARTSWITH`, `ENDSWITH` | `FALSE` when the property is missing, not a string, or the pattern is empty, with or without `NOT` |
//! | a property alone (`a AND ...`) | a string is never a boolean: `FALSE`, or `NULL` when missing |
//!
//! A conversion that fails (`a > 5` with `a = 'abc'`, or `a = 5` with `a = '5.5'`, since `5` is
//! an `int`) makes RocketMQ's evaluation throw; the broker catches it and the message does not
//! match, *whatever the rest of the expression says*. [`Sql92::matches`] does the same. Checks
//! RocketMQ makes while parsing are made here too: `>`-style comparisons refuse string, boolean
//! and `NULL` literals; `= NULL` is refused (use `IS NULL`); `IN` needs a property on its
//! left; `BETWEEN` constants must be non-null and in order; a float literal must lie in
//! `[4.9E-324, 1.8E308]` (so RocketMQ refuses `0.0`, and so does baiji).
//!
//! # Limits
//!
//! RocketMQ has none; baiji refuses expressions longer than [`MAX_EXPRESSION_LEN`] bytes or
//! nested deeper than [`MAX_DEPTH`] levels (parentheses, `NOT`, signs and chained comparisons
//! each count), so neither parsing nor evaluation can exhaust the stack, and expressions that
//! refer to properties more than [`MAX_PROPERTY_REFERENCES`] times, so that what one record
//! costs is bounded. A record's properties are parsed once into a [`PropertyView`] (one
//! allocation); each reference is then a binary search, and numbers are parsed from the
//! borrowed text.
//!
//! # Layout
//!
//! A small compiler: this file holds the API ([`Sql92`], [`Sql92Error`]) and the syntax tree;
//! `lex.rs` cuts the text into tokens, `parse.rs` builds and checks the tree, `eval.rs` walks it
//! over a message's properties ([`PropertyView`]); `tests.rs` has one test per rule above.

use std::cmp::Ordering;

use thiserror::Error;

mod eval;
mod lex;
mod parse;
#[cfg(test)]
mod tests;

pub use eval::PropertyView;

/// The longest expression accepted, in bytes.
pub const MAX_EXPRESSION_LEN: usize = 16 * 1024;

/// The deepest nesting accepted (see the module docs).
pub const MAX_DEPTH: usize = 64;

/// The most property references an expression may make (each `a` of `a = 1 OR a = 2` counts).
/// Real selectors make a handful; the bound keeps one record's evaluation cost bounded too.
pub const MAX_PROPERTY_REFERENCES: usize = 256;

/// Why an expression was refused. The text starts as RocketMQ's `MQFilterException` message
/// does (`Invalid MessageSelector. `) and then names the error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Sql92Error {
    /// Longer than [`MAX_EXPRESSION_LEN`].
    #[error("Invalid MessageSelector. The expression is {len} bytes long, more than {max}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("Invalid MessageSelector. The expression nests deeper than {max} levels")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// More than [`MAX_PROPERTY_REFERENCES`] property references.
    #[error("Invalid MessageSelector. The expression refers to properties more than {max} times")]
    TooManyReferences {
        /// The limit.
        max: usize,
    },
    /// A character sequence that is no token.
    #[error("Invalid MessageSelector. Lexical error at byte {at}: {what}")]
    Lexical {
        /// Byte offset in the expression.
        at: usize,
        /// What was found.
        what: String,
    },
    /// A token where the grammar does not allow it.
    #[error("Invalid MessageSelector. Encountered {found} at byte {at}, expected {expected}")]
    Syntax {
        /// Byte offset in the expression.
        at: usize,
        /// The token found.
        found: String,
        /// What the grammar allows there.
        expected: &'static str,
    },
    /// Well-formed but refused by RocketMQ's checks (types, literals, `BETWEEN` bounds).
    #[error("Invalid MessageSelector. {0}")]
    Invalid(String),
}

/// A compiled SQL92 expression (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Sql92 {
    source: Box<str>,
    root: Expr,
}

impl Sql92 {
    /// Parses and checks `expression`.
    ///
    /// # Errors
    ///
    /// [`Sql92Error`] naming what is wrong, for every expression RocketMQ refuses.
    ///
    /// # Examples
    ///
    /// ```
    /// use baiji::remoting::sql92::Sql92;
    ///
    /// let f = Sql92::compile("a > 5 AND region IN ('east', 'west')").expect("valid");
    /// assert!(f.matches(&|k| match k { "a" => Some("7"), "region" => Some("east"), _ => None }));
    /// assert!(!f.matches(&|_| None), "missing properties are NULL, never TRUE");
    /// assert!(Sql92::compile("a >").is_err());
    /// ```
    pub fn compile(expression: &str) -> Result<Self, Sql92Error> {
        let root = parse::parse(expression)?;
        Ok(Self { source: expression.into(), root })
    }

    /// The expression as written.
    #[must_use]
    pub fn expression(&self) -> &str {
        &self.source
    }

    /// Whether a message whose property `name` has the value `get(name)` matches: the
    /// expression evaluates to `TRUE` without a failed conversion.
    #[must_use]
    pub fn matches<'a>(&'a self, get: &dyn Fn(&str) -> Option<&'a str>) -> bool {
        eval::matches(&self.root, get)
    }

    /// [`matches`](Self::matches) on a properties string (`key 0x01 value 0x02 ...`), with
    /// `extra` pairs (the broker's own, such as `CLUSTER`) taking precedence. A key present
    /// twice has its last value, as in Java's `HashMap`. The strings are parsed once (see
    /// [`PropertyView`]); to test several expressions against one record, build the view once
    /// and call [`matches_view`](Self::matches_view).
    #[must_use]
    pub fn matches_properties(&self, props: &[u8], extra: &[u8]) -> bool {
        self.matches_view(&PropertyView::new(props, extra))
    }

    /// [`matches`](Self::matches) on a record's properties parsed once: each property
    /// reference is a binary search of `view`.
    #[must_use]
    pub fn matches_view(&self, view: &PropertyView<'_>) -> bool {
        self.matches(&|k| view.get(k))
    }
}

// ---------------------------------------------------------------------------------------------
// The syntax tree, which `parse` builds and `eval` walks
// ---------------------------------------------------------------------------------------------

/// A literal. Numbers keep Java's types because conversions depend on them.
#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(Box<str>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rel {
    Gt,
    Ge,
    Lt,
    Le,
}

impl Rel {
    fn holds(self, o: Ordering) -> bool {
        match self {
            Self::Gt => o == Ordering::Greater,
            Self::Ge => o != Ordering::Less,
            Self::Lt => o == Ordering::Less,
            Self::Le => o != Ordering::Greater,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TextOp {
    Contains,
    StartsWith,
    EndsWith,
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Lit(Lit),
    Prop(Box<str>),
    /// A property used as a boolean (`UnaryExpression.createBooleanCast`).
    BoolCast(Box<str>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    /// `a AND b AND c`: the chain flattened, evaluated left to right as Java's nested pairs.
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Rel(Rel, Box<Expr>, Box<Expr>),
    /// `=`; `IS NULL` is `x = NULL`.
    Eq(Box<Expr>, Box<Expr>),
    /// `[NOT] BETWEEN`: Java's `x >= lo AND x <= hi` (`x < lo OR x > hi`) with `x` evaluated
    /// once, which gives the same result because evaluation has no side effects.
    Between {
        not: bool,
        value: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
    },
    /// `[NOT] IN`, the list sorted for binary search.
    In {
        not: bool,
        prop: Box<str>,
        list: Vec<Box<str>>,
    },
    Text {
        op: TextOp,
        not: bool,
        value: Box<Expr>,
        pattern: Box<str>,
    },
}

impl Expr {
    /// Java's `instanceof BooleanExpression`.
    fn is_boolean(&self) -> bool {
        !matches!(
            self,
            Self::Prop(_)
                | Self::Neg(_)
                | Self::Lit(Lit::Int(_) | Lit::Long(_) | Lit::Double(_) | Lit::Str(_))
        )
    }

    /// For error texts, as Java's `toString` would print the operand.
    fn describe(&self) -> String {
        match self {
            Self::Lit(Lit::Null) => "NULL".into(),
            Self::Lit(Lit::Bool(b)) => if *b { "TRUE" } else { "FALSE" }.into(),
            Self::Lit(Lit::Int(i)) => i.to_string(),
            Self::Lit(Lit::Long(l)) => l.to_string(),
            Self::Lit(Lit::Double(d)) => d.to_string(),
            Self::Lit(Lit::Str(s)) => format!("'{}'", s.replace('\'', "''")),
            Self::Prop(p) | Self::BoolCast(p) => p.to_string(),
            _ => "(expression)".into(),
        }
    }
}
