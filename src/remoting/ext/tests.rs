use super::*;

fn decode(json: &str) -> ExtFields {
    serde_json::from_str(json).expect("lenient ext decoding accepts this")
}

#[test]
fn given_many_repeated_keys_when_decoding_should_keep_the_first_position_and_last_value() {
    let mut json = String::from(r#"{"first":"1""#);
    for i in 0..40 {
        json.push_str(&format!(r#","k{}":"{i}""#, i % 20));
    }
    json.push_str(r#","first":"2"}"#);
    let ext = decode(&json);
    assert_eq!(ext.len(), 21, "one entry per distinct key");
    assert_eq!(ext.iter().next(), Some(("first", "2")), "first position, last value");
    assert_eq!(ext.get("k3"), Some("23"));
}

proptest::proptest! {
    /// `get_many` answers as `get` does for every key, whatever the fields' order, with
    /// keys missing, repeated or asked twice.
    #[test]
    fn get_many_agrees_with_get(
        pairs in proptest::collection::vec(("[a-e]{1,2}", "[x-z]{0,2}"), 0..8),
        keys in proptest::array::uniform6("[a-e]{1,2}"),
    ) {
        let ext: ExtFields = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let keys = keys.each_ref().map(String::as_str);
        let expected = keys.map(|k| ext.get(k));
        proptest::prop_assert_eq!(ext.get_many(&keys), expected);
    }
}

#[test]
fn given_duplicate_keys_when_decoding_should_keep_last() {
    let ext = decode(r#"{"k":"1","k":"2"}"#);
    assert_eq!(ext.len(), 1);
    assert_eq!(ext.get("k"), Some("2"));
}

#[test]
fn given_inserts_and_removes_when_reading_should_behave_like_an_ordered_map() {
    let mut ext = ExtFields::new();
    ext.insert("a", "1");
    ext.insert("b", "2");
    ext.insert("a", "3");
    ext.insert_i64("c", -42);
    ext.insert_bool("d", true);
    let pairs: Vec<_> = ext.iter().collect();
    assert_eq!(
        pairs,
        vec![("a", "3"), ("b", "2"), ("c", "-42"), ("d", "true")],
        "replacement keeps position"
    );
    assert!(ext.remove("b"));
    assert!(!ext.remove("b"));
    assert_eq!(ext.get("b"), None);
    assert_eq!(ext.len(), 3);
}

#[test]
fn given_typed_getters_when_fields_are_bad_should_name_the_field() {
    let ext: ExtFields =
        [("queueId", "abc"), ("empty", ""), ("flag", "TRUE"), ("b", "yes")].into_iter().collect();
    assert_eq!(
        ext.required_i32("queueId").map_err(|e| e.to_string()),
        Err("the custom field <queueId> is not a number: abc".to_owned())
    );
    assert_eq!(ext.required_i32("missing"), Err(HeaderError::Missing { field: "missing" }));
    assert_eq!(ext.optional_i32("missing"), Ok(None));
    assert_eq!(ext.optional_i64("empty"), Ok(None), "empty optional is absent");
    assert!(ext.required_i64("empty").is_err(), "empty required number is malformed");
    assert_eq!(ext.optional_bool("flag"), Ok(Some(true)));
    assert!(matches!(ext.optional_bool("b"), Err(HeaderError::NotABoolean { field: "b", .. })));
    let too_big: ExtFields = [("q", "2147483648")].into_iter().collect();
    assert!(too_big.required_i32("q").is_err(), "i32 overflow is not a number");
    assert_eq!(too_big.required_i64("q"), Ok(2_147_483_648));
}

#[test]
fn given_equal_content_in_different_order_should_compare_equal() {
    let a: ExtFields = [("x", "1"), ("y", "2")].into_iter().collect();
    let mut b: ExtFields = [("y", "0"), ("x", "1")].into_iter().collect();
    assert_ne!(a, b);
    b.insert("y", "2");
    assert_eq!(a, b, "equality is by content, not arena layout");
}
