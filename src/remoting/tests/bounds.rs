//! Decoding cost is bounded by the input (review §1.1): any frame up to 16 MiB, however
//! adversarial its header (many fields, repeated keys, huge numbers, deep nesting, long escaped
//! strings, invalid UTF-8), is decoded or refused with
//!
//! * peak allocation at most `2 × header length + MAX_HEADER_BYTES + 32 KiB`, measured with a
//!   counting global allocator whose counters are per thread (so other tests running at the same
//!   time do not disturb the figure). A header within [`MAX_HEADER_BYTES`] is decoded into an
//!   arena sized from its length (1×), plus serde_json's scratch for escaped keys (below 2× what
//!   it holds, and at most the header): at most 3 × 256 KiB; a longer header is only scanned for
//!   its `code`, `opaque` and `flag`, which allocates nothing beyond that scratch (2×);
//! * work linear in its length: every key comparison made to find duplicates counts the bytes it
//!   compares (`ext::KEY_WORK`), a deterministic figure (no timing).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use crate::remoting::ext::KEY_WORK;
use crate::remoting::frame::{Frame, MAX_FRAME_LEN, MAX_HEADER_BYTES};
use crate::remoting::{RemotingCommand, SerializeType};

thread_local! {
    /// Bytes this thread holds from the allocator right now.
    static LIVE: Cell<usize> = const { Cell::new(0) };
    /// Highest `LIVE` since the last [`measure`] started.
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn grew(n: usize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get().saturating_add(n);
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn shrank(n: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(n)));
}

