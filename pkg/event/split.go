package event

// maxNestingDepth is the deepest nesting of arrays and objects the
// reference decoder accepts (encoding/json, and sigs.k8s.io/json after it,
// stop at 10000); indexEvent leaves deeper documents to it.
const maxNestingDepth = 10000

// eventType sets *typ from the raw value v of an event's "type" key as
// encoding/json would (a null leaves it as it was) and reports whether v
// is one the split takes: null, or a string of valid UTF-8 without
// escapes.
func eventType(v []byte, typ *string) bool {
	switch {
	case string(v) == "null":
	case len(v) >= 2 && v[0] == '"' && plainText(v):
		*typ = typeName(v[1 : len(v)-1])
	default:
		return false
	}
	return true
}

// typeName returns t as a string, without allocating for the types
// servers send.
func typeName(t []byte) string {
	switch string(t) {
	case "ADDED":
		return "ADDED"
	case "MODIFIED":
		return "MODIFIED"
	case "DELETED":
		return "DELETED"
	case "BOOKMARK":
		return "BOOKMARK"
	case "ERROR":
		return "ERROR"
	}
	return string(t)
}

// walkObject calls fn with each key (the bytes between its quotes, escapes
// as written) and value (raw JSON) of the JSON object at the start of data
// (after any whitespace), in order, and returns the index just past the
// object's closing brace. It returns errNotObject when data does not start
// with an object, and errMalformed when the object is not well formed as
// far as its keys, colons and commas go (values are only delimited, not
// validated) or when fn returns false.
func walkObject(data []byte, fn func(key, value []byte) bool) (end int, err error) {
	return ReadObject(data, 0, func(key []byte, vStart int) (int, error) {
		vEnd, ok := ValueEnd(data, vStart)
		if !ok || vEnd == vStart || !fn(key, data[vStart:vEnd]) {
			return 0, errMalformed
		}
		return vEnd, nil
	})
}

// ReadObject reads the JSON object at data[i] (after any whitespace) one
// member at a time (RFC 8259 §4): read is called with each key (the bytes
// between its quotes, escapes as written; FieldKey undoes them) and the
// index of its value's first byte, and returns the index just past the
// value, which it reads itself (ValueEnd delimits one). ReadObject returns
// the index just past the object's closing brace; errNotObject when
// data[i] does not start an object, errMalformed when the object is not
// well formed as far as its keys, colons and commas go, or read's error.
func ReadObject(data []byte, i int, read func(key []byte, vStart int) (vEnd int, err error)) (end int, err error) {
	i = skipSpace(data, i)
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
		vEnd, err := read(key, vStart)
		if err != nil {
			return 0, err
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

// eachElement calls fn with each value (raw JSON) of the JSON array at the
// start of data (after any whitespace), in order. It returns errNotArray
// when data does not start with an array, errMalformed when its brackets
// and commas are not well formed (values are only delimited, not
// validated), or else the first error fn returned (fn is still called for
// every element).
func eachElement(data []byte, fn func(value []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return errNotArray
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return nil
	}
	var first error
	for {
		end, ok := ValueEnd(data, i)
		if !ok || end == i {
			return errMalformed
		}
		if err := fn(data[i:end]); err != nil && first == nil {
			first = err
		}
		i = skipSpace(data, end)
		if i >= len(data) {
			return errMalformed
		}
		switch data[i] {
		case ']':
			return first
		case ',':
			i = skipSpace(data, i+1)
		default:
			return errMalformed
		}
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

// ValueEnd returns the index just past the JSON value starting at data[i]
// (an object, array, string, number or literal; RFC 8259 §3), found by
// matching brackets outside strings: the value is delimited, not
// validated. ok is false when it does not end or nests deeper than
// maxNestingDepth (10000).
func ValueEnd(data []byte, i int) (end int, ok bool) {
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
