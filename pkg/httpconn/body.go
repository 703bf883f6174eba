package httpconn

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/textproto"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kwatch/kwatch/pkg/chunk"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/inflate"
	"github.com/kwatch/kwatch/pkg/record"
)

// body follows one message body: its framing, its chunks and, for a watch,
// its events.
type body struct {
	s        *side
	resp     *record.Response // nil for a request body
	exchange int
	// closedByClient: the body ended because the client closed the
	// connection (EndClient; EndLocal when kwatch was the client); an
	// event it cut is not the stream's fault.
	closedByClient bool
	framing        string // "chunked", "content-length", "close", "none"
	length         int64  // Content-Length
	coded          string // transfer codings applied before chunked
	read           int64  // body bytes consumed (framing included)
	done           bool
	start          time.Time
	now            time.Time
	dec            *chunk.Decoder
	chunks         int
	data           int64 // de-chunked bytes
	trailers       []string
	sawTrailer     bool   // a trailer field line came (kept or not)
	trailerEnd     []byte // the line ending the trailer section, when sawTrailer
	lastChunk      []byte // last-chunk line and the final line ending, as on the wire
	endDetail      string // where inside the framing an unclean body stopped
	lost           int64  // lost bytes that crossed chunk framing
	bareLFAt       int64  // body offset of the last bare LF reported
	sizes          []int64
	problems       int // errors reported about this body
	warnings       int // warnings reported about this body

	// Watch events.
	framer    *event.Framer
	format    event.Format
	tentative bool // watch inferred from the response only
	events    map[string]int
	seq       int
	// initial: the watch gets the current state as ADDED events first
	// (record.Request.InitialState) and they have not ended yet.
	initial bool
	// window holds the chunks events may still refer to, by increasing
	// index: those of the event in progress and the current chunk.
	window []chunkInfo
	// pending holds decoded events waiting for their last chunk's data,
	// and the problems found after them, to be emitted in order;
	// pendBytes counts the bytes of those events.
	pending   []record.Record
	pendBytes int64
	// pendHeld counts the bytes of pending events reserved from the
	// connections' shared budget (Options.Budget).
	pendHeld  int64
	curChunk  int
	curSize   int64
	curData   int64
	completed []framed // what the framer reported during the current write

	// A gzip or deflate body: inf inflates the de-chunked bytes before
	// the framer sees them; inflated and members count what it produced;
	// infHeld is what it holds reserved from Options.Budget.
	inf      *inflate.Inflater
	inflated int64
	members  int
	infHeld  int64

	// Non-2xx: the body is kept (bounded) to show its Status.
	keepStatus bool
	statusBuf  []byte
	ended      bool
}

// framed is one thing the framer reported: a complete frame or a framing
// problem. They are handled after the write, in the order they happened,
// so that the records do not depend on how many frames one write held.
type framed struct {
	frame *event.Frame
	prob  *event.FrameProblem
}

type chunkInfo struct {
	rec         record.Chunk
	lastSerial  int // serial of the last frame counted in rec.Events
	firstSerial int // serial of the first frame counted
}

// newBody starts the body of a message with header hdr; noBody says that
// the message has none whatever its fields say (RFC 9112 §6.3 items 1-2).
func (s *side) newBody(hdr textproto.MIMEHeader, response, noBody bool, t time.Time) *body {
	f := framing{how: "none"}
	if !noBody {
		f = framingOf(hdr, response)
	}
	b := &body{s: s, framing: f.how, length: f.length, coded: f.coded, start: t, now: t, curChunk: -1, bareLFAt: -1}
	for _, w := range f.warns {
		s.problem("stream", s.hdrStart, "unusual body framing", w, "", true, t)
	}
	if f.how == "chunked" {
		b.dec = chunk.NewDecoder(b, s.c.opt.Chunk)
	}
	return b
}

