package h2conn

import "slices"

// Finding HTTP/2 frames in the first bytes of a direction that a capture
// joined in the middle of a connection (Options.Joined), where no preface
// says what the bytes are and the first byte may be anywhere in a frame.
// pkg/wire decides with a FrameScan whether a connection's first bytes are
// HTTP/2 at all; each direction of a joined Conn scans its own first bytes
// with one to find where its frames start.
//
// A frame header is 9 bytes (RFC 9113 §4.1): a 24-bit payload length, an
// 8-bit type, 8 bits of flags, a reserved bit and a 31-bit stream
// identifier. One plausible header proves little: a chain of them, each
// where the length of the one before puts it, does.

// Bounds of a FrameScan.
const (
	// ScanBytes bounds the bytes a FrameScan looks at (and what a
	// direction holds while it scans): 64 KiB. A chain of frame headers
	// must lie within them.
	ScanBytes = 64 << 10
	// MaxJoinSkip bounds where the first frame boundary may be: within
	// the rest of one frame of the largest size a peer may send before
	// SETTINGS_MAX_FRAME_SIZE is raised, 16 384 bytes of payload and its
	// header (RFC 9113 §4.2, §6.5.2). kube-apiserver's DATA frames to
	// client-go, and curl's, are at most that (client-go and curl
	// advertise 16 384). A join inside a larger frame is not found.
	MaxJoinSkip = 9 + defaultMaxFrame
	// defaultMaxFrame is SETTINGS_MAX_FRAME_SIZE's initial value (RFC
	// 9113 §6.5.2), in bytes of payload.
	defaultMaxFrame = 1 << 14
	// chainLen is how many plausible frame headers in a row are taken
	// for HTTP/2 frames (see FrameScan).
	chainLen = 3
)

// frameRule is what RFC 9113 §6 allows a frame type: its flags, whether
// its stream identifier must be 0 (the connection) or must not be, and the
// payload lengths it may have.
type frameRule struct {
	flags  byte
	stream int8 // 0: must be 0; 1: must not be 0; -1: either
	// exact: the only payload length allowed (-1: any length of at least
	// min bytes); mod: the length is a multiple of it (SETTINGS).
	exact, min, mod int
}

// frameRules holds the rules of the frame types RFC 9113 defines (0 to 9),
// by type. Flags a type does not define must be unset when sent (§4.1).
var frameRules = [10]frameRule{
	0x0: {flags: 0x1 | 0x8, stream: 1, exact: -1},              // DATA: END_STREAM, PADDED (§6.1)
	0x1: {flags: 0x1 | 0x4 | 0x8 | 0x20, stream: 1, exact: -1}, // HEADERS: END_STREAM, END_HEADERS, PADDED, PRIORITY (§6.2)
	0x2: {stream: 1, exact: 5},                                 // PRIORITY (§6.3)
	0x3: {stream: 1, exact: 4},                                 // RST_STREAM (§6.4)
	0x4: {flags: 0x1, stream: 0, exact: -1, mod: 6},            // SETTINGS: ACK (§6.5)
	0x5: {flags: 0x4 | 0x8, stream: 1, exact: -1, min: 4},      // PUSH_PROMISE: END_HEADERS, PADDED (§6.6)
	0x6: {flags: 0x1, stream: 0, exact: 8},                     // PING: ACK (§6.7)
	0x7: {stream: 0, exact: -1, min: 8},                        // GOAWAY (§6.8)
	0x8: {stream: -1, exact: 4},                                // WINDOW_UPDATE (§6.9)
	0x9: {flags: 0x4, stream: 1, exact: -1},                    // CONTINUATION: END_HEADERS (§6.10)
}

