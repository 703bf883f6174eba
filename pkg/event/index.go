package event

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// member is one member of a JSON object, located in the document doc it
// was read from: its key (the bytes between its quotes, escapes as
// written) is doc[keyAt:keyEnd], its value (raw JSON) doc[valAt:valEnd].
// Offsets, not slices: a member holds no pointer, so listing one costs no
// write barrier and a pooled array keeps no event's bytes alive.
type member struct {
	keyAt, keyEnd, valAt, valEnd int
	// metas[sub:subEnd] are the value's own members when subIndexed (the
	// object's metadata, an object of at most maxIndexedMembers members).
	sub, subEnd int
	subIndexed  bool
}

// key returns the member's key in doc, escapes as written.
func (m *member) key(doc []byte) []byte { return doc[m.keyAt:m.keyEnd] }

// value returns the member's raw JSON value in doc.
func (m *member) value(doc []byte) []byte { return doc[m.valAt:m.valEnd] }

// maxIndexedMembers bounds how many members of an event's object
// indexEvent lists (an object of a real server has a handful; past the
// bound readMeta walks the object itself).
const maxIndexedMembers = 64

// maxIndexedMetas bounds the members of all the object's "metadata" keys
// indexEvent lists together (a duplicate key starts a list of its own;
// past the bound a metadata is walked instead): hostile events made of
// many small metadata cost no more than this.
const maxIndexedMetas = 2 * maxIndexedMembers

// eventIndex is what indexEvent reads of a JSON watch event.
type eventIndex struct {
	// typ is the event's "type" (empty when absent or null).
	typ string
	// obj is the raw value of the event's "object", a sub-slice of the
	// event from byte objAt; nil when absent or null.
	obj   []byte
	objAt int
	// members are obj's members in order when indexed is true: obj is an
	// object of at most maxIndexedMembers members. The members of its
	// "metadata" are listed too, in metas (member.sub). Their offsets are
	// in doc, the event's bytes (or a copy of them).
	members, metas []member
	indexed        bool
	doc            []byte
}

// indexEvent reads a JSON watch event, {"type": …, "object": …}, in one
// pass over its bytes: it validates the whole document as encoding/json's
// scanner does (RFC 8259: the grammar, strings without bytes below 0x20
// and with valid escapes, numbers as in §6, nesting of at most
// maxNestingDepth arrays and objects, nothing but whitespace after the
// value), takes the event's type and object as apimachinery's decoding
// into metav1.WatchEvent would (keys matched case-sensitively, the last of
// duplicate keys wins, a null leaves a field as it was, other keys are
// ignored), and lists the object's own members and its metadata's on the
// way (appended to members[:0] and metas[:0], arrays the caller may reuse),
// so that the metadata is read without walking the object again
// (readMetaMembers).
//
// ok is false for anything else: not valid JSON, not an object, a key of
// the event written with escapes or named kind or apiVersion in any
// letter case (client-go reads the event's own type from those), a type
// that is not null or a plain string of valid UTF-8 (encoding/json would
// replace invalid bytes with U+FFFD), nesting deeper than the reference
// accepts. The caller then decodes with apimachinery, which also words
// the error.
// FuzzSplitJSONEvent holds the two to the same result.
//
// One pass, because kwatch reads every byte of every event: validating
// with a library (which cannot say where an object's members are), then
// walking the object for its metadata, read each byte three to five times.
func indexEvent(data []byte, members, metas []member) (eventIndex, bool) {
	x, ok := readEvent(data, members, metas)
	if !ok {
		return eventIndex{}, false
	}
	x.doc = data
	return x, true
}

// What readEvent reads next.
const (
	wantValue        = iota // a value: after ':', or after ',' in an array
	wantValueOrClose        // after '['
	wantKey                 // after ',' in an object
	wantKeyOrClose          // after '{'
	wantNext                // after a value: ',' or the container's close
)

