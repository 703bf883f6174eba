package event

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// errNotObject is returned by eachField for a value that is not a JSON
// object.
var errNotObject = errors.New("not a JSON object")

// errMalformed is returned by eachField for an object that is not valid
// JSON (readMeta only sees validated objects; this is its guard).
var errMalformed = errors.New("malformed JSON object")

// errNotArray is returned by eachElement for data that is not a JSON array.
var errNotArray = errors.New("not a JSON array")

// readMeta reads apiVersion, kind and metadata (name, namespace, uid,
// resourceVersion and the InitialEventsEndAnnotation) of the JSON object
// raw the way apimachinery decodes them into an object (keys matched
// case-sensitively after undoing escapes, the last of duplicate keys wins,
// null leaves a string as it was). raw has been validated as JSON with its
// watch event; readMeta walks its keys and skips the values it does not
// need (an object's data, which may be megabytes, is passed over at
// bytes.IndexByte speed, not unmarshalled). It returns an error for a raw
// that is not an object or a field of the wrong JSON type; the fields read
// before the error are kept.
func readMeta(raw []byte, m *objectMeta) error {
	return eachField(raw, m.field)
}

// readMetaMembers is readMeta for an object whose members indexEvent has
// listed (validated, in order): it reads them, and the metadata's when
// listed too, without walking the object.
func readMetaMembers(x *eventIndex, m *objectMeta) error {
	return eachMember(x.doc, x.members, func(key []byte, mb *member) error {
		if mb.subIndexed && string(key) == "metadata" {
			return eachMember(x.doc, x.metas[mb.sub:mb.subEnd], func(key []byte, sub *member) error {
				return m.metadataField(key, sub.value(x.doc))
			})
		}
		return m.field(key, mb.value(x.doc))
	})
}