func (b *body) startEvents(f event.Format) {
	b.format = f
	b.events = map[string]int{}
	b.framer = event.NewFramer(f, b.s.c.opt.MaxEventBytes, b.onFrame, b.onFrameProblem)
	b.framer.LimitSpans(b.s.c.opt.MaxEventChunks)
	b.framer.SetBudget(b.s.c.opt.Budget)
}

// inflaterBytes is what one Inflater holds, reserved from the shared
// budget: flate's 32 KiB window and tables, an output buffer of 32 KiB, a
// goroutine's stack.
const inflaterBytes = 96 << 10

// startInflate inflates the body (content coding enc, which
// inflate.Supported accepts) before its events are framed.
func (b *body) startInflate(enc string, t time.Time) {
	if !b.s.c.opt.Budget.Reserve(inflaterBytes) {
		b.problems++
		b.s.c.problem(&record.Problem{Direction: b.s.name(), Where: "body", Offset: 0, Exchange: b.exchange,
			Kind: event.KindBudget, Time: t, Detail: fmt.Sprintf("no room to inflate this %s body; its chunks are listed, its events are not decoded", enc),
			Hint: "raise --max-buffered-bytes-total"})
		b.framer.Discard()
		b.framer = nil
		return
	}
	b.infHeld = inflaterBytes
	b.inf = inflate.New(enc, inflateSink{b}, b.s.c.opt.MaxInflatedBytes)
}

// inflateSink receives what the body's Inflater produces.
type inflateSink struct{ b *body }

// Inflated frames inflated bytes as carried by the chunks whose compressed
// bytes the decompressor read to produce them: deflate hands its output on
// a block at a time, so the bytes are shared out among those chunks in
// proportion to the compressed bytes each gave, in order.
func (s inflateSink) Inflated(p []byte, from []inflate.Span) {
	b := s.b
	b.inflated += int64(len(p))
	var total int64
	for _, sp := range from {
		total += sp.Bytes
	}
	if total == 0 { // only buffered output: the current chunk's
		from, total = []inflate.Span{{Carrier: b.curChunk, Bytes: 1}}, 1
	}
	var given int64
	for i, sp := range from {
		n := int64(len(p)) * sp.Bytes / total
		if i == len(from)-1 {
			n = int64(len(p)) - given
		}
		part := p[given : given+n]
		given += n
		if len(part) == 0 {
			continue
		}
		if w := b.find(sp.Carrier); w != nil {
			w.rec.Inflated += int64(len(part))
		}
		if b.framer != nil {
			b.framer.Write(part, sp.Carrier)
		}
	}
}

// Member counts a member that inflated whole.
func (s inflateSink) Member(inflate.Member) { s.b.members++ }

// Problem reports damaged compressed data; what the framer held of an
// event is dropped.
func (s inflateSink) Problem(kind, detail string, off int64) {
	b := s.b
	if b.framer != nil && kind != inflate.KindJunk {
		b.framer.Break("the compressed bytes that carried the rest of it could not be inflated")
		b.drain()
	}
	b.dataProblem(&record.Problem{Direction: b.s.name(), Where: "data", Offset: off, Exchange: b.exchange,
		Kind: kind, Detail: detail, Time: b.now, Warning: kind == inflate.KindJunk})
}

// contentWhere names what the framer's offsets count: the de-chunked body,
// or the inflated content when the body is compressed.
func (b *body) contentWhere() string {
	if b.inf != nil || b.inflated > 0 {
		return "content"
	}
	return "data"
}

// find returns the window's entry for chunk index i, or nil.
func (b *body) find(i int) *chunkInfo {
	k, ok := slices.BinarySearchFunc(b.window, i, func(ci chunkInfo, i int) int { return cmp.Compare(ci.rec.Index, i) })
	if !ok {
		return nil
	}
	return &b.window[k]
}

// framingText says how the body is framed, for a hint: "decoded as
// chunked", "decoded as 42 bytes by Content-Length".
func (b *body) framingText() string {
	switch b.framing {
	case "chunked":
		return "decoded as chunked"
	case "content-length":
		return fmt.Sprintf("decoded as %d bytes by Content-Length", b.length)
	case "close":
		return "the body is read until the connection closes"
	}
	return "the message has no body"
}

