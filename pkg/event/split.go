package event

import (
	"bytes"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// maxNestingDepth is the deepest nesting of arrays and objects the
// reference decoder accepts (encoding/json, and sigs.k8s.io/json after it,
// stop at 10000); splitJSONEvent leaves deeper documents to it.
const maxNestingDepth = 10000

// splitJSONEvent reads a JSON watch event, {"type": …, "object": …},
// without unmarshalling its object: it validates the document (RFC 8259)
// with fastjson, walks its top-level keys, and returns the type and the
// object's bytes as a sub-slice of data (nil when the event has no object
// or a null one). A document with a control character (below 0x20,
// whitespace included) is left to apimachinery too.
//
// It gives the answer apimachinery's decoding into metav1.WatchEvent would
// give (keys matched case-sensitively, the last of duplicate keys wins, a
// null leaves a field as it was, other keys are ignored) for the events
// real servers send. ok is false for anything else (not valid JSON, not an
// object, a key written with escapes, a type that is not a plain string of valid
// UTF-8 (encoding/json would replace invalid bytes with U+FFFD),
// nesting deeper than the reference accepts): the caller then decodes with
// apimachinery, which also words the error. FuzzSplitJSONEvent holds the
// two to the same result.
func splitJSONEvent(data []byte) (typ string, obj []byte, ok bool) {
	if typ, obj, ok := splitObjectLast(data); ok {
		return typ, obj, true
	}
	return splitWalk(data)
}

// splitObjectLast is splitJSONEvent for events whose object is their last
// member, as kube-apiserver writes every event ({"type":…,"object":…}):
// the object then runs from its key to the event's closing brace, so
// fastjson validates it as one value and nothing walks it (a value
// followed by a comma is never valid on its own, so an object that is not
// last fails that validation). ok is false for any other shape, and when
// the object holds 10000 or more brackets (bytes.Count bounds its nesting
// depth before fastjson recurses into it); splitWalk then decides.
func splitObjectLast(data []byte) (typ string, obj []byte, ok bool) {
	d := trimSpaceRight(data)
	if len(d) == 0 || d[len(d)-1] != '}' || hasControl(data) {
		return "", nil, false
	}
	body := d[:len(d)-1] // without the event's closing brace
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return "", nil, false
	}
	i = skipSpace(body, i+1)
	for {
		key, vStart, ok := memberKey(body, i)
		if !ok || bytes.IndexByte(key, '\\') >= 0 {
			return "", nil, false
		}
		if string(key) == "object" {
			v := trimSpaceRight(body[vStart:])
			if len(v) == 0 || bytes.Count(v, []byte{'{'})+bytes.Count(v, []byte{'['}) >= maxNestingDepth ||
				fastjson.ValidateBytes(v) != nil {
				return "", nil, false
			}
			if string(v) != "null" {
				obj = v
			}
			return typ, obj, true
		}
		vEnd, ok := valueEnd(body, vStart)
		if !ok || vEnd == vStart || fastjson.ValidateBytes(body[vStart:vEnd]) != nil ||
			(string(key) == "type" && !eventType(body[vStart:vEnd], &typ)) {
			return "", nil, false
		}
		next, closed, ok := memberNext(body, vEnd)
		if !ok || closed { // a brace before the event's own: not one object
			return "", nil, false
		}
		i = next
	}
}

// splitWalk is splitJSONEvent for any shape: it walks every top-level
// member, then validates the whole document.
func splitWalk(data []byte) (typ string, obj []byte, ok bool) {
	// Walk the top level first: it bounds the nesting depth before
	// fastjson's recursive validation sees the document.
	end, err := walkObject(data, func(key, v []byte) bool {
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		switch string(key) {
		case "type":
			return eventType(v, &typ)
		case "object":
			if string(v) != "null" {
				obj = v
			}
		}
		return true
	})
	if err != nil || skipSpace(data, end) != len(data) {
		return "", nil, false
	}
	// fastjson does not check for control characters the part of a
	// string before its last escape (found by FuzzSplitJSONEvent): leave
	// any document with one to apimachinery.
	if hasControl(data) || fastjson.ValidateBytes(data) != nil {
		return "", nil, false
	}
	return typ, obj, true
}

