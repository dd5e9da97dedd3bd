// Package naturalkey is an independent Go implementation of the natural-key id scheme
// (docs/id-scheme.md, format v1): deterministic ULIDs for MongoDB documents.
//
// An id is a ULID whose 48-bit timestamp is the document's timestamp in milliseconds and whose
// 80 random bits are the first 10 bytes of identity = SHA-256(identity message). Two schemes
// build the identity message:
//
//   - "default": "natural-key/v1\x00", u32be(len(namespace)), namespace, then per key a type
//     tag, u32be(len(payload)) and the payload. Unambiguous.
//   - "joined": the keys' text forms joined by a separator (":" by default). Byte-identical to
//     the seed recipe ULID(publishedAt, sha256(slug + ":" + lang)[0:10]); ambiguous when a key
//     contains the separator.
//
// Keys are hashed as given. For a field the Rust type marks #[key(lowercase)] and/or
// #[key(nfc)], build the key from Normalize: Str(Normalize(text, Lowercase|NFC)).
//
// A writer stores more than the id: DefaultStoredFields and JoinedStoredFields give the _id and
// _nk_identity the Rust library's guard finds a document by, and StoredFields.Update the
// statement that writes them (docs/id-scheme.md, "Writing from another language").
package naturalkey

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"
)

// MaxTimestampMs is the largest timestamp a ULID can carry: 2^48 - 1 ms since the Unix epoch.
const MaxTimestampMs uint64 = 1<<48 - 1

// DefaultSeparator is the joined scheme's separator unless one is configured.
const DefaultSeparator = ":"

// defaultPrefix is the default scheme's domain-separation prefix (15 bytes).
const defaultPrefix = "natural-key/v1\x00"

// Errors returned by this package; test with errors.Is.
var (
	ErrTimestampOutOfRange = errors.New("naturalkey: timestamp out of range 0..=2^48-1")
	ErrNulByte             = errors.New("naturalkey: text key contains a NUL byte")
	ErrIntOutOfRange       = errors.New("naturalkey: integer key outside the 128-bit two's complement range")
	ErrTooLong             = errors.New("naturalkey: key payload longer than 2^32-1 bytes")
)

// Kind is the type of a key value; its numeric value is the default scheme's tag byte.
type Kind byte

// Key kinds, with their default-scheme tags.
const (
	KindNone     Kind = 0x00
	KindStr      Kind = 0x01
	KindInt      Kind = 0x02
	KindBool     Kind = 0x03
	KindBytes    Kind = 0x04
	KindUUID     Kind = 0x05
	KindObjectID Kind = 0x06
)

func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindStr:
		return "str"
	case KindInt:
		return "int"
	case KindBool:
		return "bool"
	case KindBytes:
		return "bytes"
	case KindUUID:
		return "uuid"
	case KindObjectID:
		return "objectid"
	}
	return fmt.Sprintf("Kind(%#02x)", byte(k))
}

// Key is one typed key value. Build it with None, Str, Int, BigInt, Uint, Bool, Bytes, UUID or
// ObjectID; the zero Key is None.
type Key struct {
	kind Kind
	str  string
	num  *big.Int // KindInt
	flag bool     // KindBool
	raw  []byte   // KindBytes, KindUUID (16), KindObjectID (12)
}

// None is an absent optional key (Rust Option::None).
func None() Key { return Key{kind: KindNone} }

// Str is a text key (UTF-8). It must not contain a NUL byte.
func Str(s string) Key { return Key{kind: KindStr, str: s} }

// Int is an integer key.
func Int(i int64) Key { return Key{kind: KindInt, num: big.NewInt(i)} }

// Uint is an unsigned integer key (Rust u64 and narrower).
func Uint(u uint64) Key { return Key{kind: KindInt, num: new(big.Int).SetUint64(u)} }

// BigInt is an integer key of up to 128 bits (Rust i128); values outside
// -2^127 ..= 2^127-1 are rejected when the id is computed. The value is copied.
func BigInt(i *big.Int) Key { return Key{kind: KindInt, num: new(big.Int).Set(i)} }

