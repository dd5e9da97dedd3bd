//! Every pair of different Rust values that derive the same id: the table "Values that share an
//! id" of docs/id-scheme.md, row by row, so the table cannot drift from the code. Each row
//! asserts the equal ids; the rows that hold in one scheme only also assert that the other
//! tells the values apart.

use std::borrow::Cow;
use std::time::{Duration, UNIX_EPOCH};

use natural_key::bson::oid::ObjectId;
use natural_key::prelude::*;
use natural_key::{compute_id, compute_identity, KeyPart, KeyValue, Scheme};

const DEFAULT: Scheme = Scheme::Default { namespace: "" };
const JOINED: Scheme = Scheme::Joined { separator: ":" };
const MS: i128 = 1_700_000_000_000;

/// The id of these key values, each taken through its `KeyPart` impl as the derive does.
fn id(scheme: Scheme, keys: &[&dyn KeyPart]) -> Ulid {
    let values: Vec<KeyValue<'_>> = keys.iter().map(|k| k.key_value()).collect();
    compute_id(scheme, &values, MS).unwrap()
}

fn same(scheme: Scheme, a: &[&dyn KeyPart], b: &[&dyn KeyPart]) {
    assert_eq!(id(scheme, a), id(scheme, b), "{scheme:?}");
}

fn both(a: &[&dyn KeyPart], b: &[&dyn KeyPart]) {
    same(DEFAULT, a, b);
    same(JOINED, a, b);
}

/// Equal in the joined scheme only: its text forms lose the type the default scheme tags.
fn joined_only(a: &[&dyn KeyPart], b: &[&dyn KeyPart]) {
    same(JOINED, a, b);
    assert_ne!(
        id(DEFAULT, a),
        id(DEFAULT, b),
        "the default scheme tags the type"
    );
}

/// A user type whose key is its text.
struct Lang(&'static str);
impl KeyPart for Lang {
    fn key_value(&self) -> KeyValue<'_> {
        KeyValue::Str(self.0.into())
    }
}

#[test]
fn text_types_hash_their_text() {
    let s = String::from("en");
    let boxed: Box<str> = "en".into();
    let cow: Cow<'_, str> = Cow::Borrowed("en");
    for other in [
        &"en" as &dyn KeyPart,
        &boxed,
        &cow,
        &Lang("en"),
        &Box::new(s.clone()),
    ] {
        both(&[&s], &[other]);
    }
}

#[test]
fn a_char_is_its_one_character_string() {
    both(&[&'é'], &[&"é"]);
    both(&[&'\u{1F600}'], &[&"\u{1F600}"]);
}

#[test]
fn some_is_its_value_and_every_none_is_one_none() {
    both(&[&Some("en")], &[&"en"]);
    both(&[&Some(5u8)], &[&5u8]);
    both(&[&Some(Some(true))], &[&true]);
    // Nested options flatten, and the type of an absent value is not hashed.
    both(&[&Some(None::<String>)], &[&None::<String>]);
    both(&[&None::<String>], &[&None::<i64>]);
    both(&[&None::<uuid::Uuid>], &[&None::<bool>]);
}

#[test]
fn integers_of_every_width_hash_their_value() {
    let five: [&dyn KeyPart; 11] = [
        &5i8, &5i16, &5i32, &5i64, &5i128, &5isize, &5u8, &5u16, &5u32, &5u64, &5usize,
    ];
    for k in five {
        both(&[&5i32], &[k]);
    }
    both(&[&-1i8], &[&-1i128]);
    both(&[&u64::MAX], &[&(u64::MAX as i128)]);
    // 16 bytes of two's complement, not the width's: -1 and u64::MAX stay apart.
    assert_ne!(id(DEFAULT, &[&-1i64]), id(DEFAULT, &[&u64::MAX]));
}

#[test]
fn uuid_and_bson_uuid_hash_the_same_bytes() {
    let u = uuid::Uuid::parse_str("00112233-4455-6677-8899-aabbccddeeff").unwrap();
    let b = natural_key::bson::Uuid::from(u);
    both(&[&u], &[&b]);
    // The payload is RFC 9562's byte order (as the hyphenated text reads), which is also
    // what bson stores in a Binary of subtype 4.
    assert_eq!(
        u.key_value(),
        KeyValue::Uuid([
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff
        ])
    );
    let binary = natural_key::bson::Binary::from(b);
    assert_eq!(binary.subtype, natural_key::bson::spec::BinarySubtype::Uuid);
    assert_eq!(binary.bytes, u.as_bytes());
    both(&[&binary.to_uuid().unwrap()], &[&u]);
    let mut message = b"natural-key/v1\0\0\0\0\0\x05\0\0\0\x10".to_vec();
    message.extend_from_slice(u.as_bytes());
    assert_eq!(
        compute_identity(DEFAULT, &[u.key_value()])
            .unwrap()
            .to_string(),
        sha256_hex(&message)
    );
}

