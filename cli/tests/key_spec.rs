//! `KeySpec` reads what the derive stores: for every key type and every timestamp type with a
//! BSON form, the id and identity a spec derives from the stored document are the type's own.

use natural_key::bson::{self, oid::ObjectId, rawdoc};
use natural_key::prelude::*;
use natural_key::spec::{KeyField, KeyKind, KeySpec, SpecError, TimestampForm};
use natural_key::Scheme;

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(namespace = "all.keys")]
struct AllKeys {
    #[key]
    text: String,
    #[key]
    small: i32,
    #[key]
    big: u64,
    #[key]
    flag: bool,
    #[key]
    bytes: Box<[u8]>,
    #[key]
    uuid: uuid::Uuid,
    #[key]
    bson_uuid: bson::Uuid,
    #[key]
    oid: ObjectId,
    #[key]
    absent: Option<String>,
    #[key(lowercase, nfc)]
    folded: String,
    #[key(timestamp)]
    at: bson::DateTime,
    body: String,
}

fn all_keys_spec(form: TimestampForm) -> KeySpec {
    KeySpec::new(
        Scheme::Default {
            namespace: "all.keys",
        },
        "at",
    )
    .timestamp_form(form)
    .key(KeyField::new("text", KeyKind::Str))
    .key(KeyField::new("small", KeyKind::Int))
    .key(KeyField::new("big", KeyKind::Int))
    .key(KeyField::new("flag", KeyKind::Bool))
    .key(KeyField::new("bytes", KeyKind::Bytes))
    .key(KeyField::new("uuid", KeyKind::Uuid))
    .key(KeyField::new("bson_uuid", KeyKind::Uuid))
    .key(KeyField::new("oid", KeyKind::ObjectId))
    .key(KeyField::new("absent", KeyKind::Str).optional())
    .key(KeyField::new("folded", KeyKind::Str).lowercase().nfc())
}

#[test]
fn every_key_type_as_stored() {
    let u = uuid::Uuid::parse_str("67e55044-10b1-426f-9247-bb680e5fe0c8").unwrap();
    let value = AllKeys {
        text: "hello".into(),
        small: -5,
        big: 1 << 40,
        flag: true,
        bytes: vec![0, 255, 16].into_boxed_slice(),
        uuid: u,
        bson_uuid: bson::Uuid::from(u),
        oid: ObjectId::parse_str("507f1f77bcf86cd799439011").unwrap(),
        absent: None,
        folded: "CAFE\u{301}".into(),
        at: bson::DateTime::from_millis(1_709_285_400_123),
        body: "b".into(),
    };
    // What the driver sends (its raw serializer).
    let stored = bson::to_raw_document_buf(&value).unwrap();
    let want = (value.id().unwrap(), value.identity().unwrap());
    assert_eq!(
        all_keys_spec(TimestampForm::Any).derive(&stored).unwrap(),
        want
    );
    assert_eq!(
        all_keys_spec(TimestampForm::Date).derive(&stored).unwrap(),
        want
    );
    assert!(matches!(
        all_keys_spec(TimestampForm::Millis).derive(&stored),
        Err(SpecError::WrongType { field: "at", .. })
    ));
}

macro_rules! timestamped {
    ($name:ident, $ty:ty) => {
        #[derive(NaturalKey, Serialize, Deserialize)]
        struct $name {
            #[key]
            slug: String,
            #[key(timestamp)]
            at: $ty,
        }
    };
}
timestamped!(Millis, i64);
timestamped!(Date, bson::DateTime);
timestamped!(System, std::time::SystemTime);
timestamped!(Chrono, chrono::DateTime<chrono::Utc>);

#[test]
fn every_timestamp_type_as_stored() {
    let ms = 1_709_285_400_123i64;
    let sub_ms = std::time::Duration::from_nanos(ms as u64 * 1_000_000 + 999_999);
    let cases: Vec<(bson::RawDocumentBuf, natural_key::Ulid, TimestampForm)> = vec![
        {
            let v = Millis {
                slug: "s".into(),
                at: ms,
            };
            (
                bson::to_raw_document_buf(&v).unwrap(),
                v.id().unwrap(),
                TimestampForm::Millis,
            )
        },
        {
            let v = Date {
                slug: "s".into(),
                at: bson::DateTime::from_millis(ms),
            };
            (
                bson::to_raw_document_buf(&v).unwrap(),
                v.id().unwrap(),
                TimestampForm::Date,
            )
        },
        {
            let v = System {
                slug: "s".into(),
                at: std::time::UNIX_EPOCH + sub_ms,
            };
            (
                bson::to_raw_document_buf(&v).unwrap(),
                v.id().unwrap(),
                TimestampForm::SystemTime,
            )
        },
        {
            let at = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
                + chrono::Duration::from_std(sub_ms).unwrap();
            let v = Chrono {
                slug: "s".into(),
                at,
            };
            (
                bson::to_raw_document_buf(&v).unwrap(),
                v.id().unwrap(),
                TimestampForm::Rfc3339,
            )
        },
    ];
    for (stored, id, form) in cases {
        assert_eq!(id.timestamp_ms(), ms as u64);
        for f in [TimestampForm::Any, form] {
            let spec = KeySpec::new(Scheme::Default { namespace: "" }, "at")
                .timestamp_form(f)
                .key(KeyField::new("slug", KeyKind::Str));
            assert_eq!(spec.derive(&stored).unwrap().0, id, "{stored:?} as {f:?}");
        }
    }
}

#[test]
fn what_a_spec_cannot_read_says_which_field() {
    let spec = KeySpec::new(Scheme::Joined { separator: ":" }, "at")
        .key(KeyField::new("slug", KeyKind::Str))
        .key(KeyField::new("n", KeyKind::Int));
    let cases = [
        (rawdoc! { "slug": "a", "at": 0i64 }, "field `n` is missing"),
        (
            rawdoc! { "slug": "a", "n": bson::RawBson::Null, "at": 0i64 },
            "field `n` is missing",
        ),
        (
            rawdoc! { "slug": "a", "n": 1.5, "at": 0i64 },
            "field `n` is a double, expected an int32 or int64",
        ),
        (
            rawdoc! { "slug": "a", "n": 1, "at": "yesterday" },
            "timestamp field `at`: `yesterday` is not an RFC 3339",
        ),
        (
            rawdoc! { "slug": "a", "n": 1, "at": -1i64 },
            "outside the ULID range",
        ),
        (rawdoc! { "slug": "a\0b", "n": 1, "at": 0i64 }, "NUL"),
        (rawdoc! { "slug": "a", "n": 1 }, "field `at` is missing"),
    ];
    for (doc, says) in cases {
        let e = spec.derive(&doc).unwrap_err().to_string();
        assert!(e.contains(says), "{e:?} does not say {says:?}");
    }
    let none = KeySpec::new(Scheme::Default { namespace: "" }, "at");
    assert_eq!(
        none.derive(&rawdoc! { "at": 0i64 }),
        Err(SpecError::NoIdentityKey)
    );
}
