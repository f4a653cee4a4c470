use super::*;

#[test]
fn given_missing_field_when_formatting_should_use_java_wording() {
    let e = HeaderError::Missing { field: "queueId" };
    assert_eq!(e.to_string(), "the custom field <queueId> is null");
    let e = HeaderError::NotANumber { field: "queueId", value: "abc".into() };
    assert_eq!(e.to_string(), "the custom field <queueId> is not a number: abc");
    assert_eq!(e.field(), "queueId");
}

#[test]
fn given_huge_value_when_quoting_should_truncate_at_char_boundary() {
    let long = "é".repeat(100);
    let q = quote(&long);
    assert!(q.len() <= QUOTE_LIMIT + 3, "quote must be bounded, got {}", q.len());
    assert!(q.ends_with("..."), "truncation must be visible");
    assert_eq!(quote("short"), "short");
}