// readEvent is indexEvent, whose x is only meaningful when ok. It walks the
// grammar; readKey and valueEnd read a key and a scalar value, and
// eventLists notes what indexEvent lists as keys and values end.
func readEvent(data []byte, members, metas []member) (x eventIndex, ok bool) {
	var stackBuf [32]bool
	stack := stackBuf[:0] // the open containers: true for an object
	l := eventLists{members: members, metas: metas}
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return x, false
	}
	state := wantValue
	for {
		i = skipSpace(data, i)
		if i >= len(data) {
			return x, false // the event's object never closes
		}
		c := data[i]
		switch state {
		case wantKeyOrClose, wantKey:
			if c == '}' && state == wantKeyOrClose {
				i++
				stack = stack[:len(stack)-1]
				break
			}
			key, esc, at, ok := readKey(data, i)
			if !ok || len(stack) <= notedDepth && !l.keyRead(data, len(stack), key, esc, i+1, at) {
				return x, false
			}
			i, state = at, wantValue
			continue
		case wantNext:
			isObj := stack[len(stack)-1]
			switch {
			case c == ',':
				i++
				state = wantValue
				if isObj {
					state = wantKey
				}
				continue
			case c == '}' && isObj, c == ']' && !isObj:
				i++
				stack = stack[:len(stack)-1]
			default:
				return x, false
			}
		case wantValueOrClose, wantValue:
			switch {
			case c == ']' && state == wantValueOrClose:
				i++
				stack = stack[:len(stack)-1]
			case c == '{' || c == '[':
				if len(stack) >= maxNestingDepth {
					return x, false // deeper than the reference decodes
				}
				stack = append(stack, c == '{')
				i++
				state = wantValueOrClose
				if c == '{' {
					state = wantKeyOrClose
				}
				continue
			default:
				if i, ok = valueEnd(data, i); !ok {
					return x, false
				}
			}
		}
		// A value ended at i, in the container at depth len(stack).
		if len(stack) == 0 { // the event itself
			return x, skipSpace(data, i) == len(data)
		}
		if len(stack) <= notedDepth && !l.valueRead(data, len(stack), i, &x) {
			return x, false
		}
		state = wantNext
	}
}

// readKey reads the member key whose opening quote is data[i], and the ':'
// after it: it returns the key (escapes as written), whether it holds an
// escape, and where the member's value starts (whitespace skipped); ok is
// false when data[i:] does not start with a key and its ':'.
func readKey(data []byte, i int) (key []byte, esc bool, valAt int, ok bool) {
	if data[i] != '"' {
		return nil, false, 0, false
	}
	end, esc, ok := strictString(data, i+1)
	if !ok {
		return nil, false, 0, false
	}
	key = data[i+1 : end]
	i = skipSpace(data, end+1)
	if i >= len(data) || data[i] != ':' {
		return nil, false, 0, false
	}
	return key, esc, skipSpace(data, i+1), true
}

// valueEnd returns where the scalar value (a string, true, false, null or
// a number) that starts at data[i] ends; ok is false when none starts
// there.
func valueEnd(data []byte, i int) (end int, ok bool) {
	switch c := data[i]; {
	case c == '"':
		end, _, ok := strictString(data, i+1)
		return end + 1, ok
	case c == 't':
		return i + 4, bytes.HasPrefix(data[i:], []byte("true"))
	case c == 'f':
		return i + 5, bytes.HasPrefix(data[i:], []byte("false"))
	case c == 'n':
		return i + 4, bytes.HasPrefix(data[i:], []byte("null"))
	case c == '-' || '0' <= c && c <= '9':
		return numberEnd(data, i)
	}
	return i, false
}

// notedDepth is the deepest container whose members eventLists notes:
// the object's metadata, in the event's object, in the event. readEvent
// does not call it for deeper ones.
const notedDepth = 3

// eventLists is what readEvent keeps of the members it is in while it
// reads: the event's member being read, and the members of the event's
// object and of the object's "metadata" listed so far.
type eventLists struct {
	members, metas []member
	key1           []byte // the key of the event's member being read
	val1           int    // where its value starts
	inObj          bool   // the event's "object" is an object, being read
	// Where the key of the object's member being read starts and ends,
	// and where its value starts.
	key2, key2End, val2 int
	over                bool // the object has more than maxIndexedMembers
	// The same for the members of the object's "metadata".
	inMeta              bool
	key3, key3End, val3 int
	metaStart           int
	metaOver            bool
}

