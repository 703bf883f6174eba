// Package event splits the de-chunked body of a Kubernetes watch response
// into watch events, keeps for each event the byte offsets and the chunks that
// carried it, and decodes each event with apimachinery's serializers.
//
// Framing follows what the API server writes (Kubernetes API concepts:
// efficient detection of changes; apimachinery runtime/serializer):
//   - JSON watches ("application/json", "application/json;stream=watch"): one
//     JSON object per event, {"type":…,"object":…}, each followed by "\n".
//     apimachinery's json.Framer reads frames through encoding/json.Decoder,
//     which cannot report where a frame began and ended on the wire, so the
//     Framer here scans for the end of each top-level JSON object itself
//     (tracking nesting depth, strings and escapes) and records byte offsets.
//     The bytes of each frame are then decoded by apimachinery.
//   - Protobuf watches ("application/vnd.kubernetes.protobuf;stream=watch"):
//     each event is a 4-byte big-endian length followed by that many bytes of
//     a protobuf metav1.WatchEvent (apimachinery protobuf.LengthDelimitedFramer).
//   - CBOR watches ("application/cbor-seq"): one self-described CBOR data
//     item per event, nothing between them (RFC 8742; see cbor.go).
//
// The Framer is push-based and bounded: it is fed data in any split with the
// index of the chunk each byte arrived in, and keeps at most
// Limits.MaxEventBytes of one event.
package event

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
)

// Format is the framing of a watch body.
type Format uint8

// The watch body formats kwatch decodes.
const (
	// FormatJSON is newline-separated JSON objects.
	FormatJSON Format = iota + 1
	// FormatProtobuf is 4-byte big-endian length-prefixed protobuf frames.
	FormatProtobuf
	// FormatCBOR is a CBOR Sequence (RFC 8742): one CBOR data item per
	// event.
	FormatCBOR
)

// String returns "json", "protobuf" or "cbor".
func (f Format) String() string {
	switch f {
	case FormatJSON:
		return "json"
	case FormatProtobuf:
		return "protobuf"
	case FormatCBOR:
		return "cbor"
	}
	return "unknown"
}

// DefaultMaxEventBytes is the default bound on one event's size, in bytes
// (64 MiB). It is far above the API server's own default request limit
// (3 MiB per object in etcd, 1.5 MiB by default) so that real objects always
// decode; apimachinery's streaming decoder default has cut real watches short.
const DefaultMaxEventBytes = 64 << 20

// Span is the part of one event that one carrier (an HTTP/1.1 chunk, an
// HTTP/2 DATA frame) carried.
type Span struct {
	// Carrier is the index of the carrier in the body (chunk.Chunk.Index,
	// record.Frame.Index), or -1 when the body has no carriers (a
	// Content-Length or close-delimited HTTP/1.1 body).
	Carrier int
	// Bytes is how many bytes of the event that carrier carried.
	Bytes int64
}

// Frame is one complete event as framed from the body.
type Frame struct {
	// Data holds the event's bytes: the JSON object, or the protobuf payload
	// without its 4-byte length prefix. It is nil when the event exceeded
	// the size bound (see Oversize). Data is owned by the receiver.
	Data []byte
	// Offset is the byte offset of the event's first byte (for protobuf, the
	// length prefix) in the de-chunked body.
	Offset int64
	// Length is the event's length in bytes on the wire, prefix included.
	Length int64
	// Spans lists, in wire order, the chunks that carried the event.
	Spans []Span
	// Oversize is true when the event was longer than the Framer's limit;
	// its bytes were skipped, not kept.
	Oversize bool
	// Damaged is true when bytes of the event were lost (a gap in the
	// capture); its Data is incomplete.
	Damaged bool
	// Serial numbers the frames of a body from 1 in the order they started.
	Serial int
	// UnlistedChunks counts the chunks that carried bytes of the event
	// after Spans reached the Framer's bound (see LimitSpans), and
	// UnlistedBytes the bytes they carried.
	UnlistedChunks int
	UnlistedBytes  int64
	// Decoded and DecodeErr, when either is set, are what Decode(format,
	// Data, opt) returns, found as the frame was framed (see
	// Framer.DecodeWith): the receiver need not decode Data again.
	Decoded   *Event
	DecodeErr error
}

// DefaultMaxSpans bounds the chunks listed for one event (Frame.Spans):
// 16384, which lists every chunk of a 64 MiB event cut into 4 KiB chunks
// and keeps a Frame's bookkeeping under 256 KiB however many tiny chunks
// carry the event.
const DefaultMaxSpans = 1 << 14

