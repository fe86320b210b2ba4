use super::*;

#[test]
fn percent_decoding() {
    assert_eq!(crate::remote_input::percent_decode("a%20b"), "a b");
    assert_eq!(crate::remote_input::percent_decode("a%2Fb%3d"), "a/b=");
    assert_eq!(crate::remote_input::percent_decode("100%"), "100%");
    assert_eq!(crate::remote_input::percent_decode("%zz"), "%zz");
}

#[test]
fn columns_must_match_by_name_and_type() {
    let a = Schema::new(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("y", DataType::Utf8, true),
    ]);
    let reordered = Schema::new(vec![
        Field::new("y", DataType::Utf8, false),
        Field::new("x", DataType::Int64, true),
    ]);
    assert_eq!(column_difference(&a, &reordered), None);
    let retyped = Schema::new(vec![
        Field::new("x", DataType::Int32, true),
        Field::new("y", DataType::Utf8, true),
    ]);
    assert!(column_difference(&a, &retyped).is_some_and(|m| m.contains("Int32")));
    let missing = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
    assert!(column_difference(&a, &missing).is_some_and(|m| m.contains("\"y\"")));
    assert!(column_difference(&missing, &a).is_some_and(|m| m.contains("\"y\"")));
}
