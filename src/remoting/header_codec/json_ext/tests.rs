use super::*;

fn decode(json: &str) -> ExtFields {
    serde_json::from_str(json).expect("lenient ext decoding accepts this")
}

#[test]
fn given_ali_ons_raw_scalars_when_decoding_should_store_their_string_form() {
    let ext = decode(
        r#"{"queueId":0,"unitMode":false,"bornTimestamp":1700000000123,"neg":-5,"f":1.5,"big":1e20,"s":"x","n":null}"#,
    );
    assert_eq!(ext.get("queueId"), Some("0"), "integers print as plain decimal");
    assert_eq!(ext.get("unitMode"), Some("false"), "booleans print as true/false");
    assert_eq!(ext.get("bornTimestamp"), Some("1700000000123"));
    assert_eq!(ext.get("neg"), Some("-5"));
    assert_eq!(ext.get("f"), Some("1.5"));
    assert_eq!(ext.get("big"), Some("1e20"), "numbers keep the text the client wrote");
    assert_eq!(ext.get("s"), Some("x"));
    assert!(!ext.contains_key("n"), "null values are skipped");
    assert_eq!(ext.len(), 7);
}

#[test]
fn given_huge_numbers_and_escapes_when_decoding_should_keep_them_as_written() {
    let ext = decode(
        r#"{"a":1e308,"b":-0.0,"c":"x\u0001y\"z\\\/","d":"\ud83d\ude00","e":"\ud83d!","f":"é"}"#,
    );
    assert_eq!(ext.get("a"), Some("1e308"), "5 bytes stay 5 bytes, not 309");
    assert_eq!(ext.get("b"), Some("-0.0"));
    assert_eq!(ext.get("c"), Some("x\u{1}y\"z\\/"), "escapes are decoded");
    assert_eq!(ext.get("d"), Some("\u{1F600}"), "a surrogate pair is one character");
    assert_eq!(ext.get("e"), Some("\u{FFFD}!"), "a lone surrogate is replaced");
    assert_eq!(ext.get("f"), Some("é"));
}

#[test]
fn given_more_fields_than_the_limit_when_decoding_should_refuse() {
    let at_limit: String =
        (0..MAX_EXT_FIELDS).map(|i| format!(r#""k{i}":"v""#)).collect::<Vec<_>>().join(",");
    assert_eq!(decode(&format!("{{{at_limit}}}")).len(), MAX_EXT_FIELDS);
    let over = format!(r#"{{{at_limit},"one":"more"}}"#);
    let err = serde_json::from_str::<ExtFields>(&over).expect_err("over the limit");
    assert!(err.to_string().contains("at most 256"), "{err}");
}

#[test]
fn given_nested_values_when_decoding_should_keep_json_text() {
    let ext = decode(r#"{"o":{"a":1},"l":[1,"x"],"after":"ok"}"#);
    assert_eq!(ext.get("o"), Some(r#"{"a":1}"#));
    assert_eq!(ext.get("l"), Some(r#"[1,"x"]"#));
    assert_eq!(ext.get("after"), Some("ok"), "decoding continues after a nested value");
}

#[test]
fn given_null_ext_fields_when_decoding_should_be_empty() {
    assert!(decode("null").is_empty());
    assert!(decode("{}").is_empty());
}
