//! Evaluation: Java's three-valued logic and conversions (the semantics table of the module
//! docs of [`super`]) over a tree that [`parse`](super::parse) checked.

use std::cmp::Ordering;

use super::{Expr, Lit, Rel, TextOp};
use crate::remoting::properties;

/// A record's properties parsed once for evaluation (review item M6): every pair of the
/// message's properties string and of the broker's extras (such as `CLUSTER`), sorted by key,
/// one entry per key holding the value a lookup must see: the extras' over the message's, the
/// last of duplicates (as Java's `HashMap` keeps it). Building one costs one pass over each
/// string and a sort; each property reference is then a binary search, so a record costs
/// O(properties length + references × log pairs) instead of a scan per reference.
///
/// Build one per record and evaluate any number of expressions against it with
/// [`Sql92::matches_view`](super::Sql92::matches_view).
///
/// # Examples
///
/// ```
/// use baiji::remoting::sql92::{PropertyView, Sql92};
///
/// let view = PropertyView::new(b"a\x017\x02region\x01east\x02a\x018\x02", b"CLUSTER\x01c1\x02");
/// assert_eq!(view.get("a"), Some("8"), "the last duplicate");
/// assert_eq!(view.get("CLUSTER"), Some("c1"), "the broker's extras count too");
/// for (expression, expected) in [("a > 7", true), ("region = 'west'", false)] {
///     assert_eq!(Sql92::compile(expression)?.matches_view(&view), expected);
/// }
/// # Ok::<(), baiji::remoting::sql92::Sql92Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct PropertyView<'p> {
    /// `(key, value)`, sorted by key, keys distinct.
    entries: Vec<(&'p str, &'p str)>,
}

impl<'p> PropertyView<'p> {
    /// Parses the properties string `props` (`key 0x01 value 0x02 ...`) and the broker's
    /// `extra` pairs, which take precedence. Malformed pairs (no separator, an empty key or
    /// value, invalid UTF-8) are skipped, as [`properties::iter`] skips them.
    #[must_use]
    pub fn new(props: &'p [u8], extra: &'p [u8]) -> Self {
        count_scan(2);
        let mut entries: Vec<(&str, &str)> =
            properties::iter(props).chain(properties::iter(extra)).collect();
        // Reversed, the value that must win (the extras' last, else the message's last) comes
        // first among its key, and the stable sort keeps it first: `dedup_by` keeps firsts.
        entries.reverse();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        entries.dedup_by(|later, first| later.0 == first.0);
        Self { entries }
    }

    /// The value of property `key`, as the expression sees it; `None` is SQL's `NULL`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&'p str> {
        let found = self.entries.binary_search_by(|(k, _)| {
            count_probe();
            (*k).cmp(key)
        });
        found.ok().and_then(|i| self.entries.get(i)).map(|(_, v)| *v)
    }

    /// Number of distinct properties.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the record has no well-formed property at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
thread_local! {
    /// Passes over a properties string (the message's or the broker's extras), and key
    /// comparisons made looking properties up: the work figures of review item M6, counted
    /// rather than timed.
    pub(super) static WORK: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Counts `n` passes over a properties string in `WORK` (tests only).
#[inline]
fn count_scan(n: u64) {
    #[cfg(test)]
    WORK.with(|w| w.set((w.get().0 + n, w.get().1)));
    #[cfg(not(test))]
    let _ = n;
}

/// Counts one key comparison of a lookup in `WORK` (tests only).
#[inline]
fn count_probe() {
    #[cfg(test)]
    WORK.with(|w| w.set((w.get().0, w.get().1 + 1)));
}

/// Whether `root` evaluates to `TRUE` without a failed conversion.
pub(super) fn matches<'a>(root: &'a Expr, get: Get<'_, 'a>) -> bool {
    matches!(eval(root, get), Ok(Val::Bool(true)))
}

/// A value during evaluation; strings borrow from the expression or the properties.
#[derive(Debug, Clone, Copy)]
pub(super) enum Val<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'a str),
}

/// Java threw during evaluation: the message does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Failed;

pub(super) type Get<'g, 'a> = &'g dyn Fn(&str) -> Option<&'a str>;

pub(super) fn lit_val(l: &Lit) -> Val<'_> {
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
pub(super) fn compare(l: Val<'_>, r: Val<'_>) -> Result<Ordering, Failed> {
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
