//! baiji's gRPC face: `apache.rocketmq.v2.MessagingService/SendMessage` (unary) over
//! plaintext HTTP/2 with prior knowledge (h2c), framed by hand.
//!
//! Setup: the client preface, a SETTINGS frame (push off, a stream window of 2^31-1) and a
//! connection WINDOW_UPDATE to 2^31-1, then frames are read until the server's SETTINGS has come
//! (and is acked) and ours is acked. baiji needs no Telemetry `Settings` exchange before
//! SendMessage: a send creates the client's session from its `x-mq-client-id` header, which is
//! the only header it requires.
//!
//! Each request is one write of a HEADERS frame (END_HEADERS; an HPACK block of static entries
//! and literals without indexing, no Huffman: the same bytes every time) and a DATA frame
//! (END_STREAM) with the gRPC length-prefixed `SendMessageRequest`, encoded once. Per request
//! the stream id (1, 3, 5, ...; in both frames), the last 8 hex digits of the message id and of
//! `x-mq-request-id` are patched in place. The headers are those grpc-java and the Java 5.x
//! SDK send: `:method`, `:scheme`, `:path`, `:authority`, `content-type`, `te`, `user-agent`,
//! `grpc-accept-encoding`, `grpc-timeout`, and `x-mq-language`, `x-mq-protocol`,
//! `x-mq-client-version`, `x-mq-client-id`, `x-mq-request-id`, `x-mq-date-time` (no ACL, so no
//! `authorization`).
//!
//! The answer: frames until the HEADERS with END_STREAM on the stream (the trailers). HPACK is
//! decoded with its dynamic table and Huffman ([`crate::hpack`]), so the check is the real
//! one: `:status` 200, `grpc-status` 0, and the `SendMessageResponse`'s `status.code` OK
//! (20000). PING is answered with PING ACK, SETTINGS with SETTINGS ACK, WINDOW_UPDATE feeds the
//! send window, GOAWAY or RST_STREAM on the stream aborts.

use std::net::TcpStream;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::hpack::{self, Decoder};
use crate::net::{self, show, Conn};
use crate::remoting::patch_hex;
use crate::{Driver, Opts, Res};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The smallest SETTINGS_MAX_FRAME_SIZE a server may announce; DATA is cut to it.
const FRAME_CHUNK: usize = 16_384;
const CODE_OK: u64 = 20_000;
const PATH: &str = "/apache.rocketmq.v2.MessagingService/SendMessage";

/// The gRPC driver.
#[derive(Debug)]
pub(crate) struct Grpc {
    conn: Conn,
    hpack: Decoder,
    request: Vec<u8>,
    /// Where the request's frames carry their stream id.
    stream_id_at: Vec<usize>,
    message_id_tail_at: usize,
    request_id_tail_at: usize,
    data_len: i64,
    stream: u32,
    next_stream: u32,
    send_window: i64,
    stream_window: i64,
    received: u64,
    // The answer being read.
    body: Vec<u8>,
    http_status: Option<u16>,
    grpc_status: Option<i64>,
    grpc_message: Option<Vec<u8>>,
    block: Vec<u8>,
    /// The frame being handled (reused: no allocation per frame).
    frame: Vec<u8>,
    block_stream: u32,
    block_end_stream: bool,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
}

/// What a frame meant to the caller.
enum Event {
    /// The current stream's trailers (or a trailers-only answer) have arrived.
    Trailers,
    /// The server's SETTINGS (already acked).
    Settings,
    /// The server acked our SETTINGS.
    SettingsAck,
    Other,
}

fn frame_header(out: &mut Vec<u8>, len: usize, ty: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(0).to_be_bytes()[1..]);
    out.push(ty);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

// Protobuf, by hand.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}
fn pb_varint(out: &mut Vec<u8>, field: u64, v: u64) {
    varint(out, field << 3);
    varint(out, v);
}
fn pb_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    varint(out, (field << 3) | 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Reads a varint at `b[*i..]`.
fn get_varint(b: &[u8], i: &mut usize) -> Res<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i).ok_or("protobuf: truncated varint")?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("protobuf: varint too long".into())
}

