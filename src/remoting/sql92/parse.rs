//! The parser: recursive descent over the grammar of the module docs of [`super`], with
//! RocketMQ's parse-time checks (`asBooleanExpression`, `checkLessThanOperand`,
//! `checkEqualOperand`, `createBetween`, the bounds of literals) and baiji's limits
//! ([`MAX_EXPRESSION_LEN`], [`MAX_DEPTH`], [`MAX_PROPERTY_REFERENCES`]).

use std::cmp::Ordering;

use super::eval::{compare, lit_val};
use super::lex::{Lexer, Tok};
use super::{
    Expr, Lit, Rel, Sql92Error, TextOp, MAX_DEPTH, MAX_EXPRESSION_LEN, MAX_PROPERTY_REFERENCES,
};

/// Parses and checks `expression` into the tree [`Sql92`](super::Sql92) evaluates.
pub(super) fn parse(expression: &str) -> Result<Expr, Sql92Error> {
    if expression.len() > MAX_EXPRESSION_LEN {
        return Err(Sql92Error::TooLong { len: expression.len(), max: MAX_EXPRESSION_LEN });
    }
    let mut p = Parser { lex: Lexer::new(expression), ahead: Vec::new(), depth: 0, references: 0 };
    let e = p.or_expr()?;
    as_boolean(e)
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

struct Parser<'s> {
    lex: Lexer<'s>,
    /// Tokens read ahead (at most two: `NOT BETWEEN`, `IS NOT`).
    ahead: Vec<(usize, Tok<'s>)>,
    /// Current nesting (see [`MAX_DEPTH`]).
    depth: usize,
    /// Property references so far (see [`MAX_PROPERTY_REFERENCES`]).
    references: usize,
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
            Tok::Id(name) => {
                self.references += 1;
                if self.references > MAX_PROPERTY_REFERENCES {
                    return Err(Sql92Error::TooManyReferences { max: MAX_PROPERTY_REFERENCES });
                }
                Expr::Prop(name.into())
            }
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
