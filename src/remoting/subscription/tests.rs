#[test]
fn given_many_repeated_tags_when_parsing_should_keep_each_once_in_first_order() {
    let expr: String = (0..20_000).map(|i| format!("T{} || ", i % 1000)).collect();
    let SubscriptionExpr::Tags(tags) = SubscriptionExpr::parse(&expr) else {
        panic!("tags expected")
    };
    assert_eq!(tags.len(), 1000, "each distinct tag once");
    assert_eq!(tags.first().map(String::as_str), Some("T0"));
    assert_eq!(tags.last().map(String::as_str), Some("T999"), "first-occurrence order");
}

use super::*;

#[test]
fn given_expressions_when_parsing_should_trim_and_drop_empties() {
    assert_eq!(SubscriptionExpr::parse("*"), SubscriptionExpr::All);
    assert_eq!(SubscriptionExpr::parse(""), SubscriptionExpr::All);
    assert_eq!(SubscriptionExpr::parse(" || "), SubscriptionExpr::All);
    assert_eq!(
        SubscriptionExpr::parse("TagA || TagB||TagA|| "),
        SubscriptionExpr::Tags(vec!["TagA".into(), "TagB".into()])
    );
    assert_eq!(
        SubscriptionExpr::parse("TagA || TagB").codes(),
        vec![tag_hash("TagA"), tag_hash("TagB")]
    );
}

#[test]
fn given_rust_client_untrimmed_code_set_when_matching_should_use_tag_names() {
    let sub = SubscriptionData {
        topic: "T".into(),
        sub_string: "TagA || TagB".into(),
        tags_set: vec!["TagA".into(), "TagB".into()],
        code_set: vec![tag_hash("TagA "), tag_hash(" TagB")],
        ..SubscriptionData::default()
    };
    let m = TagMatcher::for_subscription(&sub);
    assert!(m.matches_tag(Some("TagA")), "names in tagsSet win over the wrong codeSet");
    assert!(m.matches_tag(Some("TagB")));
    assert!(!m.matches_tag(Some("TagC")));
    assert!(!m.matches_tag(None), "untagged messages never match a tag subscription");
}

#[test]
fn given_only_codes_when_matching_should_compare_hashes() {
    let m = TagMatcher::from_parts("TagA", &[], &[tag_hash("TagA")]);
    assert_eq!(m, TagMatcher::Codes(vec![tag_hash("TagA")]));
    let props = properties::encode([(properties::TAGS, "TagA")]).expect("encodable");
    assert!(m.matches_properties(&props));
    assert!(!m.matches_properties(b""));
}

#[test]
fn given_star_or_sql_when_matching_should_accept_everything() {
    assert_eq!(TagMatcher::from_parts("*", &["x".into()], &[1]), TagMatcher::All);
    assert_eq!(TagMatcher::from_parts("a", &["*".into()], &[]), TagMatcher::All);
    let sql = SubscriptionData {
        sub_string: "a > 1".into(),
        expression_type: ExpressionType::Sql92,
        ..SubscriptionData::default()
    };
    assert!(TagMatcher::for_subscription(&sql).matches_tag(None));
    assert_eq!(
        TagMatcher::from_parts("TagX || TagY", &[], &[]),
        TagMatcher::Names(vec!["TagX".into(), "TagY".into()]),
        "without sets, the expression itself is parsed"
    );
}
