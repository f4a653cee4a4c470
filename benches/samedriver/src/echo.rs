//! The floor: a blocking TCP echo server (a thread per connection, writing back exactly what
//! arrives) and its driver, which sends the `--size` payload bytes alone (no framing) and
//! reads until as many bytes have come back.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};

use crate::net::{self, Conn};
use crate::{Driver, Opts, Res};

/// Serves the echo on `bind:port` until the process is killed.
pub(crate) fn serve(bind: &str, port: u16) -> Res<()> {
    let listener = TcpListener::bind((bind, port))
        .map_err(|e| format!("cannot listen on {bind}:{port}: {e}"))?;
    eprintln!("echo-server: listening on {bind}:{port}");
    for conn in listener.incoming() {
        match conn {
            Ok(s) => {
                std::thread::spawn(move || {
                    if let Err(e) = echo(s) {
                        eprintln!("echo-server: connection: {e}");
                    }
                });
            }
            Err(e) => eprintln!("echo-server: accept: {e}"),
        }
    }
    Ok(())
}

fn echo(mut s: TcpStream) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(e),
        };
        s.write_all(&buf[..n])?;
    }
}

/// The echo driver.
#[derive(Debug)]
pub(crate) struct Echo {
    conn: Conn,
    request: Vec<u8>,
}

impl Echo {
    pub(crate) fn new(sock: TcpStream, o: &Opts) -> Echo {
        Echo { conn: Conn::new(sock), request: crate::payload(o.size) }
    }
}

impl Driver for Echo {
    fn prepare(&mut self, _seq: u64) {}

    fn round_trip(&mut self, _keep: bool) -> Res<()> {
        net::send(&mut self.conn.sock, &self.request)?;
        let n = self.request.len();
        self.conn.need(n)?;
        if self.conn.data()[..n] != self.request[..] {
            return Err("the echo differs from what was sent".into());
        }
        self.conn.consume(n);
        Ok(())
    }

    fn request_len(&self) -> usize {
        self.request.len()
    }

    fn notes(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}