// Bool is a boolean key.
func Bool(b bool) Key { return Key{kind: KindBool, flag: b} }

// Bytes is a raw byte-string key. The slice is copied.
func Bytes(b []byte) Key { return Key{kind: KindBytes, raw: bytes.Clone(b)} }

// UUID is a UUID key: 16 bytes in RFC 9562 (formerly RFC 4122) order, the order its hyphenated
// text reads — a github.com/google/uuid UUID, or the Data of a subtype-4 BSON Binary.
func UUID(u [16]byte) Key { return Key{kind: KindUUID, raw: u[:]} }

// ObjectID is a BSON ObjectId key (12 bytes).
func ObjectID(o [12]byte) Key { return Key{kind: KindObjectID, raw: o[:]} }

// Kind reports the key's type.
func (k Key) Kind() Kind { return k.kind }

var (
	minInt128 = new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 127))
	maxInt128 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 127), big.NewInt(1))
	two128    = new(big.Int).Lsh(big.NewInt(1), 128)
)

// int128BE encodes i as 16 bytes of big-endian two's complement.
func int128BE(i *big.Int) ([16]byte, error) {
	var out [16]byte
	if i.Cmp(minInt128) < 0 || i.Cmp(maxInt128) > 0 {
		return out, fmt.Errorf("%w: %s", ErrIntOutOfRange, i)
	}
	v := i
	if i.Sign() < 0 {
		v = new(big.Int).Add(i, two128)
	}
	v.FillBytes(out[:])
	return out, nil
}

// check validates a key at position index (0-based): NUL in text, integer range.
func (k Key) check(index int) error {
	switch k.kind {
	case KindStr:
		if p := strings.IndexByte(k.str, 0); p >= 0 {
			return fmt.Errorf("%w: key %d at byte %d", ErrNulByte, index, p)
		}
	case KindInt:
		if k.num == nil {
			return fmt.Errorf("naturalkey: key %d: nil integer", index)
		}
		if _, err := int128BE(k.num); err != nil {
			return fmt.Errorf("key %d: %w", index, err)
		}
	case KindNone, KindBool, KindBytes:
	case KindUUID:
		if len(k.raw) != 16 {
			return fmt.Errorf("naturalkey: key %d: uuid of %d bytes", index, len(k.raw))
		}
	case KindObjectID:
		if len(k.raw) != 12 {
			return fmt.Errorf("naturalkey: key %d: objectid of %d bytes", index, len(k.raw))
		}
	default:
		return fmt.Errorf("naturalkey: key %d: unknown kind %v", index, k.kind)
	}
	return nil
}

// payload is the default scheme's payload bytes; the key must have passed check.
func (k Key) payload() []byte {
	switch k.kind {
	case KindStr:
		return []byte(k.str)
	case KindInt:
		b, _ := int128BE(k.num)
		return b[:]
	case KindBool:
		if k.flag {
			return []byte{1}
		}
		return []byte{0}
	case KindBytes, KindUUID, KindObjectID:
		return k.raw
	}
	return nil // KindNone
}

// Text is the joined scheme's text form of the key: the text itself, decimal integers,
// "true"/"false", lowercase hex for bytes and ObjectIds, lowercase hyphenated UUIDs, and the
// empty string for None.
func (k Key) Text() string {
	switch k.kind {
	case KindStr:
		return k.str
	case KindInt:
		if k.num == nil {
			return ""
		}
		return k.num.String()
	case KindBool:
		return strconv.FormatBool(k.flag)
	case KindBytes, KindObjectID:
		return hex.EncodeToString(k.raw)
	case KindUUID:
		h := hex.EncodeToString(k.raw)
		if len(h) != 32 {
			return h
		}
		return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	}
	return ""
}