// Problem kinds the Framer reports.
const (
	KindJunk      = "bytes outside a watch event"
	KindOversize  = "watch event larger than the limit"
	KindTruncated = "watch event cut short"
	KindLost      = "watch event damaged by lost bytes"
	// KindRegained (a warning) says where protobuf framing was found
	// again after lost bytes.
	KindRegained = "protobuf framing regained"
	// KindCBORRegained (a warning) says where CBOR framing was found
	// again: an event start after lost bytes.
	KindCBORRegained = "CBOR framing regained"
	// KindMalformed is a CBOR data item that is not well-formed (RFC 8949
	// §3) or announces more bytes than the event bound.
	KindMalformed = "malformed CBOR data item"
)

// FrameProblem is a framing problem at a byte offset of the de-chunked body.
type FrameProblem struct {
	// Offset is the byte offset in the de-chunked body.
	Offset int64
	// Kind is the stable wording, one of the Kind constants.
	Kind string
	// Detail gives the values involved.
	Detail string
	// Warning is true for a report that loses nothing (KindRegained).
	Warning bool
	// Hint, when set, says what to do about it (a flag to raise).
	Hint string
}

// Framer splits a watch body into Frames. Create it with NewFramer; it is
// not safe for concurrent use.
type Framer struct {
	format  Format
	max     int64
	onFrame func(*Frame)
	onProb  func(FrameProblem)

	maxSpans int

	serial int   // frames started
	off    int64 // de-chunked offset of the next byte
	in     bool  // inside a frame
	cur    Frame
	// free holds Frames given back by Recycle, handed out again by emit;
	// spare is the Spans array of the last one, for the next event.
	free   []*Frame
	spare  []Span
	direct bool // take counts the bytes of an event whole in one write, without keeping them
	// decode and decodeOpt: see DecodeWith.
	decode    bool
	decodeOpt DecodeOptions
	// nlAt is the body offset of the last newline lineEnd found (-1:
	// none), nlTrim that of the end of its line's text; [nlFrom, nlNone)
	// a range it found none in.
	nlAt, nlTrim, nlFrom, nlNone int64
	buf                          []byte    // the current frame's first bytes, up to maxKeptBuffer
	more                         []*[]byte // its bytes after buf, in blocks of eventBlock bytes (blockPool)
	parts                        [][]byte  // reused by kept
	curLen                       int64     // bytes of the current frame so far, kept or not
	damaged                      bool

	// JSON scanner state.
	depth  int
	inStr  bool
	escape bool
	cand   int        // bytes of eventStart matched after a newline inside an event; -1: none
	pend   []pendByte // those bytes, held
	junk   int64      // junk bytes seen since the last frame
	junkAt int64

	resync  bool // JSON: skip to the next line before looking for '{'
	atChunk bool // the next byte is the first data byte of a chunk
	lost    bool // protobuf, CBOR: framing lost; looking for an event start

	unlistedAt int // chunk of the last unlisted bytes

	budget *Budget // shared with other connections; nil: no bound
	held   int64   // bytes of buf reserved from budget

	// Protobuf state.
	probing bool   // lost: the chunk in progress is being checked for an event start
	probe   []byte // its first bytes, at most 14 (see protoStart)
	probeC  int    // its chunk index
	// regainSerial is the serial of the first frame after framing was
	// regained (0: none): while it or the next one shows the regain was
	// wrong, the framer searches again (see Suspect).
	regainSerial int
	prefix       [4]byte
	nprefix      int
	want         int64 // payload bytes of the current frame (protobuf)

	// CBOR state.
	cbor   cborScan
	seekAt int64 // where the search for an event start began
	// hold: bytes at an item boundary that may start a new event
	// (holdCBOR); holdOff: the next byte was held and is the event's.
	hold    []pendByte
	holdOff bool
}

// NewFramer returns a Framer for format f that calls onFrame for every
// complete event and onProblem for framing problems. maxEventBytes bounds one
// event (0 means DefaultMaxEventBytes).
func NewFramer(f Format, maxEventBytes int64, onFrame func(*Frame), onProblem func(FrameProblem)) *Framer {
	if maxEventBytes <= 0 {
		maxEventBytes = DefaultMaxEventBytes
	}
	return &Framer{format: f, max: maxEventBytes, maxSpans: DefaultMaxSpans, onFrame: onFrame, onProb: onProblem, cand: -1, nlAt: -1}
}

// LimitSpans sets how many chunks are listed for one event (n ≥ 1; the
// default is DefaultMaxSpans). Chunks after those are only counted
// (Frame.UnlistedChunks).
func (fr *Framer) LimitSpans(n int) {
	if n >= 1 {
		fr.maxSpans = n
	}
}

// SetBudget makes the Framer reserve the bytes of the event in progress
// from b, shared with other connections' buffers. An event that does not
// fit is skipped and reported (KindBudget); its bytes are released when
// it is handed over (onFrame) or dropped.
func (fr *Framer) SetBudget(b *Budget) { fr.budget = b }