// PlausibleHeader reports whether h, the first len(h) bytes (at most 9) of
// a frame header, can be the start of a frame a peer sends: a type RFC
// 9113 defines (0-9), only the flags that type defines, the stream
// identifier's reserved bit 0, a stream identifier of 0 for the
// connection's frames (SETTINGS, PING, GOAWAY) and not 0 for a stream's,
// and a payload length the type allows (PING 8, WINDOW_UPDATE and
// RST_STREAM 4, PRIORITY 5, SETTINGS a multiple of 6 or, as an ACK, 0,
// room for the pad length and priority fields that the flags announce).
// The 24-bit length itself needs no bound: 2^24-1 is what RFC 9113 §4.2
// allows at most. Text never passes: of the bytes of text (printable
// ASCII, tab, CR, LF), only tab (0x09, CONTINUATION) is a type, and
// CONTINUATION's flags must be 0x00 or 0x04.
func PlausibleHeader(h []byte) bool {
	if len(h) > 9 {
		h = h[:9]
	}
	if len(h) < 4 {
		return true
	}
	if h[3] >= byte(len(frameRules)) {
		return false
	}
	r := frameRules[h[3]]
	length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	switch {
	case r.exact >= 0 && length != r.exact,
		length < r.min,
		r.mod > 0 && length%r.mod != 0:
		return false
	}
	if len(h) < 5 {
		return true
	}
	flags := h[4]
	if flags&^r.flags != 0 {
		return false
	}
	switch h[3] {
	case 0x0, 0x5: // PADDED: the pad length field
		if flags&0x8 != 0 && length < r.min+1 {
			return false
		}
	case 0x1: // PADDED and PRIORITY: 1 and 5 bytes before the block
		need := 0
		if flags&0x8 != 0 {
			need++
		}
		if flags&0x20 != 0 {
			need += 5
		}
		if length < need {
			return false
		}
	case 0x4: // a SETTINGS ACK has no payload (§6.5)
		if flags&0x1 != 0 && length != 0 {
			return false
		}
	}
	if len(h) < 6 {
		return true
	}
	if h[5]&0x80 != 0 { // the reserved bit (§4.1)
		return false
	}
	if len(h) < 9 {
		return true
	}
	stream := uint32(h[5]&0x7f)<<24 | uint32(h[6])<<16 | uint32(h[7])<<8 | uint32(h[8])
	switch r.stream {
	case 0:
		return stream == 0
	case 1:
		return stream != 0
	}
	return true
}

// ScanVerdict is what a FrameScan found in the bytes it was shown.
type ScanVerdict uint8

const (
	// ScanMore: not decided yet; more bytes are needed.
	ScanMore ScanVerdict = iota
	// ScanFound: HTTP/2 frames start at the offset Scan returned.
	ScanFound
	// ScanNone: these are not HTTP/2 frames, or no frame boundary lies
	// where one is looked for (within MaxJoinSkip bytes, with its chain
	// within ScanBytes).
	ScanNone
)

// FrameScan finds where HTTP/2 frames start in the first bytes of one
// direction. Frames start at an offset o when a chain of 3 plausible
// headers starts there: the first header, the second where the first's
// length puts it, the third where the second's puts it; at o > 0 (within
// MaxJoinSkip) the bytes before o are the rest of a frame whose start was
// not captured. When the direction ends (Scan's end), a chain that ends
// exactly at its last byte counts too: of 1 frame at offset 0, of 2
// elsewhere. Three even at offset 0, where two would do for real
// connections: the control frames of a conversation with zeros in their
// payloads (PRIORITY, RST_STREAM, PING) passed for two headers in a row
// when cut inside one (TestScan), and the third costs only waiting for
// one more frame.
//
// The bytes inside a frame pass for headers more often than chance says:
// real frames are mostly zeros and small numbers. So three kinds of
// frames do not count toward a chain, though they may be in one (at most
// 9 in a chain): a frame longer than 16 384 bytes (SETTINGS_MAX_FRAME_SIZE
// starts there, RFC 9113 §6.5.2, and real peers rarely raise what they
// receive); an empty frame (the end of a WINDOW_UPDATE header on stream 1
// and its increment, 00 00 00 00 01 and four bytes, read as an empty DATA
// frame with END_STREAM); and one of a stream at or above 2^24 (client
// streams are numbered 1, 3, 5, …: a connection gets there after 8
// million requests). A chain starts with a frame that counts. And a chain
// is out when one of its frames holds the header of a frame that counts
// and ends where a later frame of the chain starts (overlapped): frames
// that overlap cannot both be real, and the false one is the one that
// jumps over the real one. TestScan cuts real connections at every byte
// of their first frames and finds the next frame that can start a chain
// each time.
//
// When the direction's bytes come in TLS records (RecordEnd), a record's
// end is a known end too: a chain from a record's start of one frame that
// counts and ends exactly at a record's end, or from elsewhere of what
// would do at the direction's end, is enough, and no frame of it may jump
// over a frame that ends at that record's end (overlapped). A record that
// starts inside a frame a header that counts at an earlier record's start
// announces (a write cut into records inside a frame) is not taken by
// itself (spanned).
//
// The earliest offset wins, and is decided only once every offset before
// it is ruled out, so that the answer depends on the bytes alone, never
// on how they were split.
//
// The zero value is ready; it keeps what it ruled out from call to call,
// so each call costs little more than the bytes that are new.
type FrameScan struct {
	// Known says the connection is known to be HTTP/2 (its other
	// direction showed a chain): only where this direction's frames
	// start is in question, and less proves it: a chain of 2 headers, or
	// 1 frame that ends with the direction.
	Known bool
	// Eager, with Known, takes one whole plausible frame at offset 0
	// (even an empty one) for the start of frames, without waiting for
	// another: for a client, which writes each frame whole, so that its
	// first captured packet starts one, and may send no more than a
	// SETTINGS ACK and one request's HEADERS for minutes; waiting for
	// more would hand its requests on after their responses. A server's
	// first packet may well start inside a DATA frame (16 KiB frames
	// cut into segments), so a server is not eager.
	Eager bool

	from int // offsets below from are ruled out
	work int // headers overlapped looked at
	// ends are the offsets where records of the protocol below end
	// (RecordEnd), ascending; at most maxRecordEnds.
	ends []int
}

