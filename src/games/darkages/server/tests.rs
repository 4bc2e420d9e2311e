use super::*;

#[test]
fn sequence_window_follows_6_3() {
    let mut v = SequenceValidator::default();
    assert_eq!(v.check(1), Ok(0));
    assert_eq!(v.check(5), Ok(3));
    assert_eq!(v.check(3), Ok(0), "late but unseen");
    assert_eq!(v.check(3), Err("replayed_sequence"));
    assert_eq!(v.check(5), Err("replayed_sequence"));
    assert_eq!(
        v.check(0),
        Err("replayed_sequence"),
        "0 is never above the start"
    );
    assert_eq!(v.check(5 + 200), Ok(199));
    assert_eq!(
        v.check(3),
        Err("replayed_sequence"),
        "kept across the shift"
    );
    assert_eq!(v.check(4), Ok(0));
    assert_eq!(v.check(205 + 2000), Ok(1999));
    assert_eq!(v.check(205), Err("too_old"));
}