// DecodeWith makes the Framer decode, with opt, each JSON event that comes
// whole in one write up to a newline (as kube-apiserver ends every event):
// it reads the event once (indexEvent) both to frame and to decode it,
// instead of scanning it for its end and then decoding it, and sets
// Frame.Decoded. Other events are framed as before, Decoded nil.
func (fr *Framer) DecodeWith(opt DecodeOptions) { fr.decode, fr.decodeOpt = true, opt }

// Discard drops the event in progress without reporting it, for a caller
// that stops using the Framer.
func (fr *Framer) Discard() { fr.abandon() }

// abandon ends the event in progress without handing it over, releasing
// its bytes.
func (fr *Framer) abandon() {
	fr.in = false
	fr.drop()
	fr.cur = Frame{}
}

// drop forgets the bytes of the event in progress and releases them.
func (fr *Framer) drop() {
	fr.buf = fr.buf[:0]
	fr.putBlocks()
	fr.budget.Release(fr.held)
	fr.held = 0
}

// maxKeptBuffer is the largest event buffer a Framer keeps for the next
// event, in bytes: at most this much stays with each connection between
// events. An event is handed over as an exact copy of its bytes.
const maxKeptBuffer = 32 << 10

// eventBlock is the size in bytes of the blocks that hold an event's
// bytes past maxKeptBuffer. They are pooled: a 200 KB event arriving
// segment by segment costs its blocks (reused) and its exact copy, where
// a buffer doubling as it grew would allocate about 450 KB and copy as
// much.
const eventBlock = 64 << 10

var blockPool = sync.Pool{New: func() any {
	b := make([]byte, 0, eventBlock)
	return &b
}}

// putBlocks gives the blocks of the event in progress back to the pool.
func (fr *Framer) putBlocks() {
	for i, b := range fr.more {
		*b = (*b)[:0]
		blockPool.Put(b)
		fr.more[i] = nil
	}
	fr.more = fr.more[:0]
}

// keep appends p to the bytes of the event in progress: into buf up to
// maxKeptBuffer (doubling it, never past the event bound), then into
// blocks.
func (fr *Framer) keep(p []byte) {
	for len(p) > 0 {
		if len(fr.more) == 0 && len(fr.buf) < maxKeptBuffer {
			k := min(len(p), maxKeptBuffer-len(fr.buf))
			if need := len(fr.buf) + k; need > cap(fr.buf) {
				nb := make([]byte, len(fr.buf), max(need, min(2*cap(fr.buf), maxKeptBuffer, int(fr.max)), 1024))
				copy(nb, fr.buf)
				fr.buf = nb
			}
			fr.buf = append(fr.buf, p[:k]...)
			p = p[k:]
			continue
		}
		if len(fr.more) == 0 || len(*fr.more[len(fr.more)-1]) == eventBlock {
			fr.more = append(fr.more, blockPool.Get().(*[]byte))
		}
		b := fr.more[len(fr.more)-1]
		k := min(len(p), eventBlock-len(*b))
		*b = append(*b, p[:k]...)
		p = p[k:]
	}
}

// kept returns an exact copy of the bytes of the event in progress and
// empties the buffers for the next event.
func (fr *Framer) kept() []byte {
	// bytes.Join allocates without zeroing first what it copies over.
	parts := append(fr.parts[:0], fr.buf)
	for _, b := range fr.more {
		parts = append(parts, *b)
	}
	out := bytes.Join(parts, nil)
	if out == nil {
		out = []byte{}
	}
	clear(parts)
	fr.parts = parts[:0]
	fr.buf = fr.buf[:0]
	fr.putBlocks()
	return out
}

// LastListedChunk returns the chunk index of the last span listed for the
// event in progress, or -1 when there is none.
func (fr *Framer) LastListedChunk() int {
	if !fr.in || len(fr.cur.Spans) == 0 {
		return -1
	}
	return fr.cur.Spans[len(fr.cur.Spans)-1].Carrier
}

// SpansFull reports whether the event in progress lists as many chunks as
// it may: the bytes of later chunks are only counted.
func (fr *Framer) SpansFull() bool { return fr.in && len(fr.cur.Spans) >= fr.maxSpans }

// Offset returns the number of de-chunked bytes consumed.
func (fr *Framer) Offset() int64 { return fr.off }

// InFrame reports whether an event has started and not yet ended.
func (fr *Framer) InFrame() bool { return fr.in }

// Serial returns the serial number of the last frame started (the one in
// progress while InFrame is true).
func (fr *Framer) Serial() int { return fr.serial }

// FirstChunk returns the chunk index of the first byte of the event in
// progress, or -1 when there is none.
func (fr *Framer) FirstChunk() int {
	if !fr.in || len(fr.cur.Spans) == 0 {
		return -1
	}
	return fr.cur.Spans[0].Carrier
}

// CurrentInChunk reports whether the event in progress has bytes in chunk c.
func (fr *Framer) CurrentInChunk(c int) bool {
	return fr.in && len(fr.cur.Spans) > 0 && fr.cur.Spans[len(fr.cur.Spans)-1].Carrier == c
}

