//! baiji's remoting face: SEND_MESSAGE_V2 (request code 310) as the Java 4.9.7 client
//! (`DefaultMQProducer.send`, sync) writes it, and the answer frame, whose JSON header must
//! say `"code":0` (SUCCESS).
//!
//! Frame: `[u32 BE length = 4 + header + body][u32 BE: serialize type 0 (JSON) << 24 | header
//! length][header JSON][body]`. The header is fastjson's: fields sorted, no `remark`,
//! `extFields` values all strings, `a..k,m,n` in HashMap order (which is `a..n` for one-letter
//! keys); `i`, the properties, is `UNIQ_KEY\u0001<32 hex>\u0002WAIT\u0001true` (4.9.1–5.1.4
//! write no trailing 0x02, and HashMap order puts UNIQ_KEY before WAIT). Per request the
//! opaque (10 digits, counting up from 1,000,000,000 so the width never changes) and the last
//! 8 hex digits of UNIQ_KEY (the client's counter) are patched in place.
//!
//! Setup sends one such message (not measured). If the broker answers TOPIC_NOT_EXIST (a
//! broker with auto-creation off), it creates the topic with UPDATE_AND_CREATE_TOPIC (code
//! 17, 4 queues, perm 6) and tries again; any other refusal aborts with the broker's remark.

use std::net::TcpStream;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::net::{self, show, Conn};
use crate::{json, Driver, Opts, Res};

const SEND_MESSAGE_V2: i32 = 310;
const UPDATE_AND_CREATE_TOPIC: i32 = 17;
const SUCCESS: i64 = 0;
const TOPIC_NOT_EXIST: i64 = 17;
/// `MQVersion` of the client the header claims to be (4.9.x; baiji reads it only to gate
/// `maxReconsumeTimes` on retry topics, at 121).
const VERSION: i32 = 403;
const OPAQUE_BASE: u64 = 1_000_000_000;
/// Setup's sends use sequence numbers far from the loop's.
const SETUP_SEQ: u64 = 0xFFFF_0000;

/// The remoting driver.
#[derive(Debug)]
pub(crate) struct Remoting {
    conn: Conn,
    frame: Vec<u8>,
    opaque_at: usize,
    uniq_tail_at: usize,
    opaque: i64,
    first: Option<(i64, i64)>,
    last: Option<(i64, i64)>,
}

/// What an answer frame's header says.
#[derive(Debug, Default)]
struct Answer {
    code: Option<i64>,
    opaque: Option<i64>,
    flag: i64,
    remark: Option<String>,
    queue_id: Option<i64>,
    queue_offset: Option<i64>,
}

/// A remoting frame with a JSON header.
fn frame(header: &str, body: &[u8]) -> Vec<u8> {
    let h = header.as_bytes();
    let mut f = Vec::with_capacity(8 + h.len() + body.len());
    f.extend_from_slice(&u32::try_from(4 + h.len() + body.len()).unwrap_or(u32::MAX).to_be_bytes());
    f.extend_from_slice(&u32::try_from(h.len() & 0x00FF_FFFF).unwrap_or(0).to_be_bytes());
    f.extend_from_slice(h);
    f.extend_from_slice(body);
    f
}

