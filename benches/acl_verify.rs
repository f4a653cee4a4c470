//! What RocketMQ ACL signature verification costs per request (criterion): `acl::verify` of a
//! `SEND_MESSAGE_V2` header as the Java client sends it (its 13 custom fields, `AccessKey` and
//! `Signature`) over bodies of 0 B, 1 KiB and 16 KiB. The broker runs exactly this on every
//! request when `acl-file` is set (plus a map lookup of the account and of each resource).
//!
//! Threads: ONE.

use std::hint::black_box;
use std::time::Duration;

use baiji::broker::acl::{sign, verify, SIGNATURE};
use baiji::remoting::ExtFields;
use criterion::{Criterion, Throughput};

fn send_v2_fields() -> ExtFields {
    let mut ext = ExtFields::new();
    for (k, v) in [
        ("a", "please_rename_unique_group_name"),
        ("b", "TopicTest"),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", "3"),
        ("f", "0"),
        ("g", "1700000000000"),
        ("h", "0"),
        ("i", "TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}7F0000010B2C18B4AAC2713C5AB60000\u{2}WAIT\u{1}true\u{2}"),
        ("j", "0"),
        ("k", "false"),
        ("l", "16"),
        ("m", "false"),
        ("AccessKey", "rocketmq2"),
    ] {
        ext.insert(k, v);
    }
    ext
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("acl_verify");
    g.measurement_time(Duration::from_secs(3));
    for size in [0usize, 1024, 16 * 1024] {
        let body = vec![b'x'; size];
        let mut ext = send_v2_fields();
        let sig = sign(&ext, &body, "12345678");
        ext.insert(SIGNATURE, &sig);
        assert!(verify(&ext, &body, "12345678"), "the bench verifies a good signature");
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("send_v2/body_{size}"), |b| {
            b.iter(|| black_box(verify(black_box(&ext), black_box(&body), "12345678")))
        });
    }
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
