//! The floor: a loopback TCP round trip of the benchmark's message size, measured in the same
//! run with the same runtime, against an echo server on its own OS thread (as a broker runs in
//! its own process).
//!
//! Measured twice: back to back (both threads stay hot), and, for a paced workload, at the
//! workload's own rate, so each round trip starts from idle threads exactly as a paced message
//! does. On this VM the two differ by 2–3x (waking an idle vCPU is the larger part of a paced
//! round trip), so the paced one is the floor a paced workload is held against.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::stats::new_histogram;
use super::{BenchError, BenchResult};

/// Measures `rounds` ping-pongs of `size` bytes (plus a 4-byte length, as a frame has), one
/// every `interval` when given (paced), else back to back.
pub(crate) async fn measure(
    rounds: usize,
    size: usize,
    interval: Option<std::time::Duration>,
) -> BenchResult<Histogram<u64>> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| BenchError::io("tcp probe: bind", e))?;
    let addr = listener.local_addr().map_err(|e| BenchError::io("tcp probe: address", e))?;
    let server = std::thread::Builder::new()
        .name("tcp-echo".into())
        .spawn(move || {
            let Ok((mut s, _)) = listener.accept() else { return };
            let _ = s.set_nodelay(true);
            let mut buf = vec![0u8; 4 + size];
            while s.read_exact(&mut buf).is_ok() {
                if s.write_all(&buf).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| BenchError::io("tcp probe: thread", e))?;
    let mut c = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| BenchError::io("tcp probe: connect", e))?;
    c.set_nodelay(true).map_err(|e| BenchError::io("tcp probe: nodelay", e))?;
    let mut msg = vec![b'x'; 4 + size];
    msg[..4].copy_from_slice(&u32::try_from(size).unwrap_or(u32::MAX).to_be_bytes());
    let mut back = vec![0u8; 4 + size];
    let mut h = new_histogram();
    let mut next = tokio::time::Instant::now();
    for i in 0..rounds + rounds / 10 {
        if let Some(every) = interval {
            next += every;
            tokio::time::sleep_until(next).await;
        }
        let t = Instant::now();
        c.write_all(&msg).await.map_err(|e| BenchError::io("tcp probe: write", e))?;
        c.read_exact(&mut back).await.map_err(|e| BenchError::io("tcp probe: read", e))?;
        // The first tenth warms up.
        if i >= rounds / 10 {
            let _ = h.record(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1));
        }
    }
    drop(c);
    let _ = server.join();
    Ok(h)
}