// maxRecordEnds bounds the record ends a FrameScan keeps: past it, more
// records are as bytes that came without them (a TLS record holds at
// least 1 byte: ScanBytes of 1-byte records would be 64 Ki ends).
const maxRecordEnds = 1024

// RecordEnd tells the scan that a record of the protocol that carries the
// direction ends at offset at of its first bytes: a TLS record (RFC 8446
// §5.1, RFC 5246 §6.2) whose plaintext was the bytes before at, back to
// the record before. Call it before Scan sees the bytes up to at, with at
// ascending. The direction's first byte starts a record. HTTP/2 writers
// (Go's x/net/http2 and net/http, grpc-go, nghttp2) hand TLS a run of
// whole frames at each flush, so a record starts at a frame boundary
// unless a write larger than a record was cut: a chain of frame headers
// from a record's start that ends exactly at a record's end is as strong
// as one that ends with the direction (see FrameScan), and it is known
// when that record has come rather than when more frames follow. Offsets
// past ScanBytes, or not above the last, are ignored.
func (s *FrameScan) RecordEnd(at int) {
	if at <= 0 || at > ScanBytes || len(s.ends) >= maxRecordEnds || len(s.ends) > 0 && at <= s.ends[len(s.ends)-1] {
		return
	}
	s.ends = append(s.ends, at)
}

// recordEnd reports whether a record ends at offset at (RecordEnd); the
// direction's start counts as the end of the record before.
func (s *FrameScan) recordEnd(at int) bool {
	if at == 0 {
		return len(s.ends) > 0
	}
	_, found := slices.BinarySearch(s.ends, at)
	return found
}

// chain is the state of the chain of frame headers at one offset.
type chain uint8

const (
	chainPending chain = iota
	chainOut
	chainFound
)

// Scan looks at p, the direction's first bytes: each call's p holds the
// bytes of the call before and perhaps more. end says that no more will
// come (the direction ended, or lost bytes follow). It returns the offset
// of the first frame with ScanFound. Past ScanBytes, p is not looked at:
// what is not decided by then is ScanNone.
func (s *FrameScan) Scan(p []byte, end bool) (at int, v ScanVerdict) {
	full := len(p) >= ScanBytes
	if full {
		p, end = p[:ScanBytes], false
	}
	for s.from < len(p) && s.from <= MaxJoinSkip {
		switch s.chainAt(p, s.from, end, full) {
		case chainFound:
			return s.from, ScanFound
		case chainPending:
			return 0, ScanMore
		}
		s.from++
	}
	if end || full || s.from > MaxJoinSkip {
		return 0, ScanNone
	}
	return 0, ScanMore
}