// write consumes body bytes from p and returns how many belong to the body.
func (b *body) write(p []byte, t time.Time) int {
	b.now = t
	switch b.framing {
	case "chunked":
		n, err := b.dec.Write(p)
		b.read += int64(n)
		if err != nil {
			b.chunkError(err, t)
			// The rest of the stream cannot be framed.
			b.s.dead = true
			b.closeWith(-1, t)
			return len(p)
		}
		if b.dec.Done() {
			b.done = true
		}
		return n
	case "content-length":
		k := int64(len(p))
		if rest := b.length - b.read; k > rest {
			k = rest
		}
		b.content(p[:k], t)
		b.read += k
		if b.read == b.length {
			b.done = true
		}
		return int(k)
	default: // close-delimited
		b.content(p, t)
		b.read += int64(len(p))
		return len(p)
	}
}

// content handles de-chunked body bytes of a body that is not chunked.
func (b *body) content(p []byte, t time.Time) {
	b.data += int64(len(p))
	b.keep(p)
	b.frame(p, -1)
}

// frame hands de-chunked body bytes carried by chunk c (-1: not chunked)
// to the inflater, or straight to the framer, and handles what they
// completed.
func (b *body) frame(p []byte, c int) {
	switch {
	case b.inf != nil:
		b.inf.Write(p, c)
	case b.framer != nil:
		b.framer.Write(p, c)
	default:
		return
	}
	b.flushCompleted(c)
}

func (b *body) keep(p []byte) {
	if b.keepStatus && len(b.statusBuf) < maxStatusBody {
		n := min(len(p), maxStatusBody-len(b.statusBuf))
		b.statusBuf = append(b.statusBuf, p[:n]...)
	}
}

// chunk.Handler implementation.

// ChunkStart records a chunk's framing.
func (b *body) ChunkStart(c *chunk.Chunk) {
	if c.Last {
		b.lastChunk = append([]byte(nil), c.Header...)
		return
	}
	b.chunks++
	if len(b.sizes) < record.MaxListedChunks {
		b.sizes = append(b.sizes, c.Size)
	}
	b.curChunk, b.curSize, b.curData = c.Index, c.Size, 0
	if b.framer == nil {
		return
	}
	b.framer.ChunkStart()
	ci := chunkInfo{rec: record.Chunk{
		Index: c.Index, Size: c.Size, SizeLine: string(c.Line), Offset: c.Offset,
		Header: append([]byte(nil), c.Header...),
	}}
	// Once the event in progress lists as many chunks as it may, the
	// chunk just left is needed by no event unless it is listed: take
	// its place, so that an event cut into a million tiny chunks keeps
	// the window bounded.
	if n := len(b.window); n > 0 && b.framer.SpansFull() && b.window[n-1].rec.Index > b.framer.LastListedChunk() {
		b.window[n-1] = ci
		return
	}
	b.window = append(b.window, ci)
}

// Data frames chunk data.
func (b *body) Data(c *chunk.Chunk, p []byte) {
	b.data += int64(len(p))
	b.curData += int64(len(p))
	b.keep(p)
	b.frame(p, c.Index)
}

// ChunkEnd is a no-op: events are released when a chunk's data is complete.
func (b *body) ChunkEnd(*chunk.Chunk) {}

// Trailer keeps a trailer field line.
func (b *body) Trailer(line []byte, _ int64) {
	b.sawTrailer = true
	if len(b.trailers) < 32 {
		b.trailers = append(b.trailers, string(line))
	}
}

// Done adds the line ending that closes the trailer section to the
// last-chunk's wire bytes (a bare LF when that is what was read).
func (b *body) Done(off int64) {
	end := []byte("\r\n")
	if b.bareLFAt == off-1 {
		end = end[1:]
	}
	if b.sawTrailer { // the trailer fields came between the two
		b.trailerEnd = end
		return
	}
	b.lastChunk = append(b.lastChunk, end...)
}