/// A request header as fastjson writes it, with `ext` (already in wire order) as extFields.
fn header(code: i32, opaque: u64, ext: &[(&str, &str)]) -> String {
    let ext: Vec<String> =
        ext.iter().map(|(k, v)| format!("{}:{}", json::quote(k), json::quote(v))).collect();
    format!(
        "{{\"code\":{code},\"extFields\":{{{}}},\"flag\":0,\"language\":\"JAVA\",\"opaque\":{opaque},\
         \"serializeTypeCurrentRPC\":\"JSON\",\"version\":{VERSION}}}",
        ext.join(",")
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

/// Writes `v` as `out.len()` upper-case hex digits into `out`.
pub(crate) fn patch_hex(out: &mut [u8], mut v: u64) {
    for d in out.iter_mut().rev() {
        *d = b"0123456789ABCDEF"[(v & 0xf) as usize];
        v >>= 4;
    }
}

impl Remoting {
    pub(crate) fn setup(sock: TcpStream, o: &Opts) -> Res<Remoting> {
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
        // MessageClientIDSetter: 16 bytes in hex, IPv4, pid, class loader hash, then ms since
        // the month began and a counter; the last 8 hex digits (time's low half and the
        // counter) are the ones patched.
        let pid = std::process::id();
        let uniq = format!(
            "7F000001{}{}{}00000000",
            hex(&(pid as u16).to_be_bytes()),
            hex(&0x1B6D_4A22u32.to_be_bytes()),
            hex(&((now_ms as u32 >> 16) as u16).to_be_bytes())
        );
        debug_assert_eq!(uniq.len(), 32);
        let props = format!("UNIQ_KEY\u{1}{uniq}\u{2}WAIT\u{1}true");
        let born = now_ms.to_string();
        let ext = [
            ("a", o.group.as_str()),
            ("b", o.topic.as_str()),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "0"),
            ("f", "0"),
            ("g", born.as_str()),
            ("h", "0"),
            ("i", props.as_str()),
            ("j", "0"),
            ("k", "false"),
            ("m", "false"),
            ("n", o.broker_name.as_str()),
        ];
        let h = header(SEND_MESSAGE_V2, OPAQUE_BASE, &ext);
        let frame = frame(&h, &crate::payload(o.size));
        let find = |needle: &[u8]| frame.windows(needle.len()).position(|w| w == needle);
        let opaque_at = find(format!("\"opaque\":{OPAQUE_BASE}").as_bytes())
            .ok_or("internal: no opaque in the header")?
            + "\"opaque\":".len();
        let uniq_tail_at = find(uniq.as_bytes()).ok_or("internal: no UNIQ_KEY in the header")? + 24;
        let mut r = Remoting {
            conn: Conn::new(sock),
            frame,
            opaque_at,
            uniq_tail_at,
            opaque: 0,
            first: None,
            last: None,
        };
        r.prepare(SETUP_SEQ);
        let a = r.exchange_send().map_err(|e| format!("the first send (setup): {e}"))?;
        match a.code {
            Some(SUCCESS) => {}
            Some(TOPIC_NOT_EXIST) => {
                eprintln!("baiji-remoting: topic {} does not exist; creating it", o.topic);
                r.create_topic(o)?;
                r.prepare(SETUP_SEQ + 1);
                let a = r.exchange_send()?;
                if a.code != Some(SUCCESS) {
                    return Err(refused("the send after creating the topic", &a));
                }
            }
            _ => return Err(refused("the first send", &a)),
        }
        Ok(r)
    }

    fn create_topic(&mut self, o: &Opts) -> Res<()> {
        let ext = [
            ("topic", o.topic.as_str()),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", "4"),
            ("writeQueueNums", "4"),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("topicSysFlag", "0"),
            ("order", "false"),
        ];
        let opaque = opaque_of(SETUP_SEQ + 100);
        let f = frame(&header(UPDATE_AND_CREATE_TOPIC, opaque, &ext), &[]);
        net::send(&mut self.conn.sock, &f)?;
        let a = self.read_answer(opaque as i64, false)?;
        if a.code != Some(SUCCESS) {
            return Err(refused("UPDATE_AND_CREATE_TOPIC", &a));
        }
        Ok(())
    }

    /// Sends the prepared frame and reads its answer (any code).
    fn exchange_send(&mut self) -> Res<Answer> {
        net::send(&mut self.conn.sock, &self.frame)?;
        self.read_answer(self.opaque, true)
    }

    /// Reads frames until the answer to `opaque` (requests the broker sends are skipped).
    fn read_answer(&mut self, opaque: i64, with_ext: bool) -> Res<Answer> {
        loop {
            self.conn.need(8)?;
            let d = self.conn.data();
            let len = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
            let word = u32::from_be_bytes([d[4], d[5], d[6], d[7]]);
            if !(4..=16 << 20).contains(&len) {
                return Err(format!("answer frame length {len}: not a remoting frame"));
            }
            if word >> 24 != 0 {
                return Err(format!("answer header serialize type {}, not JSON", word >> 24));
            }
            let hlen = (word & 0x00FF_FFFF) as usize;
            if hlen + 4 > len {
                return Err(format!("answer header length {hlen} exceeds its frame ({len})"));
            }
            self.conn.need(4 + len)?;
            let h = &self.conn.data()[8..8 + hlen];
            let mut a = Answer::default();
            let mut ext = None;
            json::members(h, |k, v| match k {
                b"code" => a.code = json::int(v),
                b"opaque" => a.opaque = json::int(v),
                b"flag" => a.flag = json::int(v).unwrap_or(0),
                b"remark" if v != b"null" => a.remark = Some(json::text(v)),
                b"extFields" => ext = Some(v),
                _ => {}
            })
            .map_err(|e| format!("answer header {}: {e}", show(h)))?;
            if with_ext {
                if let Some(ext) = ext.filter(|e| e.starts_with(b"{")) {
                    json::members(ext, |k, v| match k {
                        b"queueId" => a.queue_id = json::int(v),
                        b"queueOffset" => a.queue_offset = json::int(v),
                        _ => {}
                    })
                    .map_err(|e| format!("answer extFields {}: {e}", show(ext)))?;
                }
            }
            self.conn.consume(4 + len);
            if a.flag & 1 == 0 {
                continue; // a request from the broker, not an answer
            }
            if a.opaque != Some(opaque) {
                return Err(format!(
                    "answer to opaque {:?} while waiting for {opaque} (code {:?}, remark {:?})",
                    a.opaque, a.code, a.remark
                ));
            }
            return Ok(a);
        }
    }
}

/// The opaque of request `seq`: always 10 digits, always an int32.
fn opaque_of(seq: u64) -> u64 {
    OPAQUE_BASE + seq % OPAQUE_BASE
}

fn refused(what: &str, a: &Answer) -> String {
    format!(
        "{what} was refused: code {}, remark {:?}",
        a.code.map_or("missing".into(), |c| c.to_string()),
        a.remark.as_deref().unwrap_or("")
    )
}

impl Driver for Remoting {
    fn prepare(&mut self, seq: u64) {
        let opaque = opaque_of(seq);
        let at = self.opaque_at;
        self.frame[at..at + 10].copy_from_slice(opaque.to_string().as_bytes());
        self.opaque = opaque as i64;
        let at = self.uniq_tail_at;
        patch_hex(&mut self.frame[at..at + 8], seq);
    }

    fn round_trip(&mut self, keep: bool) -> Res<()> {
        let a = self.exchange_send()?;
        if a.code != Some(SUCCESS) {
            return Err(refused("SEND_MESSAGE_V2", &a));
        }
        if keep {
            let at = (a.queue_id.unwrap_or(-1), a.queue_offset.unwrap_or(-1));
            if self.first.is_none() {
                self.first = Some(at);
            } else {
                self.last = Some(at);
            }
        }
        Ok(())
    }

    fn request_len(&self) -> usize {
        self.frame.len()
    }

    fn notes(&self) -> Vec<(String, String)> {
        let n = |v: Option<(i64, i64)>, i: usize| {
            v.map_or("null".into(), |(q, o)| if i == 0 { q } else { o }.to_string())
        };
        vec![
            ("queue_id".into(), n(self.first, 0)),
            ("first_offset".into(), n(self.first, 1)),
            ("last_offset".into(), n(self.last, 1)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_layout_and_patching() {
        let h = header(310, OPAQUE_BASE, &[("a", "g"), ("i", "UNIQ_KEY\u{1}AB\u{2}WAIT\u{1}true")]);
        assert_eq!(
            h,
            "{\"code\":310,\"extFields\":{\"a\":\"g\",\"i\":\"UNIQ_KEY\\u0001AB\\u0002WAIT\\u0001true\"},\
             \"flag\":0,\"language\":\"JAVA\",\"opaque\":1000000000,\
             \"serializeTypeCurrentRPC\":\"JSON\",\"version\":403}"
        );
        let f = frame(&h, b"xyz");
        assert_eq!(u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize, f.len() - 4);
        assert_eq!(u32::from_be_bytes([f[4], f[5], f[6], f[7]]) as usize, h.len());
        assert_eq!(&f[f.len() - 3..], b"xyz");
        assert_eq!(opaque_of(SETUP_SEQ + 100).to_string().len(), 10);
        assert!(opaque_of(SETUP_SEQ + 100) <= i32::MAX as u64);
        let mut t = *b"00000000";
        patch_hex(&mut t, 0x1234_abcd);
        assert_eq!(&t, b"1234ABCD");
    }
}