// eventType sets *typ from the raw value v of an event's "type" key as
// encoding/json would (a null leaves it as it was) and reports whether v
// is one the split takes: null, or a string of valid UTF-8 without
// escapes.
func eventType(v []byte, typ *string) bool {
	switch {
	case string(v) == "null":
	case len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v):
		*typ = string(v[1 : len(v)-1])
	default:
		return false
	}
	return true
}

// walkObject calls fn with each key (the bytes between its quotes, escapes
// as written) and value (raw JSON) of the JSON object at the start of data
// (after any whitespace), in order, and returns the index just past the
// object's closing brace. It returns errNotObject when data does not start
// with an object, and errMalformed when the object is not well formed as
// far as its keys, colons and commas go (values are only delimited, not
// validated) or when fn returns false.
func walkObject(data []byte, fn func(key, value []byte) bool) (end int, err error) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return 0, errNotObject
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, nil
	}
	for {
		key, vStart, ok := memberKey(data, i)
		if !ok {
			return 0, errMalformed
		}
		vEnd, ok := valueEnd(data, vStart)
		if !ok || vEnd == vStart || !fn(key, data[vStart:vEnd]) {
			return 0, errMalformed
		}
		next, closed, ok := memberNext(data, vEnd)
		if !ok {
			return 0, errMalformed
		}
		if closed {
			return next, nil
		}
		i = next
	}
}

// memberKey reads the key of the object member at data[i] and the colon
// after it: it returns the key (the bytes between its quotes, escapes as
// written) and the index of the value's first byte; ok is false when
// there is no string then a colon there.
func memberKey(data []byte, i int) (key []byte, vStart int, ok bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	kEnd := stringEnd(data, i+1)
	if kEnd < 0 {
		return nil, 0, false
	}
	key = data[i+1 : kEnd-1]
	i = skipSpace(data, kEnd)
	if i >= len(data) || data[i] != ':' {
		return nil, 0, false
	}
	return key, skipSpace(data, i+1), true
}

// memberNext reads what follows a member's value, which ends at vEnd: a
// comma (next is the index of the next member's key) or the object's
// closing brace (closed, and next is the index just past it); ok is false
// for anything else.
func memberNext(data []byte, vEnd int) (next int, closed, ok bool) {
	i := skipSpace(data, vEnd)
	if i >= len(data) {
		return 0, false, false
	}
	switch data[i] {
	case '}':
		return i + 1, true, true
	case ',':
		return skipSpace(data, i+1), false, true
	}
	return 0, false, false
}

// trimSpaceRight returns p without the JSON whitespace at its end.
func trimSpaceRight(p []byte) []byte {
	for len(p) > 0 && isSpace(p[len(p)-1]) {
		p = p[:len(p)-1]
	}
	return p
}

// isSpace reports whether b is JSON whitespace (RFC 8259 §2).
func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r'
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace (RFC 8259 §2), or len(data).
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the closing quote of the string
// whose contents start at data[i], or -1 when it is not closed.
func stringEnd(data []byte, i int) int {
	if j, _ := scanString(data, i, false); j < len(data) {
		return j + 1
	}
	return -1
}

// valueEnd returns the index just past the JSON value starting at
// data[i], found by matching brackets outside strings (the document is
// validated afterwards). ok is false when the value does not end or nests
// deeper than maxNestingDepth.
func valueEnd(data []byte, i int) (end int, ok bool) {
	depth := 0
	for i < len(data) {
		switch data[i] {
		case '"':
			e := stringEnd(data, i+1)
			if e < 0 {
				return 0, false
			}
			i = e
		case '{', '[':
			depth++
			if depth >= maxNestingDepth { // the event's own object is one more
				return 0, false
			}
			i++
		case '}', ']':
			if depth == 0 {
				return i, i > 0
			}
			depth--
			i++
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i, true
			}
			i++
		default:
			i++
		}
		if depth == 0 && i > 0 && (data[i-1] == '"' || data[i-1] == '}' || data[i-1] == ']') {
			return i, true
		}
	}
	return i, depth == 0
}
