//! The optional time crates (features `chrono`, `time`, `jiff`) give the same ids as plain
//! milliseconds. Run with `cargo test --all-features --test time_crates`.

use natural_key::prelude::*;
use natural_key::KeyError;

#[derive(NaturalKey, Serialize)]
struct WithChrono {
    #[key]
    name: String,
    #[key(timestamp)]
    at: chrono::DateTime<chrono::Utc>,
}
#[derive(NaturalKey, Serialize)]
struct WithTime {
    #[key]
    name: String,
    #[key(timestamp)]
    at: time::OffsetDateTime,
}
#[derive(NaturalKey, Serialize)]
struct WithJiff {
    #[key]
    name: String,
    #[key(timestamp)]
    at: jiff::Timestamp,
}
#[derive(NaturalKey, Serialize)]
struct WithMillis {
    #[key]
    name: String,
    #[key(timestamp)]
    at: i64,
}

#[test]
fn same_instant_same_id() {
    let ms = 1_700_000_000_123i64;
    let plain = WithMillis {
        name: "x".into(),
        at: ms,
    }
    .id()
    .unwrap();
    let c = WithChrono {
        name: "x".into(),
        at: chrono::DateTime::from_timestamp_millis(ms).unwrap(),
    };
    let t = WithTime {
        name: "x".into(),
        at: time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000 + 999_999)
            .unwrap(),
    };
    let j = WithJiff {
        name: "x".into(),
        at: jiff::Timestamp::from_millisecond(ms).unwrap(),
    };
    assert_eq!(c.id().unwrap(), plain);
    assert_eq!(t.id().unwrap(), plain, "sub-millisecond parts are floored");
    assert_eq!(j.id().unwrap(), plain);
    let before = WithJiff {
        name: "x".into(),
        at: jiff::Timestamp::from_millisecond(-1).unwrap(),
    };
    assert!(matches!(
        before.id(),
        Err(KeyError::TimestampOutOfRange { millis: -1, .. })
    ));
}