// Resync makes the Framer look for the start of an event, as after a gap:
// for a body whose start was not captured.
func (fr *Framer) Resync() { fr.resync = true }

// CarrierStart tells the Framer that the next byte written is the first data
// byte of a carrier (a chunk, a DATA frame). It matters only while a JSON Framer resynchronises after
// lost bytes (see Gap): a '{' there is taken as the start of an event.
func (fr *Framer) CarrierStart() {
	fr.atChunk = true
	fr.endProbe() // the chunk before was too short to start an event
}

// Write frames p, which arrived in chunk index c (-1 for a body that is not
// chunked). It calls onFrame for each event that p completes.
func (fr *Framer) Write(p []byte, c int) {
	if len(p) == 0 {
		return
	}
	// After lost bytes the rest of the line is skipped, because the '\n'
	// that ends the damaged event is the first sure event boundary. But
	// when the chunk decoder has regained its framing, the lost bytes may
	// have held that '\n' (and the chunk decoder drops the bytes it scans
	// while resynchronising), so skipping to the next '\n' would silently
	// drop the next, intact event. kube-apiserver writes each JSON event
	// with one write and flushes when idle, so a chunk that starts with
	// '{' after a gap usually starts an event; if it does not, the frame
	// fails to decode and is reported rather than lost.
	if fr.resync && fr.atChunk && p[0] == '{' {
		fr.resync = false
	}
	atChunk := fr.atChunk
	fr.atChunk = false
	if fr.format == FormatCBOR {
		fr.writeCBOR(p, c)
		return
	}
	if fr.format == FormatProtobuf {
		if fr.lost && atChunk {
			fr.probing, fr.probe, fr.probeC = true, fr.probe[:0], c
		}
		fr.writeProto(p, c)
		return
	}
	fr.writeJSON(p, c)
}

func (fr *Framer) start(c int) {
	fr.flushJunk()
	fr.in = true
	fr.serial++
	fr.cur = Frame{Offset: fr.off, Serial: fr.serial, Spans: fr.spare}
	fr.spare = nil
	fr.buf = fr.buf[:0]
	fr.putBlocks()
	fr.curLen = 0
	fr.damaged = false
	_ = c
}

// take adds p (from chunk c) to the current frame.
func (fr *Framer) take(p []byte, c int) {
	if len(p) == 0 {
		return
	}
	n := int64(len(p))
	switch s := fr.cur.Spans; {
	case len(s) > 0 && s[len(s)-1].Carrier == c:
		s[len(s)-1].Bytes += n
	case len(s) < fr.maxSpans:
		fr.cur.Spans = append(fr.cur.Spans, Span{Carrier: c, Bytes: n})
	default:
		// Bounded bookkeeping: an event cut into more chunks than
		// are listed (say a million one-byte chunks) costs no more.
		if fr.cur.UnlistedBytes == 0 || c != fr.unlistedAt {
			fr.cur.UnlistedChunks++
			fr.unlistedAt = c
		}
		fr.cur.UnlistedBytes += n
	}
	if !fr.cur.Oversize && fr.curLen+n > fr.max {
		fr.oversize(fmt.Sprintf("more than %d bytes; skipped", fr.max))
	}
	if !fr.cur.Oversize && !fr.budget.Reserve(n) {
		fr.cur.Oversize = true
		fr.onProb(FrameProblem{Offset: fr.cur.Offset, Kind: KindBudget,
			Hint: "raise --max-buffered-bytes-total, or lower --max-connections",
			Detail: fmt.Sprintf("with %d bytes of this event, the connections' buffers would hold more than %d bytes; event skipped",
				fr.curLen+n, fr.budget.Max())})
		fr.drop()
	}
	fr.curLen += n
	fr.off += n
	if !fr.cur.Oversize {
		fr.held += n
		if !fr.direct {
			fr.keep(p)
		}
	}
}

// oversize reports the current frame as larger than the bound and stops
// keeping its bytes.
func (fr *Framer) oversize(detail string) {
	fr.cur.Oversize = true
	fr.onProb(FrameProblem{Offset: fr.cur.Offset, Kind: KindOversize, Detail: detail, Hint: "raise --max-event-bytes"})
	fr.drop()
}

func (fr *Framer) finish() {
	var data []byte
	if !fr.cur.Oversize {
		data = fr.kept() // the frame owns its bytes
	}
	fr.finishWith(data)
}

// finishWith ends the current frame with data, its bytes (the frame's own
// copy; nil when oversize), and calls onFrame.
func (fr *Framer) finishWith(data []byte) {
	f := fr.cur
	f.Length = fr.curLen
	f.Damaged = fr.damaged
	if !f.Oversize {
		if fr.format == FormatProtobuf && len(data) >= 4 {
			data = data[4:]
		}
		f.Data = data
	}
	fr.in = false
	fr.budget.Release(fr.held)
	fr.held = 0
	fr.cur = Frame{}
	fr.emit(f)
}

