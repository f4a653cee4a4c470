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
//! each count), so neither parsing nor evaluation can exhaust the stack. Evaluation allocates
//! nothing: property values are found by scanning the properties string in place and numbers
//! are parsed from the borrowed text.

use std::cmp::Ordering;

use thiserror::Error;

use crate::remoting::properties;

/// The longest expression accepted, in bytes.
pub const MAX_EXPRESSION_LEN: usize = 16 * 1024;

/// The deepest nesting accepted (see the module docs).
pub const MAX_DEPTH: usize = 64;

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
        if expression.len() > MAX_EXPRESSION_LEN {
            return Err(Sql92Error::TooLong { len: expression.len(), max: MAX_EXPRESSION_LEN });
        }
        let mut p = Parser { lex: Lexer { src: expression, pos: 0 }, ahead: Vec::new(), depth: 0 };
        let e = p.or_expr()?;
        let root = as_boolean(e)?;
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
        matches!(eval(&self.root, get), Ok(Val::Bool(true)))
    }

    /// [`matches`](Self::matches) on a properties string (`key 0x01 value 0x02 ...`), with
    /// `extra` pairs (the broker's own, such as `CLUSTER`) taking precedence. A key present
    /// twice has its last value, as in Java's `HashMap`.
    #[must_use]
    pub fn matches_properties(&self, props: &[u8], extra: &[u8]) -> bool {
        self.matches(&|k| last_value(extra, k).or_else(|| last_value(props, k)))
    }
}