// Warning reports RFC 9112 deviations that were decoded.
func (b *body) Warning(err *chunk.Error) {
	if err.Kind == chunk.KindBareLF {
		b.bareLFAt = err.Offset
	}
	b.warnings++
	b.s.c.problem(&record.Problem{Direction: b.s.name(), Where: "body", Offset: err.Offset,
		Exchange: b.exchange, Kind: err.Kind, Detail: err.Detail, Warning: true, Time: b.now})
}

func (b *body) chunkError(err error, t time.Time) {
	b.problems++
	p := &record.Problem{Direction: b.s.name(), Where: "body", Offset: -1, Exchange: b.exchange,
		Kind: err.Error(), Time: t, Hint: "the rest of this connection is not decoded"}
	if ce, ok := err.(*chunk.Error); ok {
		p.Offset, p.Kind, p.Detail = ce.Offset, ce.Kind, ce.Detail
	}
	b.s.c.problem(p)
}

// onFrame queues a complete frame to be counted in its chunks and decoded.
func (b *body) onFrame(f *event.Frame) {
	b.queueFramed(framed{frame: f})
}

// onFrameProblem queues a framing problem, to be reported in wire order
// with the frames around it.
func (b *body) onFrameProblem(fp event.FrameProblem) {
	b.queueFramed(framed{prob: &fp})
}

// maxFramed bounds the frames queued during one write: a write of a few
// MiB of tiny events ("{}\n") would otherwise queue a Frame per 3 bytes.
const maxFramed = 256

func (b *body) queueFramed(f framed) {
	if b.framer == nil {
		return // no longer a watch (see drain)
	}
	b.completed = append(b.completed, f)
	if len(b.completed) >= maxFramed {
		b.drain()
	}
}

// drain reports the framing problems and decodes the frames the framer
// reported, in order, into pending events.
func (b *body) drain() {
	if b.framer == nil {
		b.completed = b.completed[:0]
		return
	}
	for _, out := range b.completed {
		if fp := out.prob; fp != nil {
			p := &record.Problem{Direction: b.s.name(), Where: b.contentWhere(), Offset: fp.Offset,
				Exchange: b.exchange, Kind: fp.Kind, Detail: fp.Detail, Hint: fp.Hint, Warning: fp.Warning, Time: b.now}
			if fp.Kind == event.KindTruncated && b.closedByClient {
				// The client cut the event itself (kwatch: Ctrl-C,
				// --idle-timeout, a watch it ended): nothing is wrong
				// with the stream.
				p.Warning = true
				p.Hint = "the client closed the connection inside this event"
				if b.endDetail == closedByKwatch {
					p.Hint = "kwatch closed the connection inside this event"
				}
			}
			b.dataProblem(p)
			continue
		}
		f := out.frame
		// A frame too large or damaged is still an event the chunks
		// carried (and was counted so while in progress).
		b.countIn(f.Spans, f.Serial)
		if f.Damaged || f.Oversize {
			continue
		}
		ev := b.decode(f)
		if b.framer == nil {
			// The first frame of a watch inferred from the response
			// did not decode: the body is not a watch after all, and
			// what follows that frame is not about events either.
			break
		}
		if ev == nil {
			continue
		}
		b.pending = append(b.pending, ev)
		b.pendBytes += f.Length
		// The event's bytes stay held until it is emitted; when the
		// budget has no room for them, emit what is pending now.
		if n := int64(len(f.Data)); b.s.c.opt.Budget.Reserve(n) {
			b.pendHeld += n
		} else {
			b.emitPending()
		}
		if f.UnlistedChunks > 0 {
			b.dataProblem(&record.Problem{Direction: b.s.name(), Where: "data", Offset: f.Offset,
				Exchange: b.exchange, Kind: "watch event in too many chunks", Warning: true, Time: b.now,
				Detail: fmt.Sprintf("%d more chunks carried %d of its %d bytes; only the first %d chunks are listed",
					f.UnlistedChunks, f.UnlistedBytes, f.Length, len(f.Spans))})
		}
		if len(b.pending) >= maxPendingEvents || b.pendBytes > b.framerMax() {
			// A huge chunk full of events (a chunk-size of 1 GiB,
			// say) would keep them all: emit them now, with the
			// counts of events per chunk known so far.
			b.emitPending()
		}
	}
	clear(b.completed) // drop the frames' data
	b.completed = b.completed[:0]
}

