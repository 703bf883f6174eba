package printer

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// appendEventLine appends ev as one JSON object, byte for byte what
// encoding/json (HTML escaping off) writes for a jsonEvent, without a
// newline. The object and diff are written as they are; the caller has made
// sure they are single-line JSON. It exists because events are most of
// kwatch's output: reflection-driven encoding cost a sixth of the time of
// kwatch pcap -o json. TestEventLine and FuzzEventLine hold it to
// encoding/json.
func appendEventLine(b []byte, ev *jsonEvent) []byte {
	b = append(b, `{"record":`...)
	b = appendJSONString(b, ev.Record)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, ev.Type)
	b = append(b, `,"object":`...)
	if len(ev.Object) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, ev.Object...)
	}
	b = append(b, `,"chunks":`...)
	b = appendChunks(b, ev.Chunks)
	if len(ev.Frames) > 0 {
		b = append(b, `,"frames":`...)
		b = appendFrames(b, ev.Frames)
	}
	b = append(b, `,"connection":`...)
	b = appendJSONString(b, ev.Connection)
	if ev.Node != "" {
		b = append(b, `,"node":`...)
		b = appendJSONString(b, ev.Node)
	}
	b = append(b, `,"time":`...)
	b = appendJSONString(b, ev.Time)
	b = append(b, `,"exchange":`...)
	b = strconv.AppendInt(b, int64(ev.Exchange), 10)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, int64(ev.Seq), 10)
	b = appendEventIdentity(b, ev)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, ev.Offset, 10)
	b = append(b, `,"length":`...)
	b = strconv.AppendInt(b, ev.Length, 10)
	b = append(b, `,"format":`...)
	b = appendJSONString(b, ev.Format)
	if len(ev.Diff) > 0 {
		b = append(b, `,"diff":`...)
		b = appendCompactDiff(b, ev.Diff)
	}
	return append(b, '}')
}

