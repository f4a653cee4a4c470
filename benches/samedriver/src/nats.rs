//! NATS JetStream over the text protocol: setup reads `INFO`, sends `CONNECT` (verbose off,
//! headers and no_responders on, as the official clients do) and `PING`, awaits `PONG`,
//! subscribes a reply inbox and creates a memory stream on the subject through
//! `$JS.API.STREAM.CREATE.<name>`. Each request is then `PUB <subject> <inbox> <size>` with the
//! payload, and its answer the stream's ack, `MSG <inbox> 1 <len>` with
//! `{"stream":...,"seq":N}` (an `"error"` member, or a 503 no-responders status, aborts).

use std::net::TcpStream;

use crate::net::{self, show, Conn};
use crate::{json, Driver, Opts, Res};

const SID: &str = "1";
const MAX_LINE: usize = 64 * 1024;

/// The NATS JetStream driver.
#[derive(Debug)]
pub(crate) struct Nats {
    conn: Conn,
    request: Vec<u8>,
    inbox: String,
    first_seq: Option<i64>,
    last_seq: Option<i64>,
}

/// One message that arrived on the inbox.
enum Arrived {
    /// `MSG`: its payload's range in the connection's data, and the bytes to consume.
    Msg { start: usize, len: usize, total: usize },
    /// `HMSG`: a header block (a status such as `NATS/1.0 503`) and maybe a payload.
    Status(String),
}

impl Nats {
    pub(crate) fn setup(sock: TcpStream, o: &Opts) -> Res<Nats> {
        let inbox = format!("_INBOX.samedriver.{}", std::process::id());
        let mut n = Nats {
            conn: Conn::new(sock),
            request: Vec::new(),
            inbox,
            first_seq: None,
            last_seq: None,
        };
        let len =
            n.conn.line(MAX_LINE).map_err(|e| format!("waiting for the server's INFO: {e}"))?;
        if !n.conn.data().starts_with(b"INFO ") {
            return Err(format!(
                "not a NATS server: it greeted with {}",
                show(&n.conn.data()[..len])
            ));
        }
        let info = n.conn.data()[5..len].to_vec();
        n.conn.consume(len + 2);
        if json::get(&info, "jetstream").ok().flatten() != Some(&b"true"[..]) {
            return Err(
                "the NATS server does not have JetStream enabled (start it with -js)".into()
            );
        }
        let hello = concat!(
            "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,",
            "\"no_responders\":true,\"lang\":\"rust\",\"version\":\"0.1.0\",",
            "\"name\":\"baiji-samedriver\",\"protocol\":1}\r\nPING\r\n"
        );
        net::send(&mut n.conn.sock, hello.as_bytes())?;
        n.await_pong().map_err(|e| format!("waiting for PONG after CONNECT: {e}"))?;
        let sub = format!("SUB {} {SID}\r\n", n.inbox);
        net::send(&mut n.conn.sock, sub.as_bytes())?;
        n.create_stream(o)?;
        let body = crate::payload(o.size);
        let mut request = format!("PUB {} {} {}\r\n", o.subject, n.inbox, body.len()).into_bytes();
        request.extend_from_slice(&body);
        request.extend_from_slice(b"\r\n");
        n.request = request;
        Ok(n)
    }

    fn await_pong(&mut self) -> Res<()> {
        loop {
            let len = self.conn.line(MAX_LINE)?;
            let line = self.conn.data()[..len].to_vec();
            self.conn.consume(len + 2);
            match &line[..] {
                b"PONG" => return Ok(()),
                b"PING" => net::send(&mut self.conn.sock, b"PONG\r\n")?,
                b"+OK" => {}
                l if l.starts_with(b"INFO ") => {}
                l if l.starts_with(b"-ERR") => {
                    return Err(format!("the NATS server refused the connection: {}", show(l)))
                }
                l => return Err(format!("unexpected before PONG: {}", show(l))),
            }
        }
    }