// emit hands f over to onFrame, in a Frame given back by Recycle when
// there is one (whose Spans array then goes to the next event).
func (fr *Framer) emit(f Frame) {
	var p *Frame
	if n := len(fr.free); n > 0 {
		p = fr.free[n-1]
		fr.free[n-1] = nil
		fr.free = fr.free[:n-1]
		fr.spare = p.Spans[:0]
	} else {
		p = new(Frame)
	}
	*p = f
	fr.onFrame(p)
}

// maxFreeFrames bounds the Frames Recycle keeps, and maxFreeSpans the
// Spans array one of them may keep: a Framer (one per watch body, and
// there may be thousands) keeps at most about 10 KiB for them, however
// many events one write completed or chunks one event spanned.
const (
	maxFreeFrames = 32
	maxFreeSpans  = 8
)

// Recycle gives back a Frame that onFrame received, once the caller is
// done with it and with its Spans: the Framer uses it again for a later
// event. Its Data and Decoded stay the caller's (the Frame lets go of
// them). A caller that keeps Frames simply does not call it.
func (fr *Framer) Recycle(f *Frame) {
	if len(fr.free) >= maxFreeFrames || cap(f.Spans) > maxFreeSpans {
		return
	}
	*f = Frame{Spans: f.Spans[:0]}
	fr.free = append(fr.free, f)
}

func (fr *Framer) writeJSON(p []byte, c int) {
	for len(p) > 0 {
		if fr.cand >= 0 {
			p = p[fr.matchEventStart(p, c):]
			continue
		}
		if !fr.in {
			// Between events: skip whitespace; '{' starts an event.
			i := 0
			for fr.resync && i < len(p) {
				if p[i] == '\n' {
					fr.resync = false
				}
				i++
			}
			for i < len(p) {
				b := p[i]
				if b == '{' {
					break
				}
				if b != '\n' && b != '\r' && b != ' ' && b != '\t' {
					if fr.junk == 0 {
						fr.junkAt = fr.off + int64(i)
					}
					fr.junk++
				}
				i++
			}
			fr.off += int64(i)
			p = p[i:]
			if len(p) == 0 {
				return
			}
			fr.start(c)
			fr.depth, fr.inStr, fr.escape = 0, false, false
			if n := fr.decodeWhole(p, c); n > 0 {
				p = p[n:]
				continue
			}
		}
		end, nl := fr.scanJSON(p)
		switch {
		case end >= 0 && fr.curLen == 0:
			// The whole event is in p: copied once, not kept first.
			if fr.takeWhole(p[:end], c) {
				fr.finishWith(bytes.Clone(p[:end]))
			}
			p = p[end:]
		case end >= 0:
			fr.take(p[:end], c)
			p = p[end:]
			fr.finish()
		case nl >= 0:
			fr.take(p[:nl+1], c)
			p = p[nl+1:]
			fr.cand = 0
		default:
			fr.take(p, c)
			return
		}
	}
}

// decodeWhole frames and decodes the event that starts p, as DecodeWith
// describes, when p holds all of it before a newline and indexEvent reads
// it; it returns how many bytes of p it framed, 0 when it did not (the
// event is then scanned as usual). The event it frames is the one scanJSON
// would: a JSON object followed by nothing but whitespace ends at its own
// closing brace.
func (fr *Framer) decodeWhole(p []byte, c int) int {
	if !fr.decode || fr.format != FormatJSON || fr.resync || fr.cand >= 0 {
		return 0
	}
	end := fr.lineEnd(p)
	if end <= 0 || p[end-1] != '}' || int64(end) > fr.max {
		return 0
	}
	// Read where it came, and copied (the frame owns its bytes) only
	// when it is an event: a line of many events, read from each one's
	// start, is rejected at the first one's end, with nothing copied.
	var data []byte
	ev, ok, err := decodeIndexed(p[:end], fr.decodeOpt, &data)
	if !ok {
		return 0
	}
	if fr.takeWhole(p[:end], c) {
		fr.cur.Decoded, fr.cur.DecodeErr = ev, err
		fr.finishWith(data)
	}
	return end
}

// takeWhole takes p, all of the current event's bytes in one write:
// counted and bounded by take, not kept (the caller hands over its own
// copy with finishWith). It returns false when p is over a bound: the
// event is then handed over as oversize.
func (fr *Framer) takeWhole(p []byte, c int) bool {
	fr.direct = true
	fr.take(p, c)
	fr.direct = false
	if fr.cur.Oversize {
		fr.finish()
		return false
	}
	return true
}