// eachMember is eachField over members indexEvent listed in doc: fn is
// called with each one's key, escapes undone.
func eachMember(doc []byte, members []member, fn func(key []byte, mb *member) error) error {
	var first error
	for i := range members {
		mb := &members[i]
		key, ok := FieldKey(mb.key(doc))
		if !ok {
			return errMalformed
		}
		if err := fn(key, mb); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// field reads one member of an object (key with escapes undone, value raw
// JSON) into m, as readMeta describes.
func (m *objectMeta) field(key, v []byte) error {
	if bytes.EqualFold(key, []byte("kind")) {
		// client-go's typed decoding finds the kind with a
		// case-insensitive reading (json.DefaultMetaFactory); any
		// key that could be the kind can make the object a Secret,
		// a Table, …
		var k string
		err := stringField(&k, v, "kind")
		m.Kinds |= kindFlagsOf(k)
		if err != nil {
			m.Kinds |= kindSecret // a kind that cannot be read may be anything
		}
		if string(key) == "kind" {
			if err == nil && string(v) != "null" { // a null leaves the kind as it was
				m.Kind = k
			}
			return err
		}
	}
	if bytes.EqualFold(key, []byte("items")) {
		m.Kinds |= kindList // an object with items is a list to client-go's unstructured decoding
	}
	if bytes.EqualFold(key, []byte("rows")) && (string(key) != "rows" || m.Rows != "") {
		m.OtherRows = true
	}
	switch string(key) {
	case "rows":
		m.Rows = string(v)
		return nil
	case "apiVersion":
		return stringField(&m.APIVersion, v, "apiVersion")
	case "metadata":
		if string(v) == "null" {
			return nil
		}
		return eachField(v, m.metadataField)
	}
	return nil
}

// kindFlags says what an object's kind may make it, for redaction: each
// bit is set by any value of any key that reads as "kind" (apimachinery
// reads kind keys in any letter case, and the last of duplicates, so any of
// them may be the kind a client uses).
type kindFlags uint8

const (
	// kindSecret: a Secret, whose data and stringData are redacted.
	kindSecret kindFlags = 1 << iota
	// kindMetadata: a PartialObjectMetadata (a metadata-only watch), which
	// may be a Secret's: its last-applied-configuration annotation holds
	// the data.
	kindMetadata
	// kindTable: a meta.k8s.io Table, whose rows may hold objects.
	kindTable
	// kindList: a list (List, SecretList, …, or any object with items:
	// client-go's unstructured decoding reads it as a list), whose items
	// may hold objects.
	kindList
	// kindWatchEvent: a metav1.WatchEvent, whose object may be one.
	kindWatchEvent
)

// suspect returns what the object raw, read into m, may be for redaction:
// Kinds, or, for a value with no kind at all (none a client could use to
// tell its type) other than null, kindSecret: redaction fails closed.
func (m *objectMeta) suspect(raw []byte) kindFlags {
	if m.kindless(raw) {
		return kindSecret
	}
	return m.Kinds
}

// kindless reports whether the value raw, read into m, has no kind a
// client could use to tell its type, and is not null.
func (m *objectMeta) kindless(raw []byte) bool {
	return m.Kinds == 0 && m.Kind == "" && string(bytes.TrimSpace(raw)) != "null"
}

// kindFlagsOf returns the flags of one kind value, matched in any letter
// case (a kind "secret" is no Secret to apimachinery, but redaction fails
// closed).
func kindFlagsOf(kind string) kindFlags {
	switch {
	case strings.EqualFold(kind, "Secret"):
		return kindSecret
	case strings.EqualFold(kind, "PartialObjectMetadata"):
		return kindMetadata
	case strings.EqualFold(kind, "Table"):
		return kindTable
	case strings.EqualFold(kind, "WatchEvent"):
		return kindWatchEvent
	case len(kind) >= 4 && strings.EqualFold(kind[len(kind)-4:], "List"):
		return kindList
	}
	return 0
}

// metadataField reads one member of an object's metadata into m.
func (m *objectMeta) metadataField(key, v []byte) error {
	switch string(key) {
	case "name":
		return stringField(&m.Name, v, "metadata.name")
	case "namespace":
		return stringField(&m.Namespace, v, "metadata.namespace")
	case "uid":
		return stringField(&m.UID, v, "metadata.uid")
	case "resourceVersion":
		return stringField(&m.ResourceVersion, v, "metadata.resourceVersion")
	case "annotations":
		if string(v) == "null" { // a null map is an empty one
			m.InitialEventsEnd = false
			return nil
		}
		return eachField(v, func(key, v []byte) error {
			if string(key) != InitialEventsEndAnnotation {
				return nil
			}
			var s string
			err := stringField(&s, v, "metadata.annotations")
			m.InitialEventsEnd = s == "true"
			return err
		})
	}
	return nil
}

// plainText reports whether the contents of a JSON string read as they
// are written: no escape, and valid UTF-8 (which encoding/json would
// otherwise replace). Keys and metadata strings are short and nearly
// always ASCII: eight bytes at a time are checked for a backslash or a
// byte of 0x80 and above, without a call; only those with the latter are
// checked as UTF-8.
func plainText(b []byte) bool {
	var hi uint64
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		s := w ^ (lsb * '\\')
		if (s-lsb)&^s&msb != 0 {
			return false
		}
		hi |= w
	}
	for ; i < len(b); i++ {
		if b[i] == '\\' {
			return false
		}
		hi |= uint64(b[i])
	}
	return hi&msb == 0 || utf8.Valid(b)
}

// FieldKey returns a JSON object key as written between its quotes with
// its escapes undone (and invalid UTF-8 replaced by U+FFFD), as
// encoding/json reads it (RFC 8259 §7); ok is false when it is not a valid
// JSON string's contents. A key without escapes is returned as it is.
func FieldKey(key []byte) (out []byte, ok bool) {
	if plainText(key) {
		return key, true
	}
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

// eachField calls fn with each key (escapes undone) and value (raw JSON)
// of the JSON object in data, in order. It returns errNotObject when data
// is not an object, an error when the object is malformed, or else the
// first error fn returned (fn is still called for every field).
func eachField(data []byte, fn func(key, value []byte) error) error {
	var first error
	_, err := walkObject(data, func(key, v []byte) bool {
		key, ok := FieldKey(key)
		if !ok {
			return false
		}
		if err := fn(key, v); err != nil && first == nil {
			first = err
		}
		return true
	})
	if err != nil {
		return err
	}
	return first
}

// stringField sets *dst from the JSON value v as encoding/json decodes into
// a string: null leaves *dst as it was; a value that is not a string is an
// error naming field.
func stringField(dst *string, v []byte, field string) error {
	switch {
	case string(v) == "null":
		return nil
	case len(v) >= 2 && v[0] == '"':
		if body := v[1 : len(v)-1]; plainText(body) {
			*dst = string(body)
			return nil
		}
		var s string // not dst: what Unmarshal is given escapes to the heap
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		*dst = s
		return nil
	}
	kind := "a number"
	switch v[0] {
	case '{':
		kind = "an object"
	case '[':
		kind = "an array"
	case 't', 'f':
		kind = "a boolean"
	}
	return fmt.Errorf("%s is %s, not a string", field, kind)
}
