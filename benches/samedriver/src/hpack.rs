//! HPACK (RFC 7541), as little as the gRPC driver needs.
//!
//! Encoding: the request's header block uses only static-table entries (indexed, for
//! `:method POST` and `:scheme http`) and literals without indexing with a static name index or
//! a literal name, no Huffman: the same bytes for every request, no dynamic table.
//!
//! Decoding: the server (hyper's h2) indexes its response headers and trailers in the dynamic
//! table and Huffman-codes strings, so the decoder keeps the dynamic table and decodes Huffman
//! (canonical code: built from the RFC's code lengths). After the first answer every field the
//! server sends is a one-byte index.

use crate::Res;

/// RFC 7541 Appendix A.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// RFC 7541 Appendix B: the Huffman code length of each symbol 0..=255 (EOS, 256, is 30).
const HUFFMAN_LENGTHS: [u8; 256] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, //
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, //
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, //
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, //
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, //
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, //
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, //
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, //
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, //
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, //
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, //
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, //
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, //
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, //
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, //
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, //
];
const EOS: u16 = 256;
const MAX_BITS: usize = 30;

/// Writes `v` with an `n`-bit prefix whose other bits are `first`.
pub(crate) fn put_int(out: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A string literal without Huffman coding.
pub(crate) fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A static-table entry, indexed.
pub(crate) fn put_indexed(out: &mut Vec<u8>, index: usize) {
    put_int(out, 0x80, 7, index);
}

/// A literal without indexing whose name is static-table entry `name_index`.
pub(crate) fn put_literal_static_name(out: &mut Vec<u8>, name_index: usize, value: &[u8]) {
    put_int(out, 0x00, 4, name_index);
    put_str(out, value);
}

/// A literal without indexing with a literal name.
pub(crate) fn put_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    put_str(out, name);
    put_str(out, value);
}

/// The canonical Huffman decoding tables: per code length, the first code, and the symbols in
/// code order.
#[derive(Debug)]
struct Huffman {
    first: [u32; MAX_BITS + 1],
    count: [u32; MAX_BITS + 1],
    offset: [usize; MAX_BITS + 1],
    symbols: Vec<u16>,
}

impl Huffman {
    fn new() -> Huffman {
        let len = |s: u16| if s == EOS { MAX_BITS as u8 } else { HUFFMAN_LENGTHS[s as usize] };
        let mut symbols: Vec<u16> = (0..=EOS).collect();
        symbols.sort_by_key(|&s| (len(s), s));
        let mut h = Huffman {
            first: [0; MAX_BITS + 1],
            count: [0; MAX_BITS + 1],
            offset: [0; MAX_BITS + 1],
            symbols,
        };
        for &s in &h.symbols {
            h.count[len(s) as usize] += 1;
        }
        let (mut code, mut offset) = (0u32, 0usize);
        for l in 1..=MAX_BITS {
            h.first[l] = code;
            h.offset[l] = offset;
            code = (code + h.count[l]) << 1;
            offset += h.count[l] as usize;
        }
        h
    }

    fn decode(&self, src: &[u8], out: &mut Vec<u8>) -> Res<()> {
        let (mut code, mut len) = (0u32, 0usize);
        for &byte in src {
            for bit in (0..8).rev() {
                code = (code << 1) | u32::from((byte >> bit) & 1);
                len += 1;
                let l = len;
                if code.wrapping_sub(self.first[l]) < self.count[l] {
                    let s = self.symbols[self.offset[l] + (code - self.first[l]) as usize];
                    if s == EOS {
                        return Err("HPACK: EOS in a Huffman string".into());
                    }
                    out.push(s as u8);
                    code = 0;
                    len = 0;
                } else if len >= MAX_BITS {
                    return Err("HPACK: bad Huffman code".into());
                }
            }
        }
        // Padding: fewer than 8 bits, all ones (the EOS prefix).
        if len > 7 || code != (1u32 << len) - 1 {
            return Err("HPACK: bad Huffman padding".into());
        }
        Ok(())
    }
}

/// A header-block decoder with its dynamic table.
#[derive(Debug)]
pub(crate) struct Decoder {
    /// Newest first.
    table: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    size: usize,
    max_size: usize,
    huffman: Huffman,
    name: Vec<u8>,
    value: Vec<u8>,
}