#[test]
fn references_and_boxes_are_their_value() {
    let u = 7u16;
    both(&[&u], &[&&u]);
    both(&[&u], &[&Box::new(u)]);
    let bytes: &[u8] = b"\x01\xab";
    let boxed: Box<[u8]> = bytes.into();
    both(&[&bytes], &[&boxed]);
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct Folded {
    #[key(lowercase, nfc)]
    title: String,
    #[key(timestamp)]
    at: i64,
}

#[test]
fn normalized_fields_fold_their_spellings() {
    let f = |t: &str| {
        Folded {
            title: t.into(),
            at: 1,
        }
        .id()
        .unwrap()
    };
    assert_eq!(f("CAFE\u{301}"), f("caf\u{e9}"));
    assert_eq!(f("Caf\u{e9}"), f("cafe\u{301}"));
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct AtMillis {
    #[key]
    name: String,
    #[key(timestamp)]
    at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct AtBsonDate {
    #[key]
    name: String,
    #[key(timestamp)]
    at: natural_key::bson::DateTime,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct AtSystemTime {
    #[key]
    name: String,
    #[key(timestamp)]
    at: std::time::SystemTime,
}

#[test]
fn timestamps_of_every_type_at_one_millisecond_agree() {
    let ms = 1_700_000_000_123;
    let plain = AtMillis {
        name: "x".into(),
        at: ms,
    }
    .id()
    .unwrap();
    let date = AtBsonDate {
        name: "x".into(),
        at: natural_key::bson::DateTime::from_millis(ms),
    };
    assert_eq!(date.id().unwrap(), plain);
    // Sub-millisecond parts are floored: 123.999 ms is 123 ms.
    let system = AtSystemTime {
        name: "x".into(),
        at: UNIX_EPOCH + Duration::from_millis(ms as u64) + Duration::from_nanos(999_999),
    };
    assert_eq!(system.id().unwrap(), plain);
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct Post {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
}

#[derive(NaturalKey, Serialize, Deserialize)]
struct Page {
    #[key]
    path: String,
    #[key]
    locale: Option<String>,
    #[key(timestamp)]
    created: u64,
    title: String,
}

#[derive(NaturalKey, Serialize, Deserialize)]
#[natural_key(namespace = "blog.post")]
struct NamespacedPost {
    #[key]
    slug: String,
    #[key]
    lang: String,
    #[key(timestamp)]
    published_at: i64,
}

#[test]
fn types_and_field_names_are_not_hashed() {
    let post = Post {
        slug: "a".into(),
        lang: "en".into(),
        published_at: 1,
    };
    let page = Page {
        path: "a".into(),
        locale: Some("en".into()),
        created: 1,
        title: "t".into(),
    };
    assert_eq!(post.id().unwrap(), page.id().unwrap());
    assert_eq!(post.identity().unwrap(), page.identity().unwrap());
    // What separates them is a namespace.
    let ns = NamespacedPost {
        slug: "a".into(),
        lang: "en".into(),
        published_at: 1,
    };
    assert_ne!(post.id().unwrap(), ns.id().unwrap());
}

#[test]
fn joined_none_is_the_empty_text_and_the_empty_bytes() {
    let empty: &[u8] = b"";
    joined_only(&[&None::<String>], &[&""]);
    joined_only(&[&None::<String>], &[&empty]);
    joined_only(&[&""], &[&empty]);
}

#[test]
fn joined_integers_and_bools_are_their_text() {
    joined_only(&[&5u8], &[&"5"]);
    joined_only(&[&-5i64], &[&"-5"]);
    joined_only(&[&true], &[&"true"]);
    joined_only(&[&false], &[&"false"]);
}

#[test]
fn joined_bytes_and_object_ids_are_their_lowercase_hex() {
    let bytes: &[u8] = b"\x01\xab";
    joined_only(&[&bytes], &[&"01ab"]);
    let oid = ObjectId::parse_str("65e1a2b3c4d5e6f708192a3b").unwrap();
    joined_only(&[&oid], &[&"65e1a2b3c4d5e6f708192a3b"]);
    let raw = oid.bytes();
    joined_only(&[&oid], &[&&raw[..]]);
    // Uppercase hex is other text.
    assert_ne!(
        id(JOINED, &[&oid]),
        id(JOINED, &[&"65E1A2B3C4D5E6F708192A3B"])
    );
}

#[test]
fn joined_uuids_are_their_hyphenated_lowercase_text() {
    let u = uuid::Uuid::parse_str("00112233-4455-6677-8899-aabbccddeeff").unwrap();
    joined_only(&[&u], &[&"00112233-4455-6677-8899-aabbccddeeff"]);
    // Not their 16 bytes, whose hex has no hyphens.
    let raw: &[u8] = u.as_bytes();
    assert_ne!(id(JOINED, &[&u]), id(JOINED, &[&raw]));
}

#[test]
fn joined_keys_can_trade_text_across_the_separator() {
    joined_only(&[&"a:b", &"c"], &[&"a", &"b:c"]);
    joined_only(&[&"a:", &None::<String>], &[&"a", &":"]);
    // Even across key counts, which only types of one collection can differ in.
    joined_only(&[&"a:b"], &[&"a", &"b"]);
    let empty = Scheme::Joined { separator: "" };
    same(empty, &[&"ab", &"c"], &[&"a", &"bc"]);
    same(empty, &[&1u8, &23u8], &[&12u8, &3u8]);
}

/// A joined message cannot contain NUL (text keys refuse it; hex, decimal and bool texts have
/// none) unless the separator does, and every default message does: with a NUL separator a
/// joined id can equal a default one.
#[test]
fn a_nul_separator_lets_a_joined_id_equal_a_default_one() {
    let nul = Scheme::Joined { separator: "\0" };
    // "natural-key/v1" NUL, namespace length 00000000, tag 01, length 00000000: one empty key.
    let keys: [&dyn KeyPart; 10] = [
        &"natural-key/v1",
        &"",
        &"",
        &"",
        &"",
        &"\u{1}",
        &"",
        &"",
        &"",
        &"",
    ];
    assert_eq!(id(nul, &keys), id(DEFAULT, &[&""]));
}

/// The complement of the table: in the default scheme each of these pairs differs, although
/// the joined scheme (or a loose reading) would equate them.
#[test]
fn the_default_scheme_tells_types_apart() {
    let empty: &[u8] = b"";
    let hex_bytes: &[u8] = b"\x01\xab";
    let oid = ObjectId::parse_str("65e1a2b3c4d5e6f708192a3b").unwrap();
    let oid_bytes = oid.bytes();
    let u = uuid::Uuid::parse_str("00112233-4455-6677-8899-aabbccddeeff").unwrap();
    let pairs: [(&dyn KeyPart, &dyn KeyPart); 9] = [
        (&None::<String>, &""),
        (&None::<String>, &empty),
        (&"", &empty),
        (&0u8, &false),
        (&1u8, &true),
        (&5u8, &"5"),
        (&hex_bytes, &"01ab"),
        (&oid, &&oid_bytes[..]),
        (&u, &&u.as_bytes()[..]),
    ];
    for (a, b) in pairs {
        assert_ne!(id(DEFAULT, &[a]), id(DEFAULT, &[b]));
    }
}

/// An id with no identity key, which the derive refuses to generate (one id per timestamp for
/// every document): `compute_id` can still build it, from the bare prefix or the empty text.
#[test]
fn no_identity_keys() {
    assert_eq!(
        compute_identity(DEFAULT, &[]).unwrap().to_string(),
        "d30c784bc6eba7fc9754445afdafb2214df055dae3cbda5ca851a0ef711dcdda"
    );
    assert_eq!(
        compute_identity(DEFAULT, &[]).unwrap().to_string(),
        sha256_hex(b"natural-key/v1\0\0\0\0\0")
    );
    assert_eq!(
        compute_identity(JOINED, &[]).unwrap().to_string(),
        sha256_hex(b"")
    );
    // Every document at one millisecond would get one id (values computed by interop/go).
    let at = 1_709_285_400_123;
    assert_eq!(
        compute_id(DEFAULT, &[], at).unwrap().to_string(),
        "01HQWNJQHVTC67GJY6XEKZS5TM"
    );
    assert_eq!(
        compute_id(JOINED, &[], at).unwrap().to_string(),
        "01HQWNJQHVWERC8GMRZGE196QV"
    );
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