// appendChunks appends a jsonEvent's chunks as encoding/json writes them:
// null for a nil slice, else an array of their objects, ordinal, dataAt,
// inflated and wire only when set (omitempty).
func appendChunks(b []byte, chunks []jsonChunk) []byte {
	if chunks == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range chunks {
		if i > 0 {
			b = append(b, ',')
		}
		c := &chunks[i]
		b = append(b, `{"size":`...)
		b = strconv.AppendInt(b, c.Size, 10)
		b = append(b, `,"sizeLine":`...)
		b = appendJSONString(b, c.SizeLine)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, c.Offset, 10)
		b = append(b, `,"index":`...)
		b = strconv.AppendInt(b, int64(c.Index), 10)
		b = append(b, `,"events":`...)
		b = strconv.AppendInt(b, int64(c.Events), 10)
		if c.Ordinal != 0 {
			b = append(b, `,"ordinal":`...)
			b = strconv.AppendInt(b, int64(c.Ordinal), 10)
		}
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, c.Bytes, 10)
		if c.DataAt != nil {
			b = append(b, `,"dataAt":`...)
			b = strconv.AppendInt(b, *c.DataAt, 10)
		}
		if c.Inflated != 0 {
			b = append(b, `,"inflated":`...)
			b = strconv.AppendInt(b, c.Inflated, 10)
		}
		if c.Wire != "" {
			b = append(b, `,"wire":`...)
			b = appendJSONString(b, c.Wire)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendFrames appends a jsonEvent's HTTP/2 DATA frames as encoding/json
// writes them: an array of their objects, the fields tagged omitempty only
// when set.
func appendFrames(b []byte, frames []jsonFrame) []byte {
	b = append(b, '[')
	for i := range frames {
		if i > 0 {
			b = append(b, ',')
		}
		f := &frames[i]
		b = append(b, `{"stream":`...)
		b = strconv.AppendUint(b, uint64(f.Stream), 10)
		b = append(b, `,"index":`...)
		b = strconv.AppendInt(b, int64(f.Index), 10)
		b = append(b, `,"length":`...)
		b = strconv.AppendInt(b, f.Length, 10)
		if f.Padded {
			b = append(b, `,"padded":true`...)
		}
		if f.Padding != 0 {
			b = append(b, `,"padding":`...)
			b = strconv.AppendInt(b, f.Padding, 10)
		}
		if f.EndStream {
			b = append(b, `,"endStream":true`...)
		}
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, f.Offset, 10)
		for _, kv := range [...]struct {
			key string
			v   int64
		}{{`,"events":`, int64(f.Events)}, {`,"ordinal":`, int64(f.Ordinal)}, {`,"bytes":`, f.Bytes}} {
			if kv.v != 0 {
				b = append(b, kv.key...)
				b = strconv.AppendInt(b, kv.v, 10)
			}
		}
		if f.DataAt != nil {
			b = append(b, `,"dataAt":`...)
			b = strconv.AppendInt(b, *f.DataAt, 10)
		}
		if f.Inflated != 0 {
			b = append(b, `,"inflated":`...)
			b = strconv.AppendInt(b, f.Inflated, 10)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendEventIdentity appends what a jsonEvent says of its object (kind,
// row kind, namespace, name, resource version), of its place in the
// initial events, and the JSON type of an object that is not an object,
// each only when set (omitempty).
func appendEventIdentity(b []byte, ev *jsonEvent) []byte {
	for _, f := range [...]struct{ key, v string }{
		{`,"apiVersion":`, ev.APIVersion}, {`,"kind":`, ev.Kind}, {`,"rowKind":`, ev.RowKind}, {`,"namespace":`, ev.Namespace}, {`,"name":`, ev.Name},
		{`,"uid":`, ev.UID}, {`,"resourceVersion":`, ev.ResourceVersion},
	} {
		if f.v != "" {
			b = append(b, f.key...)
			b = appendJSONString(b, f.v)
		}
	}
	if ev.InitialEventsEnd {
		b = append(b, `,"initialEventsEnd":true`...)
	}
	if ev.Initial {
		b = append(b, `,"initial":true`...)
	}
	if ev.NotObject != "" {
		b = append(b, `,"notObject":`...)
		b = appendJSONString(b, ev.NotObject)
	}
	return b
}

// appendCompactDiff appends a diff compacted as encoding/json writes a
// json.RawMessage, or null when it is not valid JSON.
func appendCompactDiff(b []byte, diff json.RawMessage) []byte {
	var c bytes.Buffer
	if json.Compact(&c, diff) == nil {
		return append(b, c.Bytes()...)
	}
	return append(b, "null"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string (RFC 8259 §7) the way
// encoding/json writes one with HTML escaping off: '"' and '\' escaped,
// control characters as \b \f \n \r \t or \u00XX, bytes that are not
// UTF-8 as \ufffd, and U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	from := 0 // start of the bytes not yet copied
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[from:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			from = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, s[from:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[from:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += n
			continue
		}
		i += n
		from = i
	}
	b = append(b, s[from:]...)
	return append(b, '"')
}

// validUTF8Writer passes JSON lines on to w as valid UTF-8, which JSON text
// exchanged between systems must be (RFC 8259 §8.1). encoding/json makes a
// Go string valid when it writes one (appendJSONString does the same), but
// copies a json.RawMessage as it is, and the decoders keep an object's bytes
// as they came from the wire (pkg/event validates JSON syntax, not UTF-8):
// an object holding a string such as "\xc0\xaf" would make the whole line
// something that is not JSON text. Each line is checked as a whole, so that
// no raw value can be missed; only a line that fails is copied, with
// appendValidUTF8. Byte counts in the records are not affected: they count
// the bytes on the wire.
type validUTF8Writer struct {
	w *errWriter
	// buf holds the last line rewritten.
	buf []byte
}

// Write passes p, one or more whole lines, on to w, rewritten if it is not
// valid UTF-8. It returns len(p) and w's error.
func (v *validUTF8Writer) Write(p []byte) (int, error) {
	if utf8.Valid(p) {
		return v.w.Write(p)
	}
	v.buf = appendValidUTF8(v.buf[:0], p)
	_, err := v.w.Write(v.buf)
	if cap(v.buf) > 1<<20 {
		v.buf = nil // do not keep a buffer sized for one huge event
	}
	return len(p), err
}

// appendValidUTF8 appends the JSON text p with each byte that does not
// belong to a UTF-8 encoded character written as the escape \ufffd: one
// escape per byte, by utf8.DecodeRune's rule, the one encoding/json
// follows when it writes a Go string and when it reads a JSON string.
// Bytes of 0x80 and above occur only inside the strings of syntactically
// valid JSON, where the escape stands for U+FFFD; encoding/json reads the
// same values from the result as from p.
func appendValidUTF8(b, p []byte) []byte {
	from := 0 // start of the bytes not yet copied
	for i := 0; i < len(p); {
		if p[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, p[from:i]...)
			b = append(b, `\ufffd`...)
			from = i + 1
		}
		i += n
	}
	return append(b, p[from:]...)
}
