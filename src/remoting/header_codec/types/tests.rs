use super::*;

#[test]
fn given_language_names_and_codes_should_map_both_ways() {
    for l in LanguageCode::ALL {
        assert_eq!(LanguageCode::from_name(l.name()), l);
        assert_eq!(LanguageCode::from_code(l.code()), l);
    }
    assert_eq!(LanguageCode::from_name("COBOL"), LanguageCode::Other);
    assert_eq!(LanguageCode::from_name("rust"), LanguageCode::Rust);
    assert_eq!(LanguageCode::from_code(200), LanguageCode::Other);
    assert_eq!(SerializeType::from_name("ROCKETMQ"), Some(SerializeType::RocketMq));
    assert_eq!(SerializeType::from_code(2), None);
}