/// Calls `f(field, wire type, varint value, bytes)` for each field of message `b`.
fn pb_fields<'a>(b: &'a [u8], mut f: impl FnMut(u64, u64, u64, &'a [u8])) -> Res<()> {
    let mut i = 0;
    while i < b.len() {
        let key = get_varint(b, &mut i)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                let v = get_varint(b, &mut i)?;
                f(field, wire, v, &[]);
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                let s = b.get(i..i + n).ok_or("protobuf: truncated fixed field")?;
                i += n;
                f(field, wire, 0, s);
            }
            2 => {
                let n = get_varint(b, &mut i)? as usize;
                let s = b.get(i..i + n).ok_or("protobuf: truncated field")?;
                i += n;
                f(field, wire, 0, s);
            }
            _ => return Err(format!("protobuf: wire type {wire}")),
        }
    }
    Ok(())
}

/// CRC-32 (IEEE), for the body digest the SDK sends.
fn crc32(b: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in b {
        c ^= u32::from(x);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The `SendMessageRequest` of one NORMAL message, and the offset of its message id.
fn send_message_request(o: &Opts, message_id: &str, host: &str) -> (Vec<u8>, usize) {
    let body = crate::payload(o.size);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let mut topic = Vec::new();
    pb_bytes(&mut topic, 2, o.topic.as_bytes()); // Resource.name
    let mut digest = Vec::new();
    pb_varint(&mut digest, 1, 1); // DigestType CRC32
    pb_bytes(&mut digest, 2, format!("{:08X}", crc32(&body)).as_bytes());
    let mut born = Vec::new();
    pb_varint(&mut born, 1, now.as_secs());
    pb_varint(&mut born, 2, u64::from(now.subsec_millis()) * 1_000_000);
    let mut sys = Vec::new();
    pb_bytes(&mut sys, 3, message_id.as_bytes()); // message_id: first, its offset is 2
    pb_bytes(&mut sys, 4, &digest); // body_digest
    pb_varint(&mut sys, 5, 1); // body_encoding IDENTITY
    pb_varint(&mut sys, 6, 1); // message_type NORMAL
    pb_bytes(&mut sys, 7, &born); // born_timestamp
    pb_bytes(&mut sys, 8, host.as_bytes()); // born_host
    let mut msg = Vec::new();
    pb_bytes(&mut msg, 1, &topic);
    pb_bytes(&mut msg, 3, &sys);
    pb_bytes(&mut msg, 4, &body);
    let mut req = Vec::new();
    pb_bytes(&mut req, 1, &msg);
    let at = req.windows(message_id.len()).position(|w| w == message_id.as_bytes()).unwrap_or(0);
    (req, at)
}

impl Grpc {
    pub(crate) fn setup(sock: TcpStream, authority: &str, o: &Opts) -> Res<Grpc> {
        let mut g = Grpc {
            conn: Conn::new(sock),
            hpack: Decoder::new(4096),
            request: Vec::new(),
            stream_id_at: Vec::new(),
            message_id_tail_at: 0,
            request_id_tail_at: 0,
            data_len: 0,
            stream: 0,
            next_stream: 1,
            send_window: 65_535,
            stream_window: 65_535,
            received: 0,
            body: Vec::new(),
            http_status: None,
            grpc_status: None,
            grpc_message: None,
            block: Vec::new(),
            frame: Vec::new(),
            block_stream: 0,
            block_end_stream: false,
            first_offset: None,
            last_offset: None,
        };
        let mut hello = PREFACE.to_vec();
        frame_header(&mut hello, 12, SETTINGS, 0, 0);
        hello.extend_from_slice(&[0, 2, 0, 0, 0, 0]); // ENABLE_PUSH 0
        hello.extend_from_slice(&[0, 4]); // INITIAL_WINDOW_SIZE
        hello.extend_from_slice(&MAX_WINDOW.to_be_bytes());
        frame_header(&mut hello, 4, WINDOW_UPDATE, 0, 0);
        hello.extend_from_slice(&(MAX_WINDOW - 65_535).to_be_bytes());
        net::send(&mut g.conn.sock, &hello)?;
        let (mut theirs, mut acked) = (false, false);
        while !(theirs && acked) {
            match g.next_event().map_err(|e| format!("HTTP/2 setup: {e}"))? {
                Event::Settings => theirs = true,
                Event::SettingsAck => acked = true,
                Event::Trailers | Event::Other => {}
            }
        }
        g.build_request(authority, o);
        Ok(g)
    }

    fn build_request(&mut self, authority: &str, o: &Opts) {
        let pid = std::process::id();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let host = hostname();
        // The 5.x SDK's message id: version 01, a MAC, the pid, seconds, a counter.
        let message_id = format!("017F0000000001{:04X}{:08X}00000000", pid as u16, now as u32);
        let request_id = format!("9b0e2a44-5c1d-4e8f-a1b2-{:04x}00000000", pid as u16);
        let (days, rem) = (now / 86_400, now % 86_400);
        let (y, m, d) = crate::civil(days as i64);
        let date_time =
            format!("{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z", rem / 3600, rem / 60 % 60, rem % 60);
        let client_id = format!("{host}@{pid}@0@samedriver");
        let mut block = Vec::new();
        hpack::put_indexed(&mut block, 3); // :method POST
        hpack::put_indexed(&mut block, 6); // :scheme http
        hpack::put_literal_static_name(&mut block, 4, PATH.as_bytes());
        hpack::put_literal_static_name(&mut block, 1, authority.as_bytes());
        hpack::put_literal_static_name(&mut block, 31, b"application/grpc");
        hpack::put_literal(&mut block, b"te", b"trailers");
        hpack::put_literal_static_name(&mut block, 58, b"grpc-java-netty/1.53.0");
        hpack::put_literal(&mut block, b"grpc-accept-encoding", b"gzip");
        hpack::put_literal(&mut block, b"grpc-timeout", b"2999999u");
        hpack::put_literal(&mut block, b"x-mq-language", b"JAVA");
        hpack::put_literal(&mut block, b"x-mq-protocol", b"v2");
        hpack::put_literal(&mut block, b"x-mq-client-version", b"5.0.7");
        hpack::put_literal(&mut block, b"x-mq-client-id", client_id.as_bytes());
        hpack::put_literal(&mut block, b"x-mq-request-id", request_id.as_bytes());
        hpack::put_literal(&mut block, b"x-mq-date-time", date_time.as_bytes());
        let (pb, id_at) = send_message_request(o, &message_id, &host);
        let mut grpc = vec![0u8];
        grpc.extend_from_slice(&u32::try_from(pb.len()).unwrap_or(u32::MAX).to_be_bytes());
        let pb_at = grpc.len();
        grpc.extend_from_slice(&pb);

        let mut out = Vec::new();
        let mut ids = Vec::new();
        ids.push(out.len() + 5);
        frame_header(&mut out, block.len(), HEADERS, END_HEADERS, 1);
        let block_at = out.len();
        out.extend_from_slice(&block);
        let rid_at = block_at
            + block.windows(request_id.len()).position(|w| w == request_id.as_bytes()).unwrap_or(0);
        let mut data_at = 0;
        let chunks: Vec<&[u8]> = grpc.chunks(FRAME_CHUNK).collect();
        for (n, c) in chunks.iter().enumerate() {
            ids.push(out.len() + 5);
            let last = n + 1 == chunks.len();
            frame_header(&mut out, c.len(), DATA, if last { END_STREAM } else { 0 }, 1);
            if n == 0 {
                data_at = out.len();
            }
            out.extend_from_slice(c);
        }
        // The message id lies in the first DATA frame when it starts within the first chunk
        // (it does: it is the message's first bytes after a few tags).
        self.message_id_tail_at = data_at + pb_at + id_at + message_id.len() - 8;
        self.request_id_tail_at = rid_at + request_id.len() - 8;
        self.request = out;
        self.stream_id_at = ids;
        self.data_len = grpc.len() as i64;
    }

    fn send_frame(&mut self, ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Res<()> {
        let mut f = Vec::with_capacity(9 + payload.len());
        frame_header(&mut f, payload.len(), ty, flags, stream);
        f.extend_from_slice(payload);
        net::send(&mut self.conn.sock, &f)
    }

    /// Reads one frame and acts on it.
    fn next_event(&mut self) -> Res<Event> {
        self.conn.need(9)?;
        let h = self.conn.data();
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let (ty, flags) = (h[3], h[4]);
        let sid = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_WINDOW;
        if len > 1 << 24 {
            return Err(format!("frame length {len}: not HTTP/2"));
        }
        self.conn.need(9 + len)?;
        let mut p = std::mem::take(&mut self.frame);
        p.clear();
        p.extend_from_slice(&self.conn.data()[9..9 + len]);
        self.conn.consume(9 + len);
        let r = self.on_frame(ty, flags, sid, &p);
        self.frame = p;
        r
    }

    fn on_frame(&mut self, ty: u8, flags: u8, sid: u32, p: &[u8]) -> Res<Event> {
        // The payload without padding (and without `extra` leading bytes).
        let unpad = |extra: usize| -> Res<&[u8]> {
            let (pad, start) = if flags & PADDED != 0 {
                (*p.first().ok_or("padded frame without a pad length")? as usize, 1)
            } else {
                (0, 0)
            };
            let start = start + extra;
            if start + pad > p.len() {
                return Err("frame padding exceeds the frame".into());
            }
            Ok(&p[start..p.len() - pad])
        };
        match ty {
            DATA => {
                self.received += p.len() as u64;
                if self.received > 1 << 30 {
                    // Give the connection window back long before the 2^31-1 announced runs out.
                    let inc = u32::try_from(self.received).unwrap_or(MAX_WINDOW);
                    self.send_frame(WINDOW_UPDATE, 0, 0, &inc.to_be_bytes())?;
                    self.received = 0;
                }
                if sid == self.stream && sid != 0 {
                    self.body.extend_from_slice(unpad(0)?);
                    if flags & END_STREAM != 0 {
                        return Err("the stream ended without trailers (grpc-status)".into());
                    }
                }
                Ok(Event::Other)
            }
            HEADERS => {
                let extra = if flags & PRIORITY != 0 { 5 } else { 0 };
                self.block.clear();
                self.block.extend_from_slice(unpad(extra)?);
                self.block_stream = sid;
                self.block_end_stream = flags & END_STREAM != 0;
                if flags & END_HEADERS != 0 {
                    self.header_block()
                } else {
                    Ok(Event::Other)
                }
            }
            CONTINUATION => {
                if sid != self.block_stream {
                    return Err("CONTINUATION on another stream".into());
                }
                self.block.extend_from_slice(p);
                if flags & END_HEADERS != 0 {
                    self.header_block()
                } else {
                    Ok(Event::Other)
                }
            }
            SETTINGS if flags & ACK != 0 => Ok(Event::SettingsAck),
            SETTINGS => {
                for s in p.chunks_exact(6) {
                    let id = u16::from_be_bytes([s[0], s[1]]);
                    let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
                    if id == 4 {
                        self.stream_window = i64::from(v);
                    }
                }
                self.send_frame(SETTINGS, ACK, 0, &[])?;
                Ok(Event::Settings)
            }
            PING if flags & ACK == 0 => {
                self.send_frame(PING, ACK, 0, p)?;
                Ok(Event::Other)
            }
            WINDOW_UPDATE if sid == 0 && p.len() == 4 => {
                let inc = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & MAX_WINDOW;
                self.send_window += i64::from(inc);
                Ok(Event::Other)
            }
            RST_STREAM if sid == self.stream && p.len() == 4 => Err(format!(
                "the server reset the stream, error code {}",
                u32::from_be_bytes([p[0], p[1], p[2], p[3]])
            )),
            GOAWAY if p.len() >= 8 => Err(format!(
                "the server sent GOAWAY, error code {}, last stream {}: {}",
                u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
                u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & MAX_WINDOW,
                show(&p[8..])
            )),
            _ => Ok(Event::Other),
        }
    }

    /// Decodes a complete header block (every block, to keep the HPACK table in step).
    fn header_block(&mut self) -> Res<Event> {
        let ours = self.block_stream == self.stream && self.stream != 0;
        let number = |v: &[u8]| std::str::from_utf8(v).ok().and_then(|t| t.parse::<i64>().ok());
        let (status, gs, gm) =
            (&mut self.http_status, &mut self.grpc_status, &mut self.grpc_message);
        self.hpack.decode(&self.block, |n, v| {
            if ours {
                match n {
                    // An unparsable value is kept as an impossible one, so it is reported.
                    b":status" => *status = Some(number(v).map_or(0, |s| s as u16)),
                    b"grpc-status" => *gs = Some(number(v).unwrap_or(-1)),
                    b"grpc-message" => *gm = Some(v.to_vec()),
                    _ => {}
                }
            }
        })?;
        Ok(if ours && self.block_end_stream { Event::Trailers } else { Event::Other })
    }

    /// Checks a complete answer; the offset its entry names.
    fn check_answer(&self) -> Res<Option<i64>> {
        match self.http_status {
            Some(200) => {}
            Some(s) => return Err(format!("HTTP status {s}")),
            None => return Err("an answer without :status".into()),
        }
        match self.grpc_status {
            Some(0) => {}
            Some(s) => {
                return Err(format!(
                    "grpc-status {s}: {}",
                    show(self.grpc_message.as_deref().unwrap_or_default())
                ))
            }
            None => return Err("trailers without grpc-status".into()),
        }
        let b = &self.body;
        if b.len() < 5 {
            return Err(format!("a gRPC body of {} bytes", b.len()));
        }
        if b[0] != 0 {
            return Err("a compressed gRPC answer (none was offered)".into());
        }
        let n = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
        let msg = b.get(5..5 + n).ok_or("a truncated gRPC message")?;
        let (mut status, mut entry) = (None, None);
        pb_fields(msg, |f, w, _, s| match (f, w) {
            (1, 2) => status = Some(s),
            (2, 2) if entry.is_none() => entry = Some(s),
            _ => {}
        })?;
        let (mut code, mut text) = (0, &b""[..]);
        pb_fields(status.unwrap_or_default(), |f, _, v, s| match f {
            1 => code = v,
            2 => text = s,
            _ => {}
        })?;
        if code != CODE_OK {
            return Err(format!("SendMessage status {code}: {}", show(text)));
        }
        let mut offset = None;
        if let Some(e) = entry {
            pb_fields(e, |f, w, v, _| {
                if (f, w) == (4, 0) {
                    offset = Some(v as i64);
                }
            })?;
        }
        Ok(offset)
    }
}

impl Driver for Grpc {
    fn prepare(&mut self, seq: u64) {
        self.stream = self.next_stream;
        self.next_stream = self.next_stream.saturating_add(2);
        let id = self.stream.to_be_bytes();
        for &at in &self.stream_id_at {
            self.request[at..at + 4].copy_from_slice(&id);
        }
        let at = self.message_id_tail_at;
        patch_hex(&mut self.request[at..at + 8], seq);
        let at = self.request_id_tail_at;
        patch_hex(&mut self.request[at..at + 8], seq);
        for d in &mut self.request[at..at + 8] {
            d.make_ascii_lowercase();
        }
        self.body.clear();
        self.http_status = None;
        self.grpc_status = None;
        self.grpc_message = None;
    }

    fn round_trip(&mut self, keep: bool) -> Res<()> {
        if self.stream > MAX_WINDOW {
            return Err("out of HTTP/2 stream ids on this connection".into());
        }
        if self.data_len > self.stream_window {
            return Err(format!(
                "a request of {} bytes exceeds the server's stream window {}",
                self.data_len, self.stream_window
            ));
        }
        while self.send_window < self.data_len {
            self.next_event()?;
        }
        net::send(&mut self.conn.sock, &self.request)?;
        self.send_window -= self.data_len;
        loop {
            if let Event::Trailers = self.next_event()? {
                break;
            }
        }
        let offset = self.check_answer()?;
        if keep {
            if self.first_offset.is_none() {
                self.first_offset = offset.or(Some(-1));
            } else {
                self.last_offset = offset.or(Some(-1));
            }
        }
        Ok(())
    }

    fn request_len(&self) -> usize {
        self.request.len()
    }

    fn notes(&self) -> Vec<(String, String)> {
        let n = |v: Option<i64>| v.map_or("null".into(), |s| s.to_string());
        vec![
            ("first_offset".into(), n(self.first_offset)),
            ("last_offset".into(), n(self.last_offset)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn protobuf_round_trip() {
        let mut status = Vec::new();
        pb_varint(&mut status, 1, 20_000);
        pb_bytes(&mut status, 2, b"OK");
        let mut m = Vec::new();
        pb_bytes(&mut m, 1, &status);
        let mut seen = Vec::new();
        pb_fields(&m, |f, w, _, s| seen.push((f, w, s.to_vec()))).unwrap();
        assert_eq!(seen, vec![(1, 2, status.clone())]);
        let mut code = 0;
        pb_fields(&status, |f, _, v, _| {
            if f == 1 {
                code = v;
            }
        })
        .unwrap();
        assert_eq!(code, 20_000);
        assert!(pb_fields(&[0x0a, 5, 1], |_, _, _, _| {}).is_err(), "truncated");
    }
}