// lineEnd returns the index in p of the end of its first line without the
// whitespace before the line's '\n' (spaces, tabs, CRs), 0 when that is
// p's start or before, or -1 when p holds no '\n'. p starts at the body's
// offset fr.off; what an earlier call found in the same write is
// remembered, so that the events of one long line do not each search the
// rest of it, or step back over its whitespace, again.
func (fr *Framer) lineEnd(p []byte) int {
	base, end := fr.off, fr.off+int64(len(p))
	switch {
	case fr.nlAt >= base && fr.nlAt < end:
		return int(max(fr.nlTrim, base) - base)
	case fr.nlAt < base && fr.nlNone >= end && fr.nlFrom <= base:
		return -1 // searched already, none
	}
	k := bytes.IndexByte(p, '\n')
	if k < 0 {
		fr.nlAt, fr.nlFrom, fr.nlNone = -1, base, end
		return -1
	}
	t := k
	for t > 0 && (p[t-1] == ' ' || p[t-1] == '\t' || p[t-1] == '\r') {
		t--
	}
	fr.nlAt, fr.nlTrim = base+int64(k), base+int64(t)
	return t
}

// scanJSON advances the JSON scanner over p. It returns the length of p up
// to and including the byte that closes the top-level object (end), or
// else the index of the first newline inside the object (nl: between
// tokens, or inside a string, where JSON allows none), or -1 for both.
// Inside strings it steps over escapes eight bytes at a time (scanString).
func (fr *Framer) scanJSON(p []byte) (end, nl int) {
	inStr, escape, depth := fr.inStr, fr.escape, fr.depth
	end, nl = -1, -1
	for i := 0; i < len(p); {
		if inStr {
			if escape {
				escape = false
				if p[i] == '\n' { // no JSON escape takes a raw newline: the event may have been cut
					nl = i
					break
				}
				i++
				continue
			}
			j, esc := scanString(p, i, true)
			if j == len(p) {
				escape = esc
				i = j
				continue
			}
			if p[j] == '"' {
				inStr = false
				i = j + 1
				continue
			}
			nl = j // a newline, which no JSON string holds: the event may have been cut
			break
		}
		b := p[i]
		i++
		switch b {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth <= 0 {
				end = i
			}
		case '\n':
			nl = i - 1
		}
		if end >= 0 || nl >= 0 {
			break
		}
	}
	fr.inStr, fr.escape, fr.depth = inStr, escape, depth
	return end, nl
}

// eventStart is how kube-apiserver starts every JSON watch event (a
// compact metav1.WatchEvent, "type" first). A line that starts with it
// inside an event that has not closed is taken as the next event: the
// server writes each event on one line, so the one in progress was cut
// short (bytes lost without a gap being seen, or a broken writer), and
// waiting for it to close would hide every event after it.
const eventStart = `{"type":`

// pendByte is a byte held while a line inside an event is compared with
// eventStart, with the chunk it came in.
type pendByte struct {
	b     byte
	chunk int
}

// matchEventStart compares the bytes after a newline inside an event with
// eventStart and returns how many bytes of p it consumed. On the first
// byte that differs it gives the held bytes back to the event in progress;
// when the whole of eventStart has come, the event in progress is reported
// cut short and a new one starts with those bytes.
func (fr *Framer) matchEventStart(p []byte, c int) int {
	for i, b := range p {
		if b != eventStart[fr.cand] {
			fr.cand = -1
			fr.flushPending()
			return i
		}
		fr.pend = append(fr.pend, pendByte{b, c})
		fr.cand++
		if fr.cand == len(eventStart) {
			fr.cand = -1
			fr.cutShort("never closed")
			pend := fr.pend
			fr.pend = fr.pend[:0]
			fr.start(pend[0].chunk)
			fr.depth, fr.inStr, fr.escape = 0, false, false
			for _, pb := range pend {
				fr.take([]byte{pb.b}, pb.chunk)
			}
			fr.scanJSON([]byte(eventStart)) // depth 1, outside a string
			return i + 1
		}
	}
	return len(p)
}

// flushPending gives the bytes held by matchEventStart back to the event
// in progress, as if they had just come.
func (fr *Framer) flushPending() {
	pend := fr.pend
	fr.pend = nil
	eachRun(pend, fr.writeJSON)
	fr.pend = pend[:0]
}

// eachRun calls write with the held bytes, run by run of the chunks they
// came in.
func eachRun(held []pendByte, write func(p []byte, c int)) {
	for i := 0; i < len(held); {
		j := i
		run := make([]byte, 0, len(held)-i)
		for j < len(held) && held[j].chunk == held[i].chunk {
			run = append(run, held[j].b)
			j++
		}
		write(run, held[i].chunk)
		i = j
	}
}

