use std::collections::HashSet;

use super::*;

fn assert_unique(table: &[(i32, &str)], family: &str) {
    let mut codes = HashSet::new();
    let mut names = HashSet::new();
    for (code, name) in table {
        assert!(codes.insert(code), "{family} code {code} ({name}) is duplicated");
        assert!(names.insert(name), "{family} name {name} is duplicated");
    }
}

#[test]
fn given_code_tables_should_have_no_duplicates() {
    assert_unique(request_code::ALL, "request");
    assert_unique(response_code::ALL, "response");
}

#[test]
fn given_known_and_unknown_codes_when_naming_should_answer() {
    assert_eq!(request_code::name(10), Some("SEND_MESSAGE"));
    assert_eq!(request_code::name(9999), None);
    assert_eq!(response_code::name(21), Some("PULL_OFFSET_MOVED"));
    assert_eq!(request_code::SEND_BATCH_MESSAGE, 320);
    assert_eq!(response_code::RPC_TIME_OUT, -1006);
}
