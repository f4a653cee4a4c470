//! The lexer: keywords (any case), identifiers, string, decimal and float literals, operators,
//! `--` and `/* */` comments (see the grammar in the module docs of [`super`]).

use super::Sql92Error;

/// A token; literals and identifiers borrow the expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tok<'s> {
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
    /// The token as RocketMQ's parser names it in an error (`"="`, `"'x'"`, `<EOF>`).
    pub(super) fn describe(self) -> String {
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

/// Cuts an expression into tokens, one [`next`](Self::next) at a time.
pub(super) struct Lexer<'s> {
    src: &'s str,
    pos: usize,
}

impl<'s> Lexer<'s> {
    pub(super) fn new(src: &'s str) -> Self {
        Self { src, pos: 0 }
    }

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

    /// The next token and the byte offset it starts at; [`Tok::End`] at the end.
    pub(super) fn next(&mut self) -> Result<(usize, Tok<'s>), Sql92Error> {
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