// cutShort reports the event in progress cut short by a new event's start
// (how: "never closed", "never ended") and hands it over as damaged, as a
// gap inside an event is: the chunks that carried it count it, however the
// bytes were split into writes.
func (fr *Framer) cutShort(how string) {
	fr.onProb(FrameProblem{Offset: fr.cur.Offset, Kind: KindTruncated,
		Detail: fmt.Sprintf("%d bytes of an event that %s, then a new event at offset %d; decoding goes on from it", fr.curLen, how, fr.off)})
	f := fr.cur
	f.Length, f.Damaged = fr.curLen, true
	fr.abandon()
	fr.emit(f)
}

// protoTypes are the watch event types, by the length of their names.
var protoTypes = map[byte][]string{5: {"ADDED", "ERROR"}, 7: {"DELETED"}, 8: {"MODIFIED", "BOOKMARK"}}

// probeMore adds the first bytes of p to the probe of a chunk's start
// after protobuf framing was lost, and returns how many it took. The API
// server writes each protobuf event with one write and flushes when idle,
// so a chunk often starts with an event: when the chunk starts with a
// length prefix within the event bound and a WatchEvent's type field, the
// framing is regained there (fr.lost is cleared and the probe's bytes are
// framed as the start of an event). Only the chunk's bytes decide, never
// how they were split into writes.
func (fr *Framer) probeMore(p []byte) int {
	n := 0
	for n < len(p) && fr.probing {
		fr.probe = append(fr.probe, p[n])
		n++
		switch ok, done := protoStart(fr.probe, fr.max); {
		case !ok:
			fr.endProbe()
			return n
		case done:
			probe := fr.probe
			fr.probing, fr.probe = false, nil
			fr.lost = false
			fr.regainSerial = fr.serial + 1
			fr.onProb(FrameProblem{Offset: fr.off, Kind: KindRegained, Warning: true,
				Detail: fmt.Sprintf("a chunk starts with a %d-byte event; the bytes before it since the loss were passed over", binary.BigEndian.Uint32(probe))})
			fr.writeProto(probe, fr.probeC)
			fr.probe = probe[:0]
			return n
		}
	}
	return n
}

// Suspect tells a protobuf Framer that frame serial, which ended at body
// offset end, did not decode. When it is the first frame after framing was
// regained, the regain was wrong: the Framer searches chunk starts again.
func (fr *Framer) Suspect(serial int, end int64) {
	if fr.format == FormatProtobuf && !fr.lost && fr.regainSerial > 0 && serial == fr.regainSerial {
		fr.loseAgain("the event after it does not decode", end)
	}
}

// loseAgain goes back to searching for an event start after a regain
// proved wrong.
func (fr *Framer) loseAgain(why string, at int64) {
	fr.onProb(FrameProblem{Offset: at, Kind: KindLost,
		Detail: "protobuf framing regained wrongly (" + why + "); looking again for a chunk that starts with an event"})
	fr.lost = true
	fr.regainSerial = 0
	fr.abandon()
}

// endProbe gives up the probe in progress: its bytes are passed over.
func (fr *Framer) endProbe() {
	if fr.probing {
		fr.off += int64(len(fr.probe))
		fr.probing, fr.probe = false, fr.probe[:0]
	}
}

// protoStart reports whether b can be the start of a protobuf watch event
// (ok) and whether b holds enough to say it is (done): a 4-byte length
// prefix within max, then the metav1.WatchEvent's field 1 (type): tag
// 0x0a, a length, and a watch event type's name, at most 14 bytes in all.
func protoStart(b []byte, max int64) (ok, done bool) {
	if len(b) >= 4 {
		if n := int64(binary.BigEndian.Uint32(b)); n == 0 || n+4 > max {
			return false, false
		}
	}
	if len(b) >= 5 && b[4] != 0x0a {
		return false, false
	}
	if len(b) < 6 {
		return true, false
	}
	names, found := protoTypes[b[5]]
	if !found {
		return false, false
	}
	got := b[6:]
	for _, name := range names {
		if len(got) <= len(name) && string(got) == name[:len(got)] {
			return true, len(got) == len(name)
		}
	}
	return false, false
}

func (fr *Framer) writeProto(p []byte, c int) {
	if fr.lost {
		n := 0
		if fr.probing {
			n = fr.probeMore(p)
		}
		if fr.lost {
			fr.off += int64(len(p) - n)
			return
		}
		p = p[n:] // framing regained: the probe's bytes started an event
	}
	for len(p) > 0 {
		if !fr.in {
			fr.start(c)
			fr.nprefix = 0
		}
		if fr.nprefix < 4 {
			k := copy(fr.prefix[fr.nprefix:], p)
			fr.take(p[:k], c)
			p = p[k:]
			fr.nprefix += k
			if fr.nprefix < 4 {
				return
			}
			fr.want = int64(binary.BigEndian.Uint32(fr.prefix[:]))
			if fr.want == 0 {
				fr.finish()
				continue
			}
			if fr.want+4 > fr.max && fr.regainSerial > 0 && fr.cur.Serial <= fr.regainSerial+1 {
				// Right after a regain, a prefix past the bound says the
				// regain was wrong (an object's bytes that looked like an
				// event's start): search again.
				fr.loseAgain(fmt.Sprintf("the length prefix after it announces %d bytes, more than %d", fr.want+4, fr.max), fr.cur.Offset)
				fr.off += int64(len(p))
				return
			}
			if fr.want+4 > fr.max && !fr.cur.Oversize {
				// The prefix says the frame is too large: skip it
				// now instead of buffering up to the bound first
				// (a prefix of up to 4 GiB costs nothing).
				fr.oversize(fmt.Sprintf("the length prefix announces %d bytes, more than %d; skipped",
					fr.want+4, fr.max))
			}
		}
		rest := fr.want + 4 - fr.curLen
		k := int64(len(p))
		if k > rest {
			k = rest
		}
		fr.take(p[:k], c)
		p = p[k:]
		if fr.curLen == fr.want+4 {
			fr.finish()
		}
	}
}