// Identity is the default scheme's 32-byte identity digest (stored hex-encoded in
// _nk_identity). namespace is "" when the type has none.
func Identity(namespace string, keys []Key) ([32]byte, error) {
	if uint64(len(namespace)) > math.MaxUint32 {
		return [32]byte{}, fmt.Errorf("%w: namespace", ErrTooLong)
	}
	h := sha256.New()
	var n [4]byte
	h.Write([]byte(defaultPrefix))
	binary.BigEndian.PutUint32(n[:], uint32(len(namespace)))
	h.Write(n[:])
	h.Write([]byte(namespace))
	for i, k := range keys {
		if err := k.check(i); err != nil {
			return [32]byte{}, err
		}
		p := k.payload()
		if uint64(len(p)) > math.MaxUint32 {
			return [32]byte{}, fmt.Errorf("%w: key %d", ErrTooLong, i)
		}
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		h.Write([]byte{byte(k.kind)})
		h.Write(n[:])
		h.Write(p)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum, nil
}

// JoinedIdentity is the joined scheme's 32-byte identity digest: SHA-256 over the keys' Text
// forms joined by separator.
func JoinedIdentity(separator string, keys []Key) ([32]byte, error) {
	texts := make([]string, len(keys))
	for i, k := range keys {
		if err := k.check(i); err != nil {
			return [32]byte{}, err
		}
		texts[i] = k.Text()
	}
	return sha256.Sum256([]byte(strings.Join(texts, separator))), nil
}

// checkTimestamp rejects timestamps a ULID cannot carry; they are never wrapped or clamped.
func checkTimestamp(ms uint64) error {
	if ms > MaxTimestampMs {
		return fmt.Errorf("%w: %d", ErrTimestampOutOfRange, ms)
	}
	return nil
}

// FromIdentity builds the ULID: the 48-bit timestamp, then identity[0:10].
func FromIdentity(ms uint64, identity [32]byte) (ulid.ULID, error) {
	if err := checkTimestamp(ms); err != nil {
		return ulid.ULID{}, err
	}
	return ulid.New(ms, bytes.NewReader(identity[:10]))
}

// DefaultID is the default scheme's id for keys (in declaration order) at ms milliseconds
// since the Unix epoch.
func DefaultID(namespace string, keys []Key, ms uint64) (ulid.ULID, error) {
	if err := checkTimestamp(ms); err != nil {
		return ulid.ULID{}, err
	}
	sum, err := Identity(namespace, keys)
	if err != nil {
		return ulid.ULID{}, err
	}
	return FromIdentity(ms, sum)
}

// JoinedKeysID is the joined scheme's id for typed keys.
func JoinedKeysID(separator string, keys []Key, ms uint64) (ulid.ULID, error) {
	if err := checkTimestamp(ms); err != nil {
		return ulid.ULID{}, err
	}
	sum, err := JoinedIdentity(separator, keys)
	if err != nil {
		return ulid.ULID{}, err
	}
	return FromIdentity(ms, sum)
}

// JoinedID is the seed recipe for text keys:
//
//	sum := sha256.Sum256([]byte(strings.Join(keys, separator)))
//	id  := ulid.New(publishedAtMs, bytes.NewReader(sum[:10]))
//
// so JoinedID(":", []string{slug, lang}, publishedAt) is ULID(publishedAt,
// sha256(slug + ":" + lang)[0:10]). Like the Rust writer, it rejects keys containing NUL and
// timestamps >= 2^48.
func JoinedID(separator string, keys []string, publishedAtMs uint64) (ulid.ULID, error) {
	if err := checkTimestamp(publishedAtMs); err != nil {
		return ulid.ULID{}, err
	}
	for i, k := range keys {
		if p := strings.IndexByte(k, 0); p >= 0 {
			return ulid.ULID{}, fmt.Errorf("%w: key %d at byte %d", ErrNulByte, i, p)
		}
	}
	sum := sha256.Sum256([]byte(strings.Join(keys, separator)))
	return ulid.New(publishedAtMs, bytes.NewReader(sum[:10]))
}