// flushCompleted handles what the last write completed (drain), counts
// events per chunk, and emits every pending event whose chunks are all
// complete. c is the chunk the write belonged to (-1 for bodies that are not
// chunked).
func (b *body) flushCompleted(c int) {
	b.drain()
	if b.framer == nil {
		return
	}
	if b.framer.InFrame() && c >= 0 && b.framer.CurrentInChunk(c) {
		b.countIn([]event.Span{{Chunk: c}}, b.framer.Serial())
	}
	if c >= 0 && b.curData < b.curSize {
		return // the chunk's data is not complete yet
	}
	b.release()
}

// countIn counts frame serial in the chunks of spans.
func (b *body) countIn(spans []event.Span, serial int) {
	for _, sp := range spans {
		w := b.find(sp.Chunk)
		if sp.Chunk < 0 || w == nil {
			continue
		}
		if w.lastSerial < serial {
			if w.rec.Events == 0 {
				w.firstSerial = serial
			}
			w.lastSerial = serial
			w.rec.Events++
		}
	}
}

// maxPendingEvents bounds the events kept waiting for the end of their
// chunk (see release); pendBytes is bounded by the largest event.
const maxPendingEvents = 1024

// framerMax is the bound on one event's bytes.
func (b *body) framerMax() int64 {
	if m := b.s.c.opt.MaxEventBytes; m > 0 {
		return m
	}
	return event.DefaultMaxEventBytes
}

// dataProblem reports a problem with the events of the body. While decoded
// events wait for their chunks (see release), it waits behind them, so that
// records keep the order of the bytes they are about.
func (b *body) dataProblem(p *record.Problem) {
	if p.Warning {
		b.warnings++
	} else {
		b.problems++
	}
	if len(b.pending) == 0 {
		b.s.c.problem(p)
		return
	}
	b.s.c.locate(p)
	b.pending = append(b.pending, p)
}

// release emits pending events (and the problems behind them) and trims
// the chunk window.
func (b *body) release() {
	b.emitPending()
	// Keep only chunks the event in progress may still need.
	keepFrom := b.curChunk
	if b.framer != nil && b.framer.InFrame() {
		keepFrom = b.framer.FirstChunk()
	}
	if b.inf != nil {
		// Compressed bytes read but not yet inflated will be shared
		// out among their chunks.
		if c, ok := b.inf.Oldest(); ok && c >= 0 && c < keepFrom {
			keepFrom = c
		}
	}
	drop := 0
	for drop < len(b.window) && b.window[drop].rec.Index < keepFrom {
		drop++
	}
	if drop > 0 {
		n := copy(b.window, b.window[drop:])
		clear(b.window[n:])
		b.window = b.window[:n]
	}
}

// emitPending emits the pending events, with their chunks, and the
// problems behind them.
func (b *body) emitPending() {
	for _, r := range b.pending {
		if ev, ok := r.(*record.Event); ok {
			b.attachChunks(ev)
		}
		b.s.c.emit(r)
	}
	clear(b.pending)
	b.pending = b.pending[:0]
	b.pendBytes = 0
	b.s.c.opt.Budget.Release(b.pendHeld)
	b.pendHeld = 0
}

func (b *body) attachChunks(ev *record.Event) {
	spans := ev.Chunks // placeholder from decode: Index and Bytes only
	out := make([]record.Chunk, 0, len(spans))
	for _, sp := range spans {
		w := b.find(sp.Index)
		if sp.Index < 0 || w == nil {
			continue
		}
		rc := w.rec
		rc.Bytes = sp.Bytes
		rc.Ordinal = sp.Ordinal - w.firstSerial + 1
		out = append(out, rc)
	}
	ev.Chunks = out
}