// keyRead notes the key of a member at depth d (1: the event's, 2: its
// object's, 3: the object's metadata's), found at data[keyAt:] with its
// value at data[valAt:]. It returns false for a key of the event that
// apimachinery is to decide about.
func (l *eventLists) keyRead(data []byte, d int, key []byte, esc bool, keyAt, valAt int) bool {
	switch {
	case d == 1:
		if esc || bytes.EqualFold(key, []byte("kind")) || bytes.EqualFold(key, []byte("apiVersion")) {
			// An escaped key of the event, or one client-go's
			// decoder reads the event's own type from:
			// apimachinery decides.
			return false
		}
		l.key1, l.val1 = key, valAt
		if string(key) == "object" {
			l.inObj = valAt < len(data) && data[valAt] == '{'
			l.members, l.over, l.metas = l.members[:0], false, l.metas[:0]
		}
	case d == 2 && l.inObj:
		l.key2, l.key2End, l.val2 = keyAt, keyAt+len(key), valAt
		if string(key) == "metadata" {
			// Listed only for a member that is listed itself.
			l.inMeta = valAt < len(data) && data[valAt] == '{' && len(l.members) < maxIndexedMembers
			l.metaStart, l.metaOver = len(l.metas), false
		}
	case d == 3 && l.inMeta:
		l.key3, l.key3End, l.val3 = keyAt, keyAt+len(key), valAt
	}
	return true
}

// valueRead notes a value that ended at data[end] in a container at depth
// d (at least 1): the event's type and object go into x, the object's
// members and its metadata's into the lists. It returns false for a type
// that is not one (eventType).
func (l *eventLists) valueRead(data []byte, d, end int, x *eventIndex) bool {
	switch {
	case d == 1:
		v := data[l.val1:end]
		switch string(l.key1) {
		case "type":
			if !eventType(v, &x.typ) {
				return false
			}
		case "object":
			if string(v) != "null" { // a null leaves the object as it was
				x.obj, x.objAt = v, l.val1
				x.members, x.indexed = l.members, l.inObj && !l.over
				x.metas = l.metas
			}
			l.inObj = false
		}
	case d == 2 && l.inObj:
		mb := member{keyAt: l.key2, keyEnd: l.key2End, valAt: l.val2, valEnd: end}
		if l.inMeta {
			mb.sub, mb.subEnd, mb.subIndexed = l.metaStart, len(l.metas), !l.metaOver
			l.inMeta = false
		}
		if len(l.members) < maxIndexedMembers {
			l.members = append(l.members, mb)
		} else {
			l.over = true
		}
	case d == 3 && l.inMeta:
		if len(l.metas)-l.metaStart < maxIndexedMembers && len(l.metas) < maxIndexedMetas {
			l.metas = append(l.metas, member{keyAt: l.key3, keyEnd: l.key3End, valAt: l.val3, valEnd: end})
		} else {
			l.metaOver = true
		}
	}
	return true
}

