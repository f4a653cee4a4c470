//! Just enough JSON: quoting strings, and finding an object's top-level members as raw
//! slices (nested values skipped, not parsed) in one pass.

use crate::Res;

/// `s` as a JSON string literal (control characters as `\u00XX`, as fastjson writes them).
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// The end (exclusive) of the string starting at the quote `b[i]`.
fn string_end(b: &[u8], mut i: usize) -> Res<usize> {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err("JSON: unterminated string".into())
}

/// The end (exclusive) of the value starting at `b[i]`.
fn value_end(b: &[u8], i: usize) -> Res<usize> {
    match b.get(i) {
        None => Err("JSON: value expected".into()),
        Some(b'"') => string_end(b, i),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            Err("JSON: unterminated object or array".into())
        }
        Some(_) => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\r' | b'\n' | b'\t')
            {
                j += 1;
            }
            Ok(j)
        }
    }
}

/// Calls `f(key, raw value)` for each top-level member of the object `b` (keys without their
/// quotes and unescaped as they stand; values raw, strings with their quotes).
pub(crate) fn members<'a>(b: &'a [u8], mut f: impl FnMut(&'a [u8], &'a [u8])) -> Res<()> {
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return Err("JSON: not an object".into());
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Ok(());
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return Err("JSON: member name expected".into());
        }
        let kend = string_end(b, i)?;
        let key = &b[i + 1..kend - 1];
        i = skip_ws(b, kend);
        if b.get(i) != Some(&b':') {
            return Err("JSON: ':' expected".into());
        }
        i = skip_ws(b, i + 1);
        let vend = value_end(b, i)?;
        f(key, &b[i..vend]);
        i = skip_ws(b, vend);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Ok(()),
            _ => return Err("JSON: ',' or '}' expected".into()),
        }
    }
}

/// The raw value of top-level member `key` of object `b`.
pub(crate) fn get<'a>(b: &'a [u8], key: &str) -> Res<Option<&'a [u8]>> {
    let mut found = None;
    members(b, |k, v| {
        if found.is_none() && k == key.as_bytes() {
            found = Some(v);
        }
    })?;
    Ok(found)
}

/// A raw JSON integer, or a JSON string holding one (RocketMQ writes both).
pub(crate) fn int(raw: &[u8]) -> Option<i64> {
    let t = raw.strip_prefix(b"\"").and_then(|r| r.strip_suffix(b"\"")).unwrap_or(raw);
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// A raw JSON string's text (escapes other than `\uXXXX` of the BMP kept simple); `null`
/// and other values as they stand.
pub(crate) fn text(raw: &[u8]) -> String {
    let Some(inner) = raw.strip_prefix(b"\"").and_then(|r| r.strip_suffix(b"\"")) else {
        return String::from_utf8_lossy(raw).into_owned();
    };
    let s = String::from_utf8_lossy(inner);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let c = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                out.push(c.unwrap_or('\u{fffd}'));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_top_level_members_only() {
        let b =
            br#"{"extFields":{"code":"7","x":[1,{"y":"}"}]},"code":0 ,"remark":"a\"b","n":null}"#;
        assert_eq!(get(b, "code").unwrap(), Some(&b"0"[..]));
        assert_eq!(text(get(b, "remark").unwrap().unwrap()), "a\"b");
        assert_eq!(get(b, "n").unwrap(), Some(&b"null"[..]));
        assert_eq!(get(b, "missing").unwrap(), None);
        let ext = get(b, "extFields").unwrap().unwrap();
        assert_eq!(get(ext, "code").unwrap().and_then(int), Some(7));
        assert!(get(b"{\"a\":", "a").is_err());
        assert!(get(b"[1]", "a").is_err());
        assert_eq!(get(b" { } ", "a").unwrap(), None);
    }

    #[test]
    fn quotes_like_fastjson() {
        assert_eq!(quote("K\u{1}v\u{2}\"\\"), r#""K\u0001v\u0002\"\\""#);
        assert_eq!(text(br#""K\u0001v""#), "K\u{1}v");
    }
}
