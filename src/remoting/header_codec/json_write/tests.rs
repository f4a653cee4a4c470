use super::*;

fn written(s: &str) -> String {
    let mut dst = BytesMut::new();
    write_str(&mut dst, s);
    String::from_utf8(dst.to_vec()).expect("writer output is UTF-8")
}

#[test]
fn given_special_characters_when_writing_string_should_produce_json_that_round_trips() {
    for s in [
        "",
        "plain",
        "quote\" and backslash\\",
        "line\nbreak\ttab\r\u{8}\u{c}",
        "nul\u{0}\u{1f}",
        "unicode 中文 ✓",
        "\u{7f}",
    ] {
        let json = written(s);
        let back: String = serde_json::from_str(&json).expect("escaped output must be valid JSON");
        assert_eq!(back, s, "string must survive the hand-written escaper: {json}");
    }
}

#[test]
fn given_extreme_integers_when_formatting_should_match_std() {
    for v in [0, 1, -1, 9, 10, 475, i64::from(i32::MIN), i64::MAX, i64::MIN] {
        let mut dst = BytesMut::new();
        write_i64(&mut dst, v);
        assert_eq!(&dst[..], v.to_string().as_bytes(), "decimal form of {v}");
    }
}