/// The last well-formed value of `key` (what [`properties::iter`] would yield last for it),
/// found by comparing key bytes in place: only a matching value is checked for UTF-8.
fn last_value<'a>(props: &'a [u8], key: &str) -> Option<&'a str> {
    let key = key.as_bytes();
    let mut found = None;
    for segment in props.split(|&b| b == properties::PROPERTY_SEPARATOR) {
        let Some(sep) = segment.iter().position(|&b| b == properties::NAME_VALUE_SEPARATOR) else {
            continue;
        };
        let (k, v) = (segment.get(..sep), segment.get(sep + 1..));
        if let (Some(k), Some(v)) = (k, v) {
            if k == key && !v.is_empty() {
                if let Ok(v) = std::str::from_utf8(v) {
                    found = Some(v);
                }
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Expressions
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

/// `asBooleanExpression`: booleans pass, a property is cast, anything else is refused.
fn as_boolean(e: Expr) -> Result<Expr, Sql92Error> {
    match e {
        Expr::Prop(p) => Ok(Expr::BoolCast(p)),
        e if e.is_boolean() => Ok(e),
        e => Err(Sql92Error::Invalid(format!(
            "Expression will not result in a boolean value: {}",
            e.describe()
        ))),
    }
}

/// `checkLessThanOperand`: only numbers, properties and signs may be ordered.
fn check_orderable(e: &Expr) -> Result<(), Sql92Error> {
    let ok = match e {
        Expr::Lit(l) => matches!(l, Lit::Int(_) | Lit::Long(_) | Lit::Double(_)),
        e => !e.is_boolean(),
    };
    if ok {
        Ok(())
    } else {
        Err(Sql92Error::Invalid(format!("Value '{}' cannot be compared.", e.describe())))
    }
}

/// `checkEqualOperand` and `checkEqualOperandCompatability`.
fn check_equal(l: &Expr, r: &Expr) -> Result<(), Sql92Error> {
    for e in [l, r] {
        if matches!(e, Expr::Lit(Lit::Null)) {
            return Err(Sql92Error::Invalid(format!("'{}' cannot be compared.", e.describe())));
        }
    }
    if let (Expr::Lit(Lit::Bool(_)), Expr::Lit(rl)) = (l, r) {
        if !matches!(rl, Lit::Bool(_)) {
            return Err(Sql92Error::Invalid(format!(
                "'{}' cannot be compared with '{}'",
                l.describe(),
                r.describe()
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'s> {
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    Contains,
    StartsWith,
    EndsWith,
    Decimal(&'s str),
    Float(&'s str),
    /// The text between the quotes, `''` not yet unescaped.
    Str(&'s str),
    Id(&'s str),
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
    End,
}

impl Tok<'_> {
    fn describe(self) -> String {
        let symbol = match self {
            Tok::Decimal(s) | Tok::Float(s) | Tok::Id(s) => return format!("\"{s}\""),
            Tok::Str(s) => return format!("\"'{s}'\""),
            Tok::End => return "<EOF>".into(),
            Tok::Eq => "=",
            Tok::Ne => "<>",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::Comma => ",",
            Tok::Plus => "+",
            Tok::Minus => "-",
            keyword => return format!("{keyword:?}").to_uppercase(),
        };
        format!("\"{symbol}\"")
    }
}

const KEYWORDS: [(&str, Tok<'static>); 12] = [
    ("NOT", Tok::Not),
    ("AND", Tok::And),
    ("OR", Tok::Or),
    ("BETWEEN", Tok::Between),
    ("IN", Tok::In),
    ("TRUE", Tok::True),
    ("FALSE", Tok::False),
    ("NULL", Tok::Null),
    ("IS", Tok::Is),
    ("CONTAINS", Tok::Contains),
    ("STARTSWITH", Tok::StartsWith),
    ("ENDSWITH", Tok::EndsWith),
];

struct Lexer<'s> {
    src: &'s str,
    pos: usize,
}

impl<'s> Lexer<'s> {
    fn byte(&self, at: usize) -> Option<u8> {
        self.src.as_bytes().get(at).copied()
    }

    fn digits_from(&self, mut at: usize) -> usize {
        while self.byte(at).is_some_and(|b| b.is_ascii_digit()) {
            at += 1;
        }
        at
    }

    /// The end of an exponent (`E [+-] digits`) starting at `at`, if there is a complete one.
    fn exponent_from(&self, at: usize) -> Option<usize> {
        if !matches!(self.byte(at), Some(b'e' | b'E')) {
            return None;
        }
        let mut i = at + 1;
        if matches!(self.byte(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let end = self.digits_from(i);
        (end > i).then_some(end)
    }

    /// Skips white space and comments. A `--` comment needs a line end, as in RocketMQ's
    /// grammar; without one the dashes are minus signs.
    fn skip_blank(&mut self) {
        loop {
            match (self.byte(self.pos), self.byte(self.pos + 1)) {
                (Some(b' ' | b'\t' | b'\n' | b'\r' | 0x0c), _) => self.pos += 1,
                (Some(b'-'), Some(b'-')) => {
                    let rest = &self.src.as_bytes()[self.pos..];
                    match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                        Some(i) => self.pos += i + 1,
                        None => return,
                    }
                }
                (Some(b'/'), Some(b'*')) => {
                    match self.src.get(self.pos + 2..).and_then(|r| r.find("*/")) {
                        Some(i) => self.pos += 2 + i + 2,
                        None => return,
                    }
                }
                _ => return,
            }
        }
    }

    fn next(&mut self) -> Result<(usize, Tok<'s>), Sql92Error> {
        self.skip_blank();
        let start = self.pos;
        let Some(c) = self.byte(start) else { return Ok((start, Tok::End)) };
        let single = |t| (1, t);
        let (len, tok) = match c {
            b'0'..=b'9' => {
                let int_end = self.digits_from(start);
                if self.byte(int_end) == Some(b'.') {
                    let frac_end = self.digits_from(int_end + 1);
                    let end = self.exponent_from(frac_end).unwrap_or(frac_end);
                    (end - start, Tok::Float(&self.src[start..end]))
                } else if let Some(end) = self.exponent_from(int_end) {
                    (end - start, Tok::Float(&self.src[start..end]))
                } else if c == b'0' {
                    (1, Tok::Decimal("0"))
                } else {
                    let end = if matches!(self.byte(int_end), Some(b'l' | b'L')) {
                        int_end + 1
                    } else {
                        int_end
                    };
                    (end - start, Tok::Decimal(&self.src[start..end]))
                }
            }
            b'.' if self.byte(start + 1).is_some_and(|b| b.is_ascii_digit()) => {
                let frac_end = self.digits_from(start + 1);
                let end = self.exponent_from(frac_end).unwrap_or(frac_end);
                (end - start, Tok::Float(&self.src[start..end]))
            }
            b'\'' => {
                let bytes = self.src.as_bytes();
                let mut i = start + 1;
                loop {
                    match bytes.get(i) {
                        None => {
                            return Err(Sql92Error::Lexical {
                                at: start,
                                what: "a string literal without its closing quote".into(),
                            })
                        }
                        Some(b'\'') if bytes.get(i + 1) == Some(&b'\'') => i += 2,
                        Some(b'\'') => break,
                        Some(_) => i += 1,
                    }
                }
                (i + 1 - start, Tok::Str(&self.src[start + 1..i]))
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'$' => {
                let mut end = start + 1;
                while self
                    .byte(end)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
                {
                    end += 1;
                }
                let word = &self.src[start..end];
                let tok = KEYWORDS
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(word))
                    .map_or(Tok::Id(word), |(_, t)| *t);
                (end - start, tok)
            }
            b'=' => single(Tok::Eq),
            b'<' => match self.byte(start + 1) {
                Some(b'>') => (2, Tok::Ne),
                Some(b'=') => (2, Tok::Le),
                _ => single(Tok::Lt),
            },
            b'>' => match self.byte(start + 1) {
                Some(b'=') => (2, Tok::Ge),
                _ => single(Tok::Gt),
            },
            b'(' => single(Tok::LParen),
            b')' => single(Tok::RParen),
            b',' => single(Tok::Comma),
            b'+' => single(Tok::Plus),
            b'-' => single(Tok::Minus),
            _ => {
                let ch = self.src.get(start..).and_then(|r| r.chars().next()).unwrap_or('?');
                return Err(Sql92Error::Lexical { at: start, what: format!("unexpected {ch:?}") });
            }
        };
        self.pos = start + len;
        Ok((start, tok))
    }
}

// ---------------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------------

struct Parser<'s> {
    lex: Lexer<'s>,
    /// Tokens read ahead (at most two: `NOT BETWEEN`, `IS NOT`).
    ahead: Vec<(usize, Tok<'s>)>,
    /// Current nesting (see [`MAX_DEPTH`]).
    depth: usize,
}

impl<'s> Parser<'s> {
    fn peek_nth(&mut self, n: usize) -> Result<(usize, Tok<'s>), Sql92Error> {
        while self.ahead.len() <= n {
            let t = self.lex.next()?;
            self.ahead.push(t);
        }
        Ok(self.ahead[n])
    }

    fn peek(&mut self) -> Result<Tok<'s>, Sql92Error> {
        Ok(self.peek_nth(0)?.1)
    }

    fn bump(&mut self) -> Result<(usize, Tok<'s>), Sql92Error> {
        let t = self.peek_nth(0)?;
        self.ahead.remove(0);
        Ok(t)
    }

    fn expect(&mut self, want: Tok<'static>, expected: &'static str) -> Result<(), Sql92Error> {
        let (at, t) = self.bump()?;
        if t == want {
            Ok(())
        } else {
            Err(Sql92Error::Syntax { at, found: t.describe(), expected })
        }
    }

    fn enter(&mut self) -> Result<(), Sql92Error> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(Sql92Error::TooDeep { max: MAX_DEPTH })
        } else {
            Ok(())
        }
    }

    fn string(&mut self) -> Result<Box<str>, Sql92Error> {
        match self.bump()? {
            (_, Tok::Str(raw)) => Ok(raw.replace("''", "'").into_boxed_str()),
            (at, t) => Err(Sql92Error::Syntax { at, found: t.describe(), expected: "a string" }),
        }
    }

    fn or_expr(&mut self) -> Result<Expr, Sql92Error> {
        let first = self.and_expr()?;
        if self.peek()? != Tok::Or {
            return Ok(first);
        }
        let mut terms = vec![as_boolean(first)?];
        while self.peek()? == Tok::Or {
            self.bump()?;
            let next = self.and_expr()?;
            terms.push(as_boolean(next)?);
        }
        Ok(Expr::Or(terms))
    }

    fn and_expr(&mut self) -> Result<Expr, Sql92Error> {
        let first = self.equality()?;
        if self.peek()? != Tok::And {
            return Ok(first);
        }
        let mut terms = vec![as_boolean(first)?];
        while self.peek()? == Tok::And {
            self.bump()?;
            let next = self.equality()?;
            terms.push(as_boolean(next)?);
        }
        Ok(Expr::And(terms))
    }

    fn equality(&mut self) -> Result<Expr, Sql92Error> {
        let saved = self.depth;
        let result = self.equality_chain();
        self.depth = saved;
        result
    }

    fn equality_chain(&mut self) -> Result<Expr, Sql92Error> {
        let mut left = self.comparison()?;
        loop {
            match self.peek()? {
                Tok::Eq | Tok::Ne => {
                    let (_, op) = self.bump()?;
                    self.enter()?;
                    let right = self.comparison()?;
                    check_equal(&left, &right)?;
                    let eq = Expr::Eq(Box::new(left), Box::new(right));
                    left = if op == Tok::Ne { Expr::Not(Box::new(eq)) } else { eq };
                }
                Tok::Is => {
                    self.bump()?;
                    self.enter()?;
                    let not = match self.bump()? {
                        (_, Tok::Null) => false,
                        (_, Tok::Not) => {
                            self.expect(Tok::Null, "NULL")?;
                            true
                        }
                        (at, t) => {
                            return Err(Sql92Error::Syntax {
                                at,
                                found: t.describe(),
                                expected: "NULL or NOT NULL",
                            })
                        }
                    };
                    let eq = Expr::Eq(Box::new(left), Box::new(Expr::Lit(Lit::Null)));
                    left = if not { Expr::Not(Box::new(eq)) } else { eq };
                }
                _ => return Ok(left),
            }
        }
    }

    fn comparison(&mut self) -> Result<Expr, Sql92Error> {
        let saved = self.depth;
        let result = self.comparison_chain();
        self.depth = saved;
        result
    }

    fn comparison_chain(&mut self) -> Result<Expr, Sql92Error> {
        let mut left = self.unary()?;
        loop {
            let (at, t) = self.peek_nth(0)?;
            let rel = match t {
                Tok::Gt => Some(Rel::Gt),
                Tok::Ge => Some(Rel::Ge),
                Tok::Lt => Some(Rel::Lt),
                Tok::Le => Some(Rel::Le),
                _ => None,
            };
            if let Some(rel) = rel {
                self.bump()?;
                self.enter()?;
                let right = self.unary()?;
                check_orderable(&left)?;
                check_orderable(&right)?;
                left = Expr::Rel(rel, Box::new(left), Box::new(right));
                continue;
            }
            let (not, op) = match t {
                Tok::Not => (true, self.peek_nth(1)?.1),
                Tok::Contains | Tok::StartsWith | Tok::EndsWith | Tok::Between | Tok::In => {
                    (false, t)
                }
                _ => return Ok(left),
            };
            if not {
                if !matches!(
                    op,
                    Tok::Contains | Tok::StartsWith | Tok::EndsWith | Tok::Between | Tok::In
                ) {
                    return Err(Sql92Error::Syntax {
                        at,
                        found: t.describe(),
                        expected: "CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT",
                    });
                }
                self.bump()?;
            }
            self.bump()?;
            self.enter()?;
            left = match op {
                Tok::Between => self.between(left, not)?,
                Tok::In => self.in_list(left, not)?,
                _ => {
                    let text = match op {
                        Tok::Contains => TextOp::Contains,
                        Tok::StartsWith => TextOp::StartsWith,
                        _ => TextOp::EndsWith,
                    };
                    let pattern = self.string()?;
                    Expr::Text { op: text, not, value: Box::new(left), pattern }
                }
            };
        }
    }

    fn between(&mut self, value: Expr, not: bool) -> Result<Expr, Sql92Error> {
        let low = self.unary()?;
        self.expect(Tok::And, "AND")?;
        let high = self.unary()?;
        if !not {
            // `createBetween` checks constant bounds first.
            if let (Expr::Lit(l), Expr::Lit(h)) = (&low, &high) {
                if matches!(l, Lit::Null) || matches!(h, Lit::Null) {
                    return Err(Sql92Error::Invalid(
                        "Illegal values of between, values can not be null!".into(),
                    ));
                }
                let in_order = compare(lit_val(h), lit_val(l)).map(|o| o != Ordering::Less);
                if in_order != Ok(true) {
                    return Err(Sql92Error::Invalid(format!(
                        "Illegal values of between, left value({}) must less than or equal to right value({})",
                        low.describe(),
                        high.describe()
                    )));
                }
            }
        }
        for e in [&value, &low, &high] {
            check_orderable(e)?;
        }
        Ok(Expr::Between { not, value: Box::new(value), low: Box::new(low), high: Box::new(high) })
    }

    fn in_list(&mut self, left: Expr, not: bool) -> Result<Expr, Sql92Error> {
        self.expect(Tok::LParen, "(")?;
        let mut list = vec![self.string()?];
        while self.peek()? == Tok::Comma {
            self.bump()?;
            list.push(self.string()?);
        }
        self.expect(Tok::RParen, ")")?;
        let Expr::Prop(prop) = left else {
            return Err(Sql92Error::Invalid(format!(
                "Expected a property for In expression, got: {}",
                left.describe()
            )));
        };
        list.sort_unstable();
        list.dedup();
        Ok(Expr::In { not, prop, list })
    }

    fn unary(&mut self) -> Result<Expr, Sql92Error> {
        let saved = self.depth;
        self.enter()?;
        let result = self.unary_inner();
        self.depth = saved;
        result
    }

    fn unary_inner(&mut self) -> Result<Expr, Sql92Error> {
        let (at, t) = self.bump()?;
        Ok(match t {
            Tok::Plus => self.unary()?,
            Tok::Minus => Expr::Neg(Box::new(self.unary()?)),
            Tok::Not => Expr::Not(Box::new(as_boolean(self.unary()?)?)),
            Tok::LParen => {
                let e = self.or_expr()?;
                self.expect(Tok::RParen, ")")?;
                e
            }
            Tok::Id(name) => Expr::Prop(name.into()),
            Tok::Str(raw) => Expr::Lit(Lit::Str(raw.replace("''", "'").into_boxed_str())),
            Tok::True => Expr::Lit(Lit::Bool(true)),
            Tok::False => Expr::Lit(Lit::Bool(false)),
            Tok::Null => Expr::Lit(Lit::Null),
            Tok::Decimal(text) => Expr::Lit(decimal(text)?),
            Tok::Float(text) => Expr::Lit(float(text)?),
            t => {
                return Err(Sql92Error::Syntax {
                    at,
                    found: t.describe(),
                    expected: "a literal, a property, a sign, NOT or (",
                })
            }
        })
    }
}

/// `ConstantExpression.createFromDecimal`: a `long`, narrowed to `int` when it fits.
fn decimal(text: &str) -> Result<Lit, Sql92Error> {
    let digits = text.strip_suffix(['l', 'L']).unwrap_or(text);
    let v: i64 = digits
        .parse()
        .map_err(|_| Sql92Error::Invalid(format!("For input string: \"{digits}\"")))?;
    Ok(i32::try_from(v).map_or(Lit::Long(v), Lit::Int))
}

/// `ConstantExpression.createFloat`, with its bounds: `Double.MIN_VALUE` is the smallest
/// positive double, so RocketMQ refuses `0.0`.
fn float(text: &str) -> Result<Lit, Sql92Error> {
    let v: f64 =
        text.parse().map_err(|_| Sql92Error::Invalid(format!("For input string: \"{text}\"")))?;
    if v.is_infinite() {
        return Err(Sql92Error::Invalid(format!("{text} is greater than 1.7976931348623157E308")));
    }
    if v < f64::from_bits(1) {
        return Err(Sql92Error::Invalid(format!("{text} is less than 4.9E-324")));
    }
    Ok(Lit::Double(v))
}

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

/// A value during evaluation; strings borrow from the expression or the properties.
#[derive(Debug, Clone, Copy)]
enum Val<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'a str),
}

/// Java threw during evaluation: the message does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failed;

type Get<'g, 'a> = &'g dyn Fn(&str) -> Option<&'a str>;

fn lit_val(l: &Lit) -> Val<'_> {
    match l {
        Lit::Null => Val::Null,
        Lit::Bool(b) => Val::Bool(*b),
        Lit::Int(i) => Val::Int(*i),
        Lit::Long(v) => Val::Long(*v),
        Lit::Double(d) => Val::Double(*d),
        Lit::Str(s) => Val::Str(s),
    }
}

fn eval<'a>(e: &'a Expr, get: Get<'_, 'a>) -> Result<Val<'a>, Failed> {
    Ok(match e {
        Expr::Lit(l) => lit_val(l),
        Expr::Prop(p) => get(p).map_or(Val::Null, Val::Str),
        // A property value is a string, never a `Boolean`.
        Expr::BoolCast(p) => get(p).map_or(Val::Null, |_| Val::Bool(false)),
        Expr::Neg(x) => match eval(x, get)? {
            Val::Int(i) => Val::Int(i.wrapping_neg()),
            Val::Long(v) => Val::Long(v.wrapping_neg()),
            Val::Double(d) => Val::Double(-d),
            _ => Val::Null,
        },
        Expr::Not(x) => match eval(x, get)? {
            Val::Bool(b) => Val::Bool(!b),
            Val::Null => Val::Null,
            _ => return Err(Failed),
        },
        Expr::And(terms) => logic(terms, get, false)?,
        Expr::Or(terms) => logic(terms, get, true)?,
        Expr::Rel(rel, l, r) => relation(*rel, eval(l, get)?, || eval(r, get))?,
        Expr::Eq(l, r) => {
            let (lv, rv) = (eval(l, get)?, eval(r, get)?);
            match (lv, rv) {
                (Val::Null, Val::Null) => Val::Bool(true),
                (Val::Null, _) => Val::Null,
                (_, Val::Null) => Val::Bool(false),
                _ => Val::Bool(compare(lv, rv)? == Ordering::Equal),
            }
        }
        Expr::Between { not, value, low, high } => {
            let v = eval(value, get)?;
            let (first, second) = if *not { (Rel::Lt, Rel::Gt) } else { (Rel::Ge, Rel::Le) };
            let a = relation(first, v, || eval(low, get))?;
            // AND stops at FALSE, OR at TRUE, exactly as the pair Java builds.
            if matches!(a, Val::Bool(b) if b == *not) {
                return Ok(a);
            }
            let b = relation(second, v, || eval(high, get))?;
            combine(a, b, *not)?
        }
        Expr::In { not, prop, list } => match get(prop) {
            None => Val::Null,
            Some(s) => Val::Bool(list.binary_search_by(|x| (**x).cmp(s)).is_ok() != *not),
        },
        Expr::Text { op, not, value, pattern } => {
            if pattern.is_empty() {
                return Ok(Val::Bool(false));
            }
            match eval(value, get)? {
                Val::Str(s) => {
                    let hit = match op {
                        TextOp::Contains => s.contains(&**pattern),
                        TextOp::StartsWith => s.starts_with(&**pattern),
                        TextOp::EndsWith => s.ends_with(&**pattern),
                    };
                    Val::Bool(hit != *not)
                }
                _ => Val::Bool(false),
            }
        }
    })
}

/// `AND` (`stop_at` false) or `OR` (`stop_at` true) over a chain.
fn logic<'a>(terms: &'a [Expr], get: Get<'_, 'a>, stop_at: bool) -> Result<Val<'a>, Failed> {
    let mut unknown = false;
    for t in terms {
        match eval(t, get)? {
            Val::Bool(b) if b == stop_at => return Ok(Val::Bool(stop_at)),
            Val::Bool(_) => {}
            Val::Null => unknown = true,
            _ => return Err(Failed),
        }
    }
    Ok(if unknown { Val::Null } else { Val::Bool(!stop_at) })
}

/// The second half of a two-term `AND`/`OR` whose first term did not stop it.
fn combine<'a>(a: Val<'a>, b: Val<'a>, or: bool) -> Result<Val<'a>, Failed> {
    match b {
        Val::Bool(x) if x == or => Ok(b),
        Val::Bool(_) | Val::Null => {
            Ok(if matches!(a, Val::Null) || matches!(b, Val::Null) { Val::Null } else { b })
        }
        _ => Err(Failed),
    }
}

/// `ComparisonExpression.evaluate` for `>`, `>=`, `<`, `<=`: the right side is evaluated only
/// when the left is not `NULL`; two strings are compared as doubles.
fn relation<'a>(
    rel: Rel,
    lv: Val<'a>,
    right: impl FnOnce() -> Result<Val<'a>, Failed>,
) -> Result<Val<'a>, Failed> {
    if matches!(lv, Val::Null) {
        return Ok(Val::Null);
    }
    let rv = right()?;
    let order = match (lv, rv) {
        (_, Val::Null) => return Ok(Val::Null),
        (Val::Str(a), Val::Str(b)) => double_cmp(java_double(a)?, java_double(b)?),
        _ => compare(lv, rv)?,
    };
    Ok(Val::Bool(rel.holds(order)))
}

/// `ComparisonExpression.__compare` with string conversion on, as RocketMQ always parses. A
/// type pair it cannot convert compares as "less"; a failed conversion (and Java's cast of a
/// `Boolean` to `String`) throws.
fn compare(l: Val<'_>, r: Val<'_>) -> Result<Ordering, Failed> {
    use Val::{Bool, Double, Int, Long, Null, Str};
    Ok(match (l, r) {
        (Bool(a), Bool(b)) => a.cmp(&b),
        (Int(a), Int(b)) => a.cmp(&b),
        (Long(a), Long(b)) => a.cmp(&b),
        (Double(a), Double(b)) => double_cmp(a, b),
        // Java compares UTF-16 units; only equality reaches here, where that makes no difference.
        (Str(a), Str(b)) => a.cmp(b),
        (Bool(_), Str(_)) => return Err(Failed),
        (Int(a), Long(b)) => i64::from(a).cmp(&b),
        (Int(a), Double(b)) => double_cmp(f64::from(a), b),
        (Int(a), Str(b)) => a.cmp(&b.parse::<i32>().map_err(|_| Failed)?),
        (Long(a), Int(b)) => a.cmp(&i64::from(b)),
        (Long(a), Double(b)) => double_cmp(long_to_double(a), b),
        (Long(a), Str(b)) => a.cmp(&b.parse::<i64>().map_err(|_| Failed)?),
        (Double(a), Int(b)) => double_cmp(a, f64::from(b)),
        (Double(a), Long(b)) => double_cmp(a, long_to_double(b)),
        (Double(a), Str(b)) => double_cmp(a, java_double(b)?),
        (Str(a), Bool(b)) => a.eq_ignore_ascii_case("true").cmp(&b),
        (Str(a), Int(b)) => a.parse::<i32>().map_err(|_| Failed)?.cmp(&b),
        (Str(a), Long(b)) => a.parse::<i64>().map_err(|_| Failed)?.cmp(&b),
        (Str(a), Double(b)) => double_cmp(java_double(a)?, b),
        (Bool(_) | Int(_) | Long(_) | Double(_) | Str(_) | Null, _) => Ordering::Less,
    })
}

/// Java's `(double) long`: round to nearest, as Rust's `as`.
#[allow(clippy::cast_precision_loss)]
fn long_to_double(v: i64) -> f64 {
    v as f64
}

/// `Double.compareTo`: every NaN equal and above everything, `-0.0` below `0.0`.
fn double_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.total_cmp(&b),
    }
}

/// `Double.valueOf(String)` for decimal text: surrounding control characters and spaces are
/// trimmed, `NaN` and `Infinity` are spelled exactly, a trailing `f`/`F`/`d`/`D` is allowed.
/// Java's hexadecimal floats are not accepted.
fn java_double(s: &str) -> Result<f64, Failed> {
    let t = s.trim_matches(|c: char| c <= ' ');
    let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
    let negative = t.starts_with('-');
    match unsigned {
        "NaN" => return Ok(f64::NAN),
        "Infinity" => return Ok(if negative { f64::NEG_INFINITY } else { f64::INFINITY }),
        _ => {}
    }
    let number = t.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(t);
    let body = number.strip_prefix(['+', '-']).unwrap_or(number);
    let plain =
        body.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !plain || !body.bytes().any(|b| b.is_ascii_digit()) {
        return Err(Failed);
    }
    number.parse().map_err(|_| Failed)
}

#[cfg(test)]
mod tests;
