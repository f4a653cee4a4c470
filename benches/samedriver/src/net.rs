//! The socket and the read buffer every driver uses.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::Res;

/// One TCP connection with `TCP_NODELAY`, and reads that fail after `timeout` of silence.
pub(crate) fn connect(addr: SocketAddr, timeout: Duration) -> Res<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    s.set_nodelay(true).map_err(|e| format!("TCP_NODELAY on {addr}: {e}"))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| format!("read timeout on {addr}: {e}"))?;
    s.set_write_timeout(Some(timeout)).map_err(|e| format!("write timeout on {addr}: {e}"))?;
    Ok(s)
}

/// Writes `bytes` with one call (a short write, which a loopback socket with room never
/// makes for these sizes, is finished with more).
pub(crate) fn send(s: &mut TcpStream, bytes: &[u8]) -> Res<()> {
    s.write_all(bytes).map_err(|e| format!("write failed: {e}"))
}

/// A connection's incoming bytes: `buf[pos..end]` have arrived and not been consumed.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) sock: TcpStream,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
}

impl Conn {
    pub(crate) fn new(sock: TcpStream) -> Conn {
        Conn { sock, buf: vec![0; 64 * 1024], pos: 0, end: 0 }
    }

    /// The bytes that have arrived and are not consumed.
    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[self.pos..self.end]
    }

    /// Marks `n` bytes as consumed.
    pub(crate) fn consume(&mut self, n: usize) {
        self.pos += n;
        debug_assert!(self.pos <= self.end);
        if self.pos == self.end {
            self.pos = 0;
            self.end = 0;
        }
    }

    /// Reads once more from the socket (at least one byte, or an error).
    pub(crate) fn fill(&mut self) -> Res<()> {
        if self.end == self.buf.len() {
            if self.pos > 0 {
                self.buf.copy_within(self.pos..self.end, 0);
                self.end -= self.pos;
                self.pos = 0;
            } else {
                let len = self.buf.len();
                self.buf.resize(len * 2, 0);
            }
        }
        loop {
            match self.sock.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err("no answer within the timeout (--timeout-ms)".into())
                }
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    }

    /// Reads until at least `n` bytes are unconsumed.
    pub(crate) fn need(&mut self, n: usize) -> Res<()> {
        while self.end - self.pos < n {
            if self.pos + n > self.buf.len() && self.pos > 0 {
                self.buf.copy_within(self.pos..self.end, 0);
                self.end -= self.pos;
                self.pos = 0;
            }
            if n > self.buf.len() {
                self.buf.resize(n.next_power_of_two(), 0);
            }
            self.fill()?;
        }
        Ok(())
    }

    /// Reads until a CRLF-ended line is unconsumed; its length without the CRLF. Refuses
    /// lines longer than `max`.
    pub(crate) fn line(&mut self, max: usize) -> Res<usize> {
        let mut from = 0;
        loop {
            let d = self.data();
            if let Some(i) = d[from..].windows(2).position(|w| w == b"\r\n") {
                return Ok(from + i);
            }
            if d.len() > max {
                return Err(format!(
                    "no line end in the first {max} bytes of an answer: {}",
                    show(&d[..max.min(200)])
                ));
            }
            from = d.len().saturating_sub(1);
            self.fill()?;
        }
    }
}

/// Bytes for an error message: UTF-8 with control characters escaped, cut at 300.
pub(crate) fn show(b: &[u8]) -> String {
    let cut = &b[..b.len().min(300)];
    let mut s: String = String::from_utf8_lossy(cut).escape_debug().collect();
    if b.len() > cut.len() {
        s.push('…');
    }
    s
}