/// The system allocator, counting per thread what each thread allocates and frees.
struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`; the counting touches only
// const-initialised thread-local `Cell`s, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size());
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grew(new_size - layout.size());
        } else {
            shrank(layout.size() - new_size);
        }
        // SAFETY: `ptr` was allocated by `System` with `layout`; the caller upholds the rest.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Runs `f` and returns its result with the peak of bytes it held at once (its result included)
/// and the key-comparison work it did.
fn measure<R>(f: impl FnOnce() -> R) -> (R, usize, u64) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    KEY_WORK.with(|w| w.set(0));
    let result = f();
    let peak = PEAK.with(Cell::get).saturating_sub(base);
    (result, peak, KEY_WORK.with(Cell::get))
}

/// Appends `"<key>":<value>,` pairs produced by `pair(i)` until `out` holds about `size` bytes.
fn fill(out: &mut String, size: usize, mut pair: impl FnMut(usize, &mut String)) {
    let mut i = 0;
    while out.len() < size {
        if i > 0 {
            out.push(',');
        }
        pair(i, out);
        i += 1;
    }
}

/// Adversarial JSON header shapes.
#[derive(Debug, Clone, Copy)]
enum Json {
    /// `{"k0000001":"", …}`: as many distinct fields as fit.
    ManyFields,
    /// Long keys sharing a prefix, so comparing them is expensive.
    SharedPrefixKeys,
    /// `{"a":1e308,"a":1e308,…}`: a 5-byte number that Display prints in 309 bytes.
    RepeatedHugeNumber,
    /// `{"a":"x","a":"x",…}`.
    RepeatedKey,
    /// One field whose value is a wide array of numbers.
    WideArray,
    /// One field whose value nests arrays deeper than any parser recursion limit.
    DeepNesting,
    /// One field whose value is a long string of escapes.
    EscapedValue,
    /// A long escaped remark.
    EscapedRemark,
    /// Escaped keys (`"\u006b…"`).
    EscapedKeys,
    /// A remark that is a huge number.
    NumberRemark,
}

const JSON_SHAPES: [Json; 10] = [
    Json::ManyFields,
    Json::SharedPrefixKeys,
    Json::RepeatedHugeNumber,
    Json::RepeatedKey,
    Json::WideArray,
    Json::DeepNesting,
    Json::EscapedValue,
    Json::EscapedRemark,
    Json::EscapedKeys,
    Json::NumberRemark,
];

/// A JSON header of about `size` bytes; `opaque` first (as the Rust client) or last (as
/// fastjson, which sorts keys: `code`, `extFields`, `flag`, `language`, `opaque`, …).
fn json_header(shape: Json, size: usize, opaque_first: bool) -> Vec<u8> {
    let mut h = String::with_capacity(size + 256);
    h.push_str(if opaque_first { r#"{"code":10,"opaque":7,"# } else { r#"{"code":10,"# });
    let ext = |h: &mut String, body: &dyn Fn(&mut String)| {
        h.push_str(r#""extFields":{"#);
        body(h);
        h.push_str("},");
    };
    match shape {
        Json::ManyFields => ext(&mut h, &|h| {
            fill(h, size, |i, h| h.push_str(&format!(r#""k{i:07}":"""#)));
        }),
        Json::SharedPrefixKeys => ext(&mut h, &|h| {
            let prefix = "p".repeat(1000);
            fill(h, size, |i, h| h.push_str(&format!(r#""{prefix}{i:07}":"""#)));
        }),
        Json::RepeatedHugeNumber => {
            ext(&mut h, &|h| fill(h, size, |_, h| h.push_str(r#""a":1e308"#)))
        }
        Json::RepeatedKey => ext(&mut h, &|h| fill(h, size, |_, h| h.push_str(r#""a":"x""#))),
        Json::WideArray => ext(&mut h, &|h| {
            h.push_str(r#""v":[0"#);
            while h.len() < size {
                h.push_str(",1");
            }
            h.push(']');
        }),
        Json::DeepNesting => ext(&mut h, &|h| {
            let depth = size / 2;
            h.push_str(r#""v":"#);
            h.push_str(&"[".repeat(depth));
            h.push_str(&"]".repeat(depth));
        }),
        Json::EscapedValue => ext(&mut h, &|h| {
            h.push_str(r#""p":""#);
            while h.len() < size {
                h.push_str(r"x\u0001");
            }
            h.push('"');
        }),
        Json::EscapedRemark => {
            h.push_str(r#""remark":""#);
            while h.len() < size {
                h.push_str(r#"ab\"cd"#);
            }
            h.push_str("\",");
        }
        Json::EscapedKeys => ext(&mut h, &|h| {
            fill(h, size, |i, h| h.push_str(&format!(r#""\u006b{i}":"v""#)));
        }),
        Json::NumberRemark => {
            h.push_str(r#""remark":1"#);
            while h.len() < size {
                h.push('0');
            }
            h.push_str("e10,");
        }
    }
    h.push_str(if opaque_first {
        r#""flag":0}"#
    } else {
        r#""flag":0,"language":"JAVA","opaque":7}"#
    });
    h.into_bytes()
}

/// Adversarial ROCKETMQ binary header shapes.
#[derive(Debug, Clone, Copy)]
enum Binary {
    /// 3-byte keys, empty values: 9 bytes per field.
    ManyFields,
    /// One key repeated.
    RepeatedKey,
    /// Values of invalid UTF-8, which lossy decoding turns into 3-byte U+FFFD each.
    InvalidUtf8,
    /// A long remark of invalid UTF-8.
    InvalidRemark,
}

const BINARY_SHAPES: [Binary; 4] =
    [Binary::ManyFields, Binary::RepeatedKey, Binary::InvalidUtf8, Binary::InvalidRemark];

fn binary_header(shape: Binary, size: usize) -> Vec<u8> {
    let mut ext = BytesMut::new();
    let mut remark = Vec::new();
    match shape {
        Binary::ManyFields => {
            let mut i = 0u32;
            while ext.len() < size {
                ext.put_i16(3);
                ext.put_slice(&i.to_be_bytes()[1..]);
                ext.put_i32(0);
                i += 1;
            }
        }
        Binary::RepeatedKey => {
            while ext.len() < size {
                ext.put_i16(1);
                ext.put_u8(b'a');
                ext.put_i32(1);
                ext.put_u8(b'x');
            }
        }
        Binary::InvalidUtf8 => {
            ext.put_i16(1);
            ext.put_u8(b'a');
            let n = size.max(1);
            ext.put_i32(i32::try_from(n).unwrap_or(i32::MAX));
            ext.put_bytes(0xFF, n);
        }
        Binary::InvalidRemark => remark = vec![0xFF; size],
    }
    let mut h = BytesMut::new();
    h.put_i16(10);
    h.put_u8(0);
    h.put_i16(405);
    h.put_i32(7);
    h.put_i32(0);
    h.put_i32(i32::try_from(remark.len()).unwrap_or(i32::MAX));
    h.put_slice(&remark);
    h.put_i32(i32::try_from(ext.len()).unwrap_or(i32::MAX));
    h.put_slice(&ext);
    h.to_vec()
}

/// Sizes from a few bytes to a whole frame, with the limits' neighbourhoods.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        1usize..4096,
        (MAX_HEADER_BYTES - 4096)..(MAX_HEADER_BYTES + 4096),
        Just(4 * 1024 * 1024),
        Just(MAX_FRAME_LEN - 1024),
    ]
}

fn check(serialize_type: SerializeType, header: Vec<u8>) -> Result<(), TestCaseError> {
    let len = header.len();
    let frame = Frame { serialize_type, header: Bytes::from(header), body: Bytes::new() };
    let (result, peak, work) = measure(|| RemotingCommand::from_frame(frame));
    let allowed = 2 * len + MAX_HEADER_BYTES + 32 * 1024;
    prop_assert!(
        peak <= allowed,
        "decoding a {len}-byte header held {peak} bytes at once (allowed {allowed}): {:?}",
        result.as_ref().map(|c| c.ext_fields.len()).map_err(ToString::to_string)
    );
    let linear = 16 * len as u64 + 4096;
    prop_assert!(work <= linear, "decoding a {len}-byte header compared {work} key bytes");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any JSON header up to 16 MiB decodes or is refused within the allocation and work bounds.
    #[test]
    fn given_any_adversarial_json_header_when_decoding_should_stay_within_linear_bounds(
        shape in proptest::sample::select(JSON_SHAPES.to_vec()),
        size in size(),
        opaque_first in any::<bool>(),
    ) {
        check(SerializeType::Json, json_header(shape, size, opaque_first))?;
    }

    /// The same for the ROCKETMQ binary header.
    #[test]
    fn given_any_adversarial_binary_header_when_decoding_should_stay_within_linear_bounds(
        shape in proptest::sample::select(BINARY_SHAPES.to_vec()),
        size in size(),
    ) {
        check(SerializeType::RocketMq, binary_header(shape, size))?;
    }
}

/// Every shape at every size class, so no shape depends on the random draw.
#[test]
fn given_each_adversarial_shape_at_the_header_limit_and_at_4_mib_should_stay_within_bounds() {
    let mut failures = Vec::new();
    for size in [100, 64 * 1024, MAX_HEADER_BYTES - 64, MAX_HEADER_BYTES + 64, 4 * 1024 * 1024] {
        for shape in JSON_SHAPES {
            for opaque_first in [false, true] {
                if let Err(e) = check(SerializeType::Json, json_header(shape, size, opaque_first)) {
                    failures.push(format!("{shape:?} at {size} bytes: {e}"));
                }
            }
        }
        for shape in BINARY_SHAPES {
            if let Err(e) = check(SerializeType::RocketMq, binary_header(shape, size)) {
                failures.push(format!("{shape:?} at {size} bytes: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "decoding exceeded its bounds:\n{}", failures.join("\n"));
}