// strictString scans the contents of a JSON string from p[i] (just after
// its opening quote) as encoding/json's scanner does (RFC 8259 §7): it
// returns the index of the closing quote, and esc when the string holds
// an escape; ok is false for a byte below 0x20, an escape that is not one
// of §7's, or a string that does not close. Bytes of 0x80 and above are
// taken as they are (the reference replaces invalid UTF-8 when it
// decodes, and accepts it). Eight bytes at a time: a long run of plain
// text costs a few instructions per word.
func strictString(p []byte, i int) (end int, esc, ok bool) {
	var next runEnds
	for {
		for plain := 0; i+8 <= len(p); plain++ {
			m := stringSpecial(binary.LittleEndian.Uint64(p[i:]))
			if m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
			if plain == 3 {
				// A long plain run: the vectorised search finds the next
				// quote, and the run up to it is checked for the other two.
				i = next.plainRun(p, i)
				plain = 0
			}
		}
		if i >= len(p) {
			return 0, false, false
		}
		switch c := p[i]; {
		case c == '"':
			return i, esc, true
		case c == '\\':
			esc = true
			if i+1 >= len(p) {
				return 0, false, false
			}
			switch p[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(p) || !isHex(p[i+2]) || !isHex(p[i+3]) || !isHex(p[i+4]) || !isHex(p[i+5]) {
					return 0, false, false
				}
				i += 6
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		default: // one of the last seven bytes, plain
			i++
		}
	}
}

// runEnds remembers, within one string, where the vector searches of
// plainRun stopped: quote is the offset of the next '"' at or after the
// runs still to read (len(p) when there is none), backslash that of the
// next '\\' before it (quote when there is none). Each search starts
// past where the last one ended, so a string is searched once in all,
// however many escapes cut it into runs (a file's lines in a ConfigMap,
// each ending in an escaped newline, would otherwise have the rest of the
// string searched for its quote once per line). The zero value knows
// nothing yet.
type runEnds struct {
	quote, backslash int
	known            bool
}

// plainRun returns the end of the run that starts at p[i] and goes up to
// the first '"', '\\' or byte below 0x20 (len(p) when there is none), found
// with bytes.IndexByte's vector search for the quote, then for a backslash
// before it, and a check of the bytes before that for control bytes.
func (r *runEnds) plainRun(p []byte, i int) int {
	if !r.known || r.quote < i {
		r.quote = len(p)
		if k := bytes.IndexByte(p[i:], '"'); k >= 0 {
			r.quote = i + k
		}
		r.backslash, r.known = -1, true
	}
	if r.backslash < i {
		r.backslash = r.quote
		if b := bytes.IndexByte(p[i:r.quote], '\\'); b >= 0 {
			r.backslash = i + b
		}
	}
	k := r.backslash
	for ; i+32 <= k; i += 32 {
		q := p[i : i+32]
		w0, w1 := binary.LittleEndian.Uint64(q), binary.LittleEndian.Uint64(q[8:])
		w2, w3 := binary.LittleEndian.Uint64(q[16:]), binary.LittleEndian.Uint64(q[24:])
		if ((w0-lsb*0x20)&^w0|(w1-lsb*0x20)&^w1|(w2-lsb*0x20)&^w2|(w3-lsb*0x20)&^w3)&msb != 0 {
			break // a control byte within these 32: found below
		}
	}
	for ; i+8 <= k; i += 8 {
		w := binary.LittleEndian.Uint64(p[i:])
		if (w-lsb*0x20)&^w&msb != 0 {
			break
		}
	}
	for ; i < k; i++ {
		if p[i] < 0x20 {
			return i
		}
	}
	return k
}

// stringSpecial returns w (eight bytes of a string, little-endian) with
// the high bit set in the byte of the first '"', '\\' or byte below 0x20,
// and possibly in bytes after it (a borrow runs upwards from a match, never
// downwards: the lowest bit set is exact), or 0 when there is none.
func stringSpecial(w uint64) uint64 {
	q := w ^ (lsb * '"')
	b := w ^ (lsb * '\\')
	return ((q-lsb)&^q | (b-lsb)&^b | (w-lsb*0x20)&^w) & msb
}

// isHex reports whether b is a hexadecimal digit.
func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

// isDigit reports whether b is a decimal digit.
func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// numberEnd returns the index just past the JSON number at p[i] (RFC 8259
// §6: a minus, an integer part without leading zeros, a fraction, an
// exponent); ok is false when p[i:] does not start with one.
func numberEnd(p []byte, i int) (end int, ok bool) {
	if p[i] == '-' {
		i++
	}
	switch {
	case i >= len(p):
		return 0, false
	case p[i] == '0':
		i++
	case '1' <= p[i] && p[i] <= '9':
		for i++; i < len(p) && isDigit(p[i]); i++ {
		}
	default:
		return 0, false
	}
	if i < len(p) && p[i] == '.' {
		i++
		if i >= len(p) || !isDigit(p[i]) {
			return 0, false
		}
		for i++; i < len(p) && isDigit(p[i]); i++ {
		}
	}
	if i < len(p) && (p[i] == 'e' || p[i] == 'E') {
		i++
		if i < len(p) && (p[i] == '+' || p[i] == '-') {
			i++
		}
		if i >= len(p) || !isDigit(p[i]) {
			return 0, false
		}
		for i++; i < len(p) && isDigit(p[i]); i++ {
		}
	}
	return i, true
}