func (fr *Framer) flushJunk() {
	if fr.junk > 0 {
		fr.onProb(FrameProblem{Offset: fr.junkAt, Kind: KindJunk,
			Detail: fmt.Sprintf("%d bytes skipped", fr.junk)})
		fr.junk = 0
	}
}

// Gap tells the Framer that n bytes of the body were lost. An event in
// progress is reported as damaged and dropped. For JSON the Framer then
// resynchronises on the next line that starts with "{", or on a chunk whose
// data starts with "{" (see CarrierStart); for protobuf the
// length prefix keeps the framing when the gap lies inside the current frame,
// and otherwise the rest of the body cannot be framed.
func (fr *Framer) Gap(n int64) {
	fr.atChunk = false
	fr.endProbe()
	if fr.cand >= 0 { // the held bytes belong to the event the gap damages
		fr.cand = -1
		fr.off += int64(len(fr.pend))
		fr.pend = fr.pend[:0]
	}
	if fr.format == FormatCBOR {
		if n > 0 {
			fr.gapCBOR(n)
		}
		return
	}
	if n <= 0 || fr.lost {
		fr.off += n
		return
	}
	if fr.in {
		fr.onProb(FrameProblem{Offset: fr.cur.Offset, Kind: KindLost,
			Detail: fmt.Sprintf("%d bytes missing at offset %d; the event cannot be decoded", n, fr.off)})
	}
	if fr.format == FormatProtobuf {
		if fr.in && fr.nprefix == 4 && fr.curLen+n <= fr.want+4 {
			// Keep counting toward the end of this frame, then drop it.
			fr.cur.Oversize = true
			fr.drop()
			fr.damaged = true
			fr.curLen += n
			fr.off += n
			if fr.curLen == fr.want+4 {
				fr.in = false
				fr.cur = Frame{}
			}
			return
		}
		fr.lost = true
		fr.onProb(FrameProblem{Offset: fr.off, Kind: KindLost,
			Detail: "protobuf framing lost; looking for a chunk that starts with an event"})
	}
	fr.abandon()
	fr.resync = true
	fr.off += n
}

// Break tells the Framer that the content is not continuous here and that
// how many bytes are missing is unknown: the compressed member that carried
// them could not be inflated (pkg/inflate), or lost bytes broke it. An
// event in progress is reported as damaged, with detail saying why, and
// dropped; the Framer then resynchronises as after a Gap (JSON: on the next
// line or chunk that starts with "{"; protobuf: on a chunk that starts with
// an event).
func (fr *Framer) Break(detail string) {
	fr.atChunk = false
	fr.endProbe()
	if fr.cand >= 0 {
		fr.cand = -1
		fr.off += int64(len(fr.pend))
		fr.pend = fr.pend[:0]
	}
	if fr.format == FormatCBOR {
		fr.breakCBOR(detail)
		return
	}
	if fr.lost {
		return
	}
	if fr.in {
		fr.onProb(FrameProblem{Offset: fr.cur.Offset, Kind: KindLost, Detail: detail})
	}
	if fr.format == FormatProtobuf {
		fr.lost = true
		fr.onProb(FrameProblem{Offset: fr.off, Kind: KindLost,
			Detail: "protobuf framing lost; looking for a chunk that starts with an event"})
	}
	fr.abandon()
	fr.resync = true
}

// Close reports an event left incomplete when the body ended.
func (fr *Framer) Close() {
	fr.endProbe()
	if fr.format == FormatCBOR {
		fr.flushHold()
		if fr.lost {
			fr.dropPendingCBOR()
		}
	}
	if fr.cand >= 0 {
		fr.cand = -1
		fr.flushPending()
	}
	fr.flushJunk()
	if fr.in {
		fr.onProb(FrameProblem{Offset: fr.cur.Offset, Kind: KindTruncated,
			Detail: fmt.Sprintf("%d bytes of an event, then the body ended", fr.curLen)})
		fr.abandon()
	}
}
