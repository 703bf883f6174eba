package event

import "bytes"

// protoMagic is the prefix of every object kube-apiserver encodes as
// protobuf (apimachinery runtime/serializer/protobuf: "k8s" and a zero
// byte, then a runtime.Unknown): a protobuf WatchEvent's object field holds
// one.
const protoMagic = "k8s\x00"

// StartFormat reports the format of a watch body that p starts, judged from
// its bytes alone, for a body whose headers were not seen (an HTTP/2
// stream joined in the middle of a connection). p must start where an
// event starts: each format's first bytes are what kube-apiserver writes
// at the start of every event, so bytes from the middle of an event are
// not taken for a start.
//
//   - JSON: `{"type":` (a compact metav1.WatchEvent, "type" first).
//   - Protobuf: a 4-byte big-endian length prefix, the WatchEvent's type
//     field (tag 0x0a, a length, a watch event type's name), its object
//     field (tag 0x12, a varint length) holding a RawExtension whose raw
//     field (tag 0x0a, a varint length) starts with the object's
//     "k8s\x00" magic.
//   - CBOR: the self-described CBOR tag d9 d9 f7 (RFC 8949 §3.4.6), a map
//     of two pairs and its first key, "type" or "object" (cborEventStarts).
//
// ok is false when p starts none of them, or is too short to tell.
func StartFormat(p []byte) (f Format, ok bool) {
	switch {
	case bytes.HasPrefix(p, []byte(eventStart)):
		return FormatJSON, true
	case protoEventStart(p):
		return FormatProtobuf, true
	}
	for _, pat := range cborEventStarts {
		if bytes.HasPrefix(p, pat) {
			return FormatCBOR, true
		}
	}
	return 0, false
}

// protoEventStart reports whether p starts with a whole protobuf watch
// event's start: protoStart's prefix and type, then the object field and
// the object's magic (see StartFormat).
func protoEventStart(p []byte) bool {
	if len(p) < 6 {
		return false
	}
	n := 6 + int(p[5]) // prefix, tag, the type's length and its name
	if len(p) < n {
		return false
	}
	if ok, done := protoStart(p[:n], DefaultMaxEventBytes); !ok || !done {
		return false
	}
	// The object field (2) holds a runtime.RawExtension, whose raw field
	// (1) holds the object's bytes: tags 0x12 and 0x0a, each with a
	// varint length, then the magic.
	rest := p[n:]
	for _, tag := range []byte{0x12, 0x0a} {
		if len(rest) < 1 || rest[0] != tag {
			return false
		}
		// A varint of at most 5 bytes: the event is at most 4 GiB, its
		// 4-byte prefix says.
		i := 1
		for i < len(rest) && i <= 5 && rest[i]&0x80 != 0 {
			i++
		}
		if i >= len(rest) || i > 5 {
			return false
		}
		rest = rest[i+1:]
	}
	return bytes.HasPrefix(rest, []byte(protoMagic))
}