// decode turns a frame into an event record, or reports why it cannot.
func (b *body) decode(f *event.Frame) *record.Event {
	ev, err := event.Decode(b.format, f.Data, b.s.c.opt.Decode)
	if err != nil {
		if b.tentative && b.seq == 0 {
			// The response only looked like a watch. Its record was
			// emitted as one and stays so: records are not changed once
			// emitted (a sink may hold them, or print them on another
			// goroutine, as kwatch pcap does); the end record says that
			// no events were decoded.
			b.tentative = false
			b.framer.Discard()
			b.framer = nil
			return nil
		}
		b.dataProblem(&record.Problem{Direction: b.s.name(), Where: "data", Offset: f.Offset,
			Exchange: b.exchange, Kind: "watch event does not decode", Detail: err.Error(), Time: b.now})
		b.framer.Suspect(f.Serial, f.Offset+f.Length)
		if ev == nil {
			return nil
		}
	}
	b.tentative = false
	b.seq++
	event.CountType(b.events, ev.Type)
	rec := &record.Event{Conn: b.s.c.rec, Exchange: b.exchange, Seq: b.seq, Time: b.now,
		Type: ev.Type, Object: ev.Object, APIVersion: ev.APIVersion, Kind: ev.Kind,
		Namespace: ev.Namespace, Name: ev.Name, UID: ev.UID, ResourceVersion: ev.ResourceVersion, RowKind: ev.RowKind,
		InitialEventsEnd: ev.InitialEventsEnd, Status: ev.Status, Initial: b.initial && ev.Type == "ADDED",
		Offset: f.Offset, Length: f.Length, Format: b.format.String()}
	for _, sp := range f.Spans {
		if sp.Chunk >= 0 {
			rec.Chunks = append(rec.Chunks, record.Chunk{Index: sp.Chunk, Bytes: sp.Bytes, Ordinal: f.Serial})
		}
	}
	if ev.Type != "ADDED" {
		// The initial state is ADDED events, ended by the
		// initial-events-end BOOKMARK (or, from a server that sends
		// none, by the first other event).
		b.initial = false
	}
	return rec
}

// discarded returns the body bytes the chunk decoder passed over after
// lost bytes.
func (b *body) discarded() int64 {
	if b.dec == nil {
		return 0
	}
	return b.dec.Discarded()
}

// gap handles n lost body bytes; it returns false when the body's framing
// is lost.
func (b *body) gap(n int64, t time.Time) bool {
	b.now = t
	switch b.framing {
	case "chunked":
		inData, remain := b.dec.InData()
		keep := b.dec.Skip(n)
		if inData && n < remain {
			b.curData += n
			b.data += n
		} else {
			b.lost += n // framing and data alike: unknown which
		}
		b.read += n
		b.gapContent(n)
		if !keep {
			b.warnings++
			b.s.c.problem(&record.Problem{Direction: b.s.name(), Where: "body", Offset: b.dec.Offset(),
				Exchange: b.exchange, Kind: "chunk framing lost", Time: t,
				Detail: "looking for the next chunk-size line", Warning: true})
		}
		return true
	case "content-length":
		if b.read+n > b.length {
			return false
		}
		b.read += n
		b.data += n
		b.gapContent(n)
		if b.read == b.length {
			b.done = true
			b.finish(t)
			b.s.body = nil
		}
		return true
	default:
		b.read += n
		b.data += n
		b.gapContent(n)
		return true
	}
}

// gapContent tells the framer, or the inflater before it, that n bytes of
// the de-chunked body were lost.
func (b *body) gapContent(n int64) {
	if b.inf != nil {
		if b.framer != nil {
			b.framer.Break(fmt.Sprintf("%d compressed bytes missing; the member that carried the rest of the event cannot be inflated", n))
			b.drain()
		}
		b.inf.Gap(n)
		return
	}
	if b.framer != nil {
		b.framer.Gap(n)
		b.drain()
	}
}