// chainAt follows the chain of frame headers from offset o of p, for
// chainLen headers that count. end: p is all the direction sent (a chain
// that ends exactly at its end counts: of 1 frame from offset 0, of 2
// from a later one); full: p is all that is looked at (a chain not
// complete within it is out). A chain whose frame overlaps another run of
// frames (overlapped) is out.
func (s *FrameScan) chainAt(p []byte, o int, end, full bool) chain {
	need, short := chainLen, 2
	switch {
	case s.Known && s.Eager && o == 0:
		need, short = 1, 1
	case s.Known:
		need, short = 2, 1
	case o == 0:
		short = 1
	}
	// From a record's start, one frame that counts and ends exactly at
	// a record's end will do (RecordEnd); from elsewhere, a chain that
	// ends at one is as a chain that ends with the direction.
	recShort := short
	if s.recordEnd(o) && !s.spanned(p, o) {
		recShort = 1
	}
	// The chain's header offsets (at most 9 that do not count), and the
	// record end it ended at.
	var at [chainLen*4 + 1]int
	k := 0
	pos, n := o, 0
	for n < need {
		if pos == len(p) && end && n >= short {
			break // the last frame ended with the direction
		}
		if pos > o && pos <= len(p) && n >= recShort && s.recordEnd(pos) {
			// The last frame ended with a record: the record's end is
			// a frame's start, which no frame of the chain may jump
			// over either (see overlapped).
			at[k] = pos
			k++
			break
		}
		if pos >= len(p) {
			if end || full {
				return chainOut
			}
			return chainPending
		}
		h := p[pos:min(pos+9, len(p))]
		if !PlausibleHeader(h) {
			return chainOut
		}
		if len(h) < 9 {
			if end || full {
				return chainOut
			}
			return chainPending
		}
		length := frameLen(h)
		switch {
		case counts(h), s.Known && s.Eager && pos == 0:
			n++
		case pos == o:
			return chainOut // a chain starts with a frame that counts
		}
		if k == len(at)-1 {
			return chainOut // more frames that do not count than any peer sends in a row
		}
		at[k] = pos
		k++
		pos += 9 + length
		if n < need && pos+9 > ScanBytes && !(end && pos == len(p)) {
			return chainOut // the next header lies past what is looked at
		}
	}
	// The frames between the chain's headers, whose bytes are all there
	// whatever came after (so that the answer does not depend on how
	// many did).
	for i := 0; i+1 < k; i++ {
		if s.overlapped(p, at[i], at[i+1], at[i+1:k]) {
			return chainOut
		}
	}
	return chainFound
}

// spanned reports whether offset o of p lies inside a frame that a
// header that counts announces at an earlier record start: a record that
// starts there is then not taken for the start of frames by itself (a
// write cut into records inside a frame, whose later record's bytes pass
// for frames that fill it).
func (s *FrameScan) spanned(p []byte, o int) bool {
	spans := func(r int) bool {
		h := p[r:min(r+9, len(p))]
		return len(h) == 9 && PlausibleHeader(h) && counts(h) && r+9+frameLen(h) > o
	}
	lo := o - 9 - defaultMaxFrame // a frame that counts is no longer
	if lo <= 0 && o > 0 && spans(0) {
		return true
	}
	i, _ := slices.BinarySearch(s.ends, max(lo, 1))
	for ; i < len(s.ends) && s.ends[i] < o; i++ {
		if spans(s.ends[i]) {
			return true
		}
	}
	return false
}

// frameLen is the payload length a frame header announces.
func frameLen(h []byte) int { return int(h[0])<<16 | int(h[1])<<8 | int(h[2]) }

// counts reports whether a plausible header counts toward a chain (see
// FrameScan).
func counts(h []byte) bool {
	n := frameLen(h)
	return n > 0 && n <= defaultMaxFrame && h[5] == 0
}

// maxOverlapWork bounds the headers overlapped looks at in one FrameScan,
// so that bytes built to make many chains cost no more than a few passes
// over ScanBytes.
const maxOverlapWork = 4 * ScanBytes

// overlapped reports whether a frame of a chain, from its header at from
// to the next header at to, holds the header of a frame that counts and
// ends exactly where one of the chain's later frames starts: at one of
// the offsets in later. Frames that overlap cannot both
// be real, and it is the false one that jumps over the real one: a chain
// that starts inside a run of small frames (WINDOW_UPDATEs, 13 bytes
// each, mostly zeros) takes a few of their bytes for a header whose
// length lands on or near a later frame of the run, and goes on with the
// real ones; the real frame that ends at the same place starts inside
// the false one. A real frame holds no such header but by chance (text,
// none at all). Past maxOverlapWork the answer is yes: bytes that take
// that much looking at are taken for no frames.
func (s *FrameScan) overlapped(p []byte, from, to int, later []int) bool {
	last := later[len(later)-1]
	for q := from + 1; q < to && q+9 <= last; q++ { // a frame whose header ends past last cannot end at it
		if s.work++; s.work > maxOverlapWork {
			return true
		}
		h := p[q : q+9]
		end := q + 9 + frameLen(h)
		if end > last || !counts(h) || !PlausibleHeader(h) {
			continue
		}
		for _, l := range later {
			if end == l {
				return true
			}
		}
	}
	return false
}
