//! Redis: `XADD <stream> * f <payload>` as one RESP array, answered by a bulk string with the
//! new entry's id (`$15\r\n1712345678901-0\r\n`); an error answer starts with `-`. No
//! `MAXLEN`: the stream grows by one entry per request (22,000 entries of 128 B in a default
//! run, a few MiB), and every run starts a fresh server.

use std::net::TcpStream;

use crate::net::{self, show, Conn};
use crate::{json, Driver, Opts, Res};

/// The Redis driver.
#[derive(Debug)]
pub(crate) struct Redis {
    conn: Conn,
    request: Vec<u8>,
    first_id: Option<String>,
    last_id: Option<String>,
}

/// `args` as a RESP array of bulk strings.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

impl Redis {
    pub(crate) fn new(sock: TcpStream, o: &Opts) -> Redis {
        let body = crate::payload(o.size);
        let request = resp(&[b"XADD", o.stream.as_bytes(), b"*", b"f", &body]);
        Redis { conn: Conn::new(sock), request, first_id: None, last_id: None }
    }
}

impl Driver for Redis {
    fn prepare(&mut self, _seq: u64) {}

    fn round_trip(&mut self, keep: bool) -> Res<()> {
        net::send(&mut self.conn.sock, &self.request)?;
        let n = self.conn.line(4096)?;
        let line = &self.conn.data()[..n];
        match line.first() {
            Some(b'$') => {
                let len: usize = std::str::from_utf8(&line[1..])
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| format!("XADD answered {}", show(line)))?;
                self.conn.need(n + 2 + len + 2)?;
                if keep {
                    let id = String::from_utf8_lossy(&self.conn.data()[n + 2..n + 2 + len]);
                    if self.first_id.is_none() {
                        self.first_id = Some(id.into_owned());
                    } else {
                        self.last_id = Some(id.into_owned());
                    }
                }
                self.conn.consume(n + 2 + len + 2);
                Ok(())
            }
            _ => Err(format!("XADD answered {}", show(line))),
        }
    }

    fn request_len(&self) -> usize {
        self.request.len()
    }

    fn notes(&self) -> Vec<(String, String)> {
        let q = |v: &Option<String>| v.as_deref().map_or("null".into(), json::quote);
        vec![("first_id".into(), q(&self.first_id)), ("last_id".into(), q(&self.last_id))]
    }
}