// finish emits the End record of a complete body.
func (b *body) finish(t time.Time) {
	how := map[string]string{"chunked": "last-chunk", "content-length": "content-length",
		"none": "no body", "close": "close"}[b.framing]
	b.end(how, true, t)
}

// closeWith ends a body whose stream ended. how < 0 means a decoding error
// ended it.
func (b *body) closeWith(how Ending, t time.Time) {
	if b.done {
		b.finish(t)
		return
	}
	if b.framing == "close" && (how == EndFIN || how == EndRST) {
		b.end("close", true, t)
		return
	}
	var desc, detail string
	switch how {
	case EndFIN:
		desc = "closed without the last chunk"
		if b.framing == "content-length" {
			desc, detail = "closed before the end of the body", fmt.Sprintf("%d of %d bytes", b.read, b.length)
		}
	case EndRST:
		desc = "reset without the last chunk"
		if b.framing == "content-length" {
			desc, detail = "reset before the end of the body", fmt.Sprintf("%d of %d bytes", b.read, b.length)
		}
	case EndCapture:
		desc = "capture ended mid-stream"
	case EndLocal:
		desc, detail = "closed by the client", closedByKwatch
		b.closedByClient = true
	case EndClient:
		desc = "closed by the client"
		b.closedByClient = true
	case EndDropped:
		// One of record.End's fixed set; the detail says why.
		desc, detail = "not decoded further", "no longer followed: too many connections open at once"
	default:
		desc = "not decoded further"
	}
	if b.dec != nil && how >= 0 {
		if err := b.dec.Close(); err != nil && how != EndCapture && how != EndLocal && how != EndDropped {
			if ce, ok := err.(*chunk.Error); ok && ce.Detail != "" {
				detail = ce.Detail
			}
		}
	}
	b.endDetail = detail
	b.end(desc, false, t)
}

// closedByKwatch is the detail of a live body that kwatch closed itself.
const closedByKwatch = "kwatch closed the connection"

func (b *body) end(how string, clean bool, t time.Time) {
	if b.ended {
		return
	}
	b.ended = true
	// Problems the framer reports now (an event cut short) happened when
	// the body ended, not when its last byte came.
	b.now = t
	if b.inf != nil {
		// A member cut short is reported, and what it produced framed,
		// before the framer learns that the body ended.
		b.inf.Close()
		b.inf = nil
		b.s.c.opt.Budget.Release(b.infHeld)
		b.infHeld = 0
	}
	if b.framer != nil {
		b.framer.Close()
		b.drain()
		b.release()
	}
	e := &record.End{Conn: b.s.c.rec, Exchange: b.exchange, Time: t, How: how, Detail: b.endDetail, Clean: clean,
		Trailers: b.trailers, LastChunk: b.lastChunk, TrailerEnd: b.trailerEnd, Events: b.events, Chunks: b.chunks,
		Bytes: b.read, Data: b.data, Inflated: b.inflated, Members: b.members, Lost: b.lost + b.discarded(), Duration: t.Sub(b.start), Problems: b.problems, Warnings: b.warnings,
		Watch: b.framer != nil, ChunkSizes: b.sizes, Request: b.resp == nil}
	if b.keepStatus && len(b.statusBuf) > 0 && b.resp != nil {
		e.Status = decodeStatus(b.resp.ContentType, b.statusBuf)
		if e.Status == nil {
			e.BodyText = clip(string(b.statusBuf))
		}
	}
	b.s.c.emit(e)
}

// decodeStatus decodes a metav1.Status body (JSON, possibly pretty-printed
// over several lines, or protobuf); nil when it is not one.
func decodeStatus(ct string, data []byte) *metav1.Status {
	if f, ok := event.FormatForContentType(ct); ok && f == event.FormatProtobuf {
		return event.DecodeStatusProtobuf(data)
	}
	var st metav1.Status
	if err := json.Unmarshal(data, &st); err != nil || st.Kind != "Status" {
		return nil
	}
	return &st
}