    fn create_stream(&mut self, o: &Opts) -> Res<()> {
        let config = format!(
            "{{\"name\":{},\"subjects\":[{}],\"storage\":\"memory\"}}",
            json::quote(&o.stream),
            json::quote(&o.subject)
        );
        let api = format!("$JS.API.STREAM.CREATE.{}", o.stream);
        let mut req = format!("PUB {api} {} {}\r\n", self.inbox, config.len()).into_bytes();
        req.extend_from_slice(config.as_bytes());
        req.extend_from_slice(b"\r\n");
        net::send(&mut self.conn.sock, &req)?;
        let reply = match self.next_msg().map_err(|e| format!("{api}: {e}"))? {
            Arrived::Msg { start, len, total } => {
                let r = self.conn.data()[start..start + len].to_vec();
                self.conn.consume(total);
                r
            }
            Arrived::Status(s) => {
                return Err(format!("{api}: {s} (is JetStream enabled on the server?)"))
            }
        };
        if let Some(err) = json::get(&reply, "error")? {
            // An identical config is answered as a success; "already in use" means another
            // config has the name.
            return Err(format!(
                "{api} refused: {} (delete the stream or pass another --stream)",
                show(err)
            ));
        }
        if json::get(&reply, "config")?.is_none() {
            return Err(format!("{api} answered without a config: {}", show(&reply)));
        }
        Ok(())
    }

    /// Reads until a message arrives on the inbox, answering server `PING`s on the way.
    fn next_msg(&mut self) -> Res<Arrived> {
        loop {
            let len = self.conn.line(MAX_LINE)?;
            let line = &self.conn.data()[..len];
            if line.starts_with(b"MSG ") {
                // MSG <subject> <sid> [reply-to] <#bytes>
                let size = line
                    .rsplit(|&c| c == b' ')
                    .next()
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .and_then(|t| t.parse::<usize>().ok())
                    .ok_or_else(|| format!("bad MSG line: {}", show(line)))?;
                self.conn.need(len + 2 + size + 2)?;
                return Ok(Arrived::Msg { start: len + 2, len: size, total: len + 2 + size + 2 });
            }
            if line.starts_with(b"HMSG ") {
                // HMSG <subject> <sid> [reply-to] <#header bytes> <#total bytes>
                let line = line.to_vec();
                let total = line
                    .rsplit(|&c| c == b' ')
                    .next()
                    .and_then(|t| std::str::from_utf8(t).ok())
                    .and_then(|t| t.parse::<usize>().ok())
                    .ok_or_else(|| format!("bad HMSG line: {}", show(&line)))?;
                self.conn.need(len + 2 + total + 2)?;
                let headers = self.conn.data()[len + 2..len + 2 + total].to_vec();
                self.conn.consume(len + 2 + total + 2);
                let status = headers.split(|&c| c == b'\r').next().unwrap_or_default();
                return Ok(Arrived::Status(format!("answered with headers {}", show(status))));
            }
            let line = line.to_vec();
            self.conn.consume(len + 2);
            match &line[..] {
                b"PING" => net::send(&mut self.conn.sock, b"PONG\r\n")?,
                b"PONG" | b"+OK" => {}
                l if l.starts_with(b"INFO ") => {}
                l if l.starts_with(b"-ERR") => return Err(format!("server error: {}", show(l))),
                l => return Err(format!("unexpected from the server: {}", show(l))),
            }
        }
    }
}

impl Driver for Nats {
    fn prepare(&mut self, _seq: u64) {}

    fn round_trip(&mut self, keep: bool) -> Res<()> {
        net::send(&mut self.conn.sock, &self.request)?;
        match self.next_msg()? {
            Arrived::Msg { start, len, total } => {
                let ack = &self.conn.data()[start..start + len];
                let mut seq = None;
                let mut error = None;
                json::members(ack, |k, v| match k {
                    b"seq" => seq = json::int(v),
                    b"error" => error = Some(v),
                    _ => {}
                })
                .map_err(|e| format!("publish ack {}: {e}", show(ack)))?;
                if let Some(err) = error {
                    return Err(format!("publish refused: {}", show(err)));
                }
                let Some(seq) = seq else {
                    return Err(format!("publish ack without a seq: {}", show(ack)));
                };
                if keep {
                    if self.first_seq.is_none() {
                        self.first_seq = Some(seq);
                    } else {
                        self.last_seq = Some(seq);
                    }
                }
                self.conn.consume(total);
                Ok(())
            }
            Arrived::Status(s) => Err(format!("publish {s} (no stream on the subject?)")),
        }
    }

    fn request_len(&self) -> usize {
        self.request.len()
    }

    fn notes(&self) -> Vec<(String, String)> {
        let n = |v: Option<i64>| v.map_or("null".into(), |s| s.to_string());
        vec![("first_seq".into(), n(self.first_seq)), ("last_seq".into(), n(self.last_seq))]
    }
}