fn get_int(b: &[u8], i: &mut usize, n: u32) -> Res<usize> {
    let max = (1usize << n) - 1;
    let first = *b.get(*i).ok_or("HPACK: truncated integer")? as usize & max;
    *i += 1;
    if first < max {
        return Ok(first);
    }
    let (mut v, mut shift) = (max, 0u32);
    loop {
        let byte = *b.get(*i).ok_or("HPACK: truncated integer")?;
        *i += 1;
        if shift > 28 {
            return Err("HPACK: integer too large".into());
        }
        v += ((byte & 0x7f) as usize) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
}

impl Decoder {
    /// A decoder whose table holds at most `max_size` octets (SETTINGS_HEADER_TABLE_SIZE;
    /// 4096 unless the client announced otherwise).
    pub(crate) fn new(max_size: usize) -> Decoder {
        Decoder {
            table: std::collections::VecDeque::new(),
            size: 0,
            max_size,
            huffman: Huffman::new(),
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            let Some((n, v)) = self.table.pop_back() else { break };
            self.size -= n.len() + v.len() + 32;
        }
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>) {
        let size = name.len() + value.len() + 32;
        if size > self.max_size {
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.max_size - size);
        self.size += size;
        self.table.push_front((name, value));
    }

    fn entry(&self, index: usize) -> Res<(&[u8], &[u8])> {
        match index {
            0 => Err("HPACK: index 0".into()),
            1..=61 => {
                let (n, v) = STATIC[index - 1];
                Ok((n.as_bytes(), v.as_bytes()))
            }
            _ => self
                .table
                .get(index - 62)
                .map(|(n, v)| (&n[..], &v[..]))
                .ok_or_else(|| format!("HPACK: index {index} is not in the table")),
        }
    }

    /// Decodes a string literal at `b[*i..]` into `out` (cleared first).
    fn string(&self, b: &[u8], i: &mut usize, out: &mut Vec<u8>) -> Res<()> {
        out.clear();
        let huffman = b.get(*i).ok_or("HPACK: truncated string")? & 0x80 != 0;
        let len = get_int(b, i, 7)?;
        let s = b.get(*i..*i + len).ok_or("HPACK: truncated string")?;
        *i += len;
        if huffman {
            self.huffman.decode(s, out)
        } else {
            out.extend_from_slice(s);
            Ok(())
        }
    }

    /// Decodes one header block, calling `f(name, value)` for each field in order.
    pub(crate) fn decode(&mut self, b: &[u8], mut f: impl FnMut(&[u8], &[u8])) -> Res<()> {
        let mut name = std::mem::take(&mut self.name);
        let mut value = std::mem::take(&mut self.value);
        let r = self.fields(b, &mut name, &mut value, &mut f);
        self.name = name;
        self.value = value;
        r
    }

    fn fields(
        &mut self,
        b: &[u8],
        name: &mut Vec<u8>,
        value: &mut Vec<u8>,
        f: &mut impl FnMut(&[u8], &[u8]),
    ) -> Res<()> {
        let mut i = 0;
        while i < b.len() {
            let first = b[i];
            if first & 0x80 != 0 {
                let index = get_int(b, &mut i, 7)?;
                let (n, v) = self.entry(index)?;
                f(n, v);
            } else if first & 0xE0 == 0x20 {
                let size = get_int(b, &mut i, 5)?;
                self.max_size = size;
                self.evict_to(size);
            } else {
                // 01: incremental indexing (6-bit index); 0000 / 0001: without / never indexed
                // (4-bit index).
                let indexing = first & 0xC0 == 0x40;
                let index = get_int(b, &mut i, if indexing { 6 } else { 4 })?;
                if index == 0 {
                    self.string(b, &mut i, name)?;
                } else {
                    name.clear();
                    name.extend_from_slice(self.entry(index)?.0);
                }
                self.string(b, &mut i, value)?;
                f(name, value);
                if indexing {
                    self.insert(name.clone(), value.clone());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut Decoder, b: &[u8]) -> Vec<(String, String)> {
        let mut v = Vec::new();
        d.decode(b, |n, val| {
            v.push((String::from_utf8_lossy(n).into_owned(), String::from_utf8_lossy(val).into()))
        })
        .unwrap();
        v
    }

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn rfc7541_c4_requests_with_huffman() {
        let mut d = Decoder::new(4096);
        let r1 = all(&mut d, &unhex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"));
        assert_eq!(r1[3], (":authority".into(), "www.example.com".into()));
        let r2 = all(&mut d, &unhex("8286 84be 5886 a8eb 1064 9cbf"));
        assert_eq!(r2[3], (":authority".into(), "www.example.com".into()), "from the table");
        assert_eq!(r2[4], ("cache-control".into(), "no-cache".into()));
        let r3 = all(&mut d, &unhex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"));
        assert_eq!(r3[1], (":scheme".into(), "https".into()));
        assert_eq!(r3[2], (":path".into(), "/index.html".into()));
        assert_eq!(r3[4], ("custom-key".into(), "custom-value".into()));
        assert_eq!(d.size, 164, "table size after C.4.3");
    }

    #[test]
    fn rfc7541_c6_responses_evict() {
        let mut d = Decoder::new(256);
        let b1 = "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 \
                  82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3";
        let r1 = all(&mut d, &unhex(b1));
        assert_eq!(r1[0], (":status".into(), "302".into()));
        assert_eq!(r1[3], ("location".into(), "https://www.example.com".into()));
        let r2 = all(&mut d, &unhex("4883 640e ffc1 c0bf"));
        assert_eq!(r2[0], (":status".into(), "307".into()));
        assert_eq!(r2[1], ("cache-control".into(), "private".into()));
        assert_eq!(d.size, 222);
    }

    #[test]
    fn encodes_integers_and_literals() {
        let mut out = Vec::new();
        put_int(&mut out, 0, 5, 1337);
        assert_eq!(out, [31, 154, 10], "RFC 7541 C.1.2");
        let mut out = Vec::new();
        put_literal_static_name(&mut out, 31, b"application/grpc");
        put_literal(&mut out, b"te", b"trailers");
        put_indexed(&mut out, 3);
        let mut d = Decoder::new(4096);
        let v = all(&mut d, &out);
        assert_eq!(v[0], ("content-type".into(), "application/grpc".into()));
        assert_eq!(v[1], ("te".into(), "trailers".into()));
        assert_eq!(v[2], (":method".into(), "POST".into()));
        assert_eq!(d.size, 0, "nothing indexed");
    }
}
