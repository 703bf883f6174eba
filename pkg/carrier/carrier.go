// Package carrier maps the watch events of one message body to what carried
// their bytes on the wire: HTTP/1.1 chunks (RFC 9112 §7.1) or HTTP/2 DATA
// frames (RFC 9113 §6.1), through gzip or deflate members when the body has
// a content coding (RFC 9110 §8.4). It is the one mechanism every protocol
// follower of kwatch feeds: the follower says where each carrier starts and
// hands over its data; a Body frames the events (pkg/event), inflates first
// when needed (pkg/inflate), decodes them, counts them in their carriers and
// emits each event once every carrier of its bytes is complete, with those
// carriers listed.
package carrier

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/inflate"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// Options bound and tune a Body.
type Options struct {
	// MaxEventBytes bounds one watch event, in bytes (0:
	// event.DefaultMaxEventBytes).
	MaxEventBytes int64
	// MaxEventCarriers bounds the carriers listed for one event (0:
	// event.DefaultMaxSpans); an event carried by more still decodes, with
	// a warning.
	MaxEventCarriers int
	// MaxInflatedBytes bounds what one gzip member (or a deflate body)
	// may inflate to, in bytes (0: inflate.DefaultMaxMemberBytes).
	MaxInflatedBytes int64
	// Decode tunes event decoding.
	Decode event.DecodeOptions
	// Budget, if set, is shared with every other body and connection: it
	// bounds the bytes held by events in progress, events waiting for their
	// carriers to complete, and inflaters.
	Budget *event.Budget
	// Carriers names the carriers in the plural, for what a Body reports
	// ("DATA frames"; "" means "chunks").
	Carriers string
}

// carriers is Options.Carriers, or "chunks".
func (o *Options) carriers() string {
	if o.Carriers == "" {
		return "chunks"
	}
	return o.Carriers
}

// Env is where a Body's records go.
type Env interface {
	// Emit emits a record (an event or a problem already located).
	Emit(record.Record)
	// Problem completes a problem with where it happened (connection,
	// time, capture packet) and emits it.
	Problem(*record.Problem)
	// Locate completes a problem with where it happened, for a problem
	// emitted later (behind events waiting for their carriers).
	Locate(*record.Problem)
}

// Carrier is one unit that carried body bytes on the wire: a chunk or a
// DATA frame.
type Carrier struct {
	// Index numbers the carriers of a body from 0, in wire order.
	Index int
	// Size is how many data bytes it carries (a chunk-size; a DATA frame's
	// length without its padding).
	Size int64
	// Inflated is how many bytes its compressed data inflated to, as far
	// as known.
	Inflated int64
	// Events counts the watch events with bytes in it, as far as known.
	Events int
	// Data is the offset in the body's data (de-chunked, as Event.Offset)
	// of its first data byte; -1 for a compressed body, whose events are
	// counted in inflated bytes. Set by Start.
	Data int64
	// Meta is the protocol's own record of the carrier (record.Chunk,
	// record.Frame), handed back with the events it carried.
	Meta any

	firstSerial, lastSerial int // serials of the first and last frame counted
}

// Carried is what one carrier held of one event.
type Carried struct {
	// Carrier is the carrier as known when the event was emitted.
	Carrier Carrier
	// Bytes is how many bytes of the event it carried (inflated bytes for
	// a compressed body).
	Bytes int64
	// Ordinal is which of the carrier's events the event is, from 1.
	Ordinal int
}

// AttachFunc sets an event's carriers in the protocol's terms (Event.Chunks,
// Event.Frames) just before it is emitted. carried is only valid during
// the call (the Body reuses its array).
type AttachFunc func(ev *record.Event, carried []Carried)

// Body follows the watch events of one message body. Create it with New;
// it is not safe for concurrent use.
type Body struct {
	env    Env
	opt    Options
	attach AttachFunc

	// Conn, Exchange and Direction go into every record the Body makes.
	conn      *record.Conn
	exchange  int
	direction string
	now       time.Time

	framer    *event.Framer
	format    event.Format
	tentative bool // a watch inferred from the response only
	// held is the response of a tentative watch (HoldResponse), not
	// emitted yet: it goes out before the body's first record, a watch
	// once the first event decoded, or no watch when the body turns out
	// not to be one.
	held    *record.Response
	events  map[string]int
	seq     int
	initial bool
	// window holds the carriers events may still refer to, by increasing
	// index: those of the event in progress and the current carrier.
	window []Carrier
	// carried is attachCarriers' array, reused from event to event.
	carried []Carried
	// pending holds decoded events waiting for their last carrier's data,
	// and the problems found after them, to be emitted in order;
	// pendBytes counts the bytes of those events and pendHeld those
	// reserved from the budget.
	pending []record.Record
	// spans holds the placeholders of the pending events' carriers
	// (decode puts them in Event.Chunks, attachCarriers replaces them):
	// one array for all of them, reused once they are emitted.
	spans     []record.Chunk
	pendBytes int64
	pendHeld  int64
	cur       int   // index of the current carrier, -1 before the first
	curSize   int64 // its size
	curData   int64 // its data bytes so far
	completed []framed

	inf      *inflate.Inflater
	inflated int64
	members  int
	infHeld  int64

	// closedByClient: the client ended the body (byKwatch: kwatch was the
	// client); an event cut short is then not the stream's fault.
	closedByClient, byKwatch bool

	problems, warnings int
}

// framed is one thing the framer reported: a complete frame or a framing
// problem. They are handled after the write, in the order they happened,
// so that the records do not depend on how many frames one write held.
type framed struct {
	frame *event.Frame
	prob  *event.FrameProblem
}

// New returns a Body for the events of format f in the body of exchange on
// conn, read in direction ("client" or "server"); attach turns the carriers
// of each event into the protocol's records.
func New(env Env, opt Options, attach AttachFunc, conn *record.Conn, exchange int, direction string, f event.Format, t time.Time) *Body {
	b := &Body{env: env, opt: opt, attach: attach, conn: conn, exchange: exchange, direction: direction,
		now: t, format: f, events: map[string]int{}, cur: -1}
	b.framer = event.NewFramer(f, opt.MaxEventBytes, b.onFrame, b.onFrameProblem)
	b.framer.LimitSpans(opt.MaxEventCarriers)
	b.framer.SetBudget(opt.Budget)
	b.framer.DecodeWith(opt.Decode)
	return b
}

// SetSecrets marks the body's events as Secrets by where they come from (a
// watch of secrets: event.SecretsPath of its request's target): their
// objects are redacted as Secrets whatever their kind says
// (event.DecodeOptions.AsSecret).
func (b *Body) SetSecrets(on bool) {
	b.opt.Decode.AsSecret = on
	if b.framer != nil {
		b.framer.DecodeWith(b.opt.Decode)
	}
}

// KindNotObject is the Problem kind (a warning) of a watch event whose
// object is not a JSON object (event.Event.NotObject).
const KindNotObject = "watch event object not a JSON object"

// SetOtherResource marks the body's events as objects of a resource other
// than secrets by where they come from (event.OtherResourcePath of its
// request's target): an object with no kind is not redacted as a Secret
// (event.DecodeOptions.OtherResource).
func (b *Body) SetOtherResource(on bool) {
	b.opt.Decode.OtherResource = on
	if b.framer != nil {
		b.framer.DecodeWith(b.opt.Decode)
	}
}

// SetTime sets the time of what the next bytes complete (their arrival).
func (b *Body) SetTime(t time.Time) { b.now = t }

// SetTentative marks a watch inferred from the response only: when its first
// event does not frame or decode, or the body ends before one did, the body
// is taken as no watch at all (Watching turns false) instead of reporting a
// problem.
func (b *Body) SetTentative() { b.tentative = true }

// HoldResponse takes r, the response whose body this is, to emit: at once
// for a body that is not tentative; for a tentative one, before the body's
// first record (its first event confirms it: r goes out as a watch), or,
// when the body turns out to be no watch (its first event does not frame
// or decode, or it ends before one did), with r.Watch and r.Format
// cleared. Sinks then never see a response taken for a watch that was
// not one: a protobuf GET or a discovery document on an HTTP/2 connection
// joined mid-way, whose requests were not seen.
func (b *Body) HoldResponse(r *record.Response) {
	if !b.tentative {
		b.env.Emit(r)
		return
	}
	b.held = r
}

// emitHeld emits the held response as it is (a watch) before the body's
// first record, a problem (an inflate limit, a gap): the body is then
// followed as the watch it was taken for, tentative no more.
func (b *Body) emitHeld() {
	if r := b.held; r != nil {
		b.held = nil
		b.tentative = false
		b.env.Emit(r)
	}
}

// notWatch ends a tentative body that is no watch: its events are no
// longer followed, and its held response goes out as no watch.
func (b *Body) notWatch() {
	b.tentative = false
	if b.framer != nil {
		b.framer.Discard()
		b.framer = nil
	}
	if r := b.held; r != nil {
		b.held = nil
		r.Watch, r.Format = false, ""
		b.env.Emit(r)
	}
}

// SetInitial marks the body's first ADDED events as the initial state
// (record.Request.InitialState): they end at the first other event.
func (b *Body) SetInitial(on bool) { b.initial = on }

// Resync makes the framer look for the start of an event, for a body whose
// start was not captured.
func (b *Body) Resync() {
	if b.framer != nil {
		b.framer.Resync()
	}
}

// Watching reports whether the body is still followed as a watch.
func (b *Body) Watching() bool { return b.framer != nil }

// Events returns the count of events by type.
func (b *Body) Events() map[string]int { return b.events }

// Inflated returns the bytes the body inflated to and the members that
// inflated whole (0, 0 without a content coding).
func (b *Body) Inflated() (bytes int64, members int) { return b.inflated, b.members }

// Counts returns how many problems and warnings the Body reported.
func (b *Body) Counts() (problems, warnings int) { return b.problems, b.warnings }

// ClosedByClient tells the Body that the client ended it (byKwatch: kwatch
// itself, live); an event it cut short is reported as a warning.
func (b *Body) ClosedByClient(byKwatch bool) { b.closedByClient, b.byKwatch = true, byKwatch }

// inflaterBytes is what one Inflater holds, reserved from the shared
// budget: flate's 32 KiB window and tables, an output buffer of 32 KiB, a
// goroutine's stack.
const inflaterBytes = 96 << 10

// StartInflate inflates the body (content coding enc, which
// inflate.Supported accepts) before its events are framed. It returns false,
// after reporting why, when the budget has no room for an inflater: the
// events are then not decoded.
func (b *Body) StartInflate(enc string) bool {
	if !b.opt.Budget.Reserve(inflaterBytes) {
		b.problems++
		b.env.Problem(&record.Problem{Direction: b.direction, Where: "body", Offset: 0, Exchange: b.exchange,
			Kind: event.KindBudget, Time: b.now, Detail: fmt.Sprintf("no room to inflate this %s body; its %s are listed, its events are not decoded", enc, b.opt.carriers()),
			Hint: "raise --max-buffered-bytes-total"})
		b.framer.Discard()
		b.framer = nil
		return false
	}
	b.infHeld = inflaterBytes
	b.inf = inflate.New(enc, inflateSink{b}, b.opt.MaxInflatedBytes)
	return true
}

// Compressed reports whether the body is inflated before framing (its
// offsets then count inflated content).
func (b *Body) Compressed() bool { return b.inf != nil || b.inflated > 0 }

// inflateSink receives what the body's Inflater produces.
type inflateSink struct{ b *Body }

// Inflated frames inflated bytes as carried by the carriers whose compressed
// bytes the decompressor read to produce them: deflate hands its output on
// a block at a time, so the bytes are shared out among those carriers in
// proportion to the compressed bytes each gave, in order.
func (s inflateSink) Inflated(p []byte, from []inflate.Span) {
	b := s.b
	b.inflated += int64(len(p))
	var total int64
	for _, sp := range from {
		total += sp.Bytes
	}
	if total == 0 { // only buffered output: the current carrier's
		from, total = []inflate.Span{{Carrier: b.cur, Bytes: 1}}, 1
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
			w.Inflated += int64(len(part))
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
	b.problem(&record.Problem{Direction: b.direction, Where: "data", Offset: off, Exchange: b.exchange,
		Kind: kind, Detail: detail, Time: b.now, Warning: kind == inflate.KindJunk})
}

// where names what the framer's offsets count: the de-chunked body (or the
// DATA frames' data), or the inflated content when the body is compressed.
func (b *Body) where() string {
	if b.Compressed() {
		return "content"
	}
	return "data"
}

// find returns the window's entry for carrier index i, or nil.
func (b *Body) find(i int) *Carrier {
	k, ok := slices.BinarySearchFunc(b.window, i, func(c Carrier, i int) int { return cmp.Compare(c.Index, i) })
	if !ok {
		return nil
	}
	return &b.window[k]
}

// Start begins carrier c (its Index counts up from 0; Size is its data
// bytes). Its data follows through Write.
func (b *Body) Start(c Carrier) {
	b.cur, b.curSize, b.curData = c.Index, c.Size, 0
	if b.framer == nil {
		return
	}
	b.framer.CarrierStart()
	c.Events, c.Inflated, c.firstSerial, c.lastSerial = 0, 0, 0, 0
	c.Data = -1
	if b.inf == nil {
		c.Data = b.framer.Offset()
	}
	// Once the event in progress lists as many carriers as it may, the
	// carrier just left is needed by no event unless it is listed: take
	// its place, so that an event cut into a million tiny carriers keeps
	// the window bounded.
	if n := len(b.window); n > 0 && b.framer.SpansFull() && b.window[n-1].Index > b.framer.LastListedChunk() {
		b.window[n-1] = c
		return
	}
	b.window = append(b.window, c)
}

// Write hands over data bytes of the current carrier (or, for a body
// without carriers, content with carrier -1: see WriteUncarried).
func (b *Body) Write(p []byte) {
	b.curData += int64(len(p))
	b.frame(p, b.cur)
}

// WriteUncarried hands over body bytes of a body that has no carriers (a
// Content-Length or close-delimited HTTP/1.1 body).
func (b *Body) WriteUncarried(p []byte) { b.frame(p, -1) }

// frame hands body bytes carried by carrier c (-1: none) to the inflater,
// or straight to the framer, and handles what they completed.
func (b *Body) frame(p []byte, c int) {
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

func (b *Body) onFrame(f *event.Frame) { b.queueFramed(framed{frame: f}) }

func (b *Body) onFrameProblem(fp event.FrameProblem) { b.queueFramed(framed{prob: &fp}) }

// maxFramed bounds the frames queued during one write: a write of a few
// MiB of tiny events ("{}\n") would otherwise queue a Frame per 3 bytes.
const maxFramed = 256

func (b *Body) queueFramed(f framed) {
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
func (b *Body) drain() {
	if b.framer == nil {
		b.completed = b.completed[:0]
		return
	}
	for _, out := range b.completed {
		if fp := out.prob; fp != nil {
			if b.tentative && b.seq == 0 && b.format == event.FormatProtobuf && fp.Kind == event.KindOversize {
				// The response only looked like a watch: its first
				// four bytes, read as a length prefix, announce more
				// than an event may hold (a protobuf object's magic,
				// "k8s\x00", reads as 1798861568).
				b.notWatch()
				break
			}
			p := &record.Problem{Direction: b.direction, Where: b.where(), Offset: fp.Offset,
				Exchange: b.exchange, Kind: fp.Kind, Detail: fp.Detail, Hint: fp.Hint, Warning: fp.Warning, Time: b.now}
			if fp.Kind == event.KindTruncated && b.closedByClient {
				// The client cut the event itself (kwatch: Ctrl-C,
				// --idle-timeout, a watch it ended): nothing is wrong
				// with the stream.
				p.Warning = true
				p.Hint = "the client closed the connection inside this event"
				if b.byKwatch {
					p.Hint = "kwatch closed the connection inside this event"
				}
			}
			b.problem(p)
			continue
		}
		f := out.frame
		// A frame too large or damaged is still an event the carriers
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
		if n := int64(len(f.Data)); b.opt.Budget.Reserve(n) {
			b.pendHeld += n
		} else {
			b.emitPending()
		}
		if f.UnlistedChunks > 0 {
			b.problem(&record.Problem{Direction: b.direction, Where: b.where(), Offset: f.Offset,
				Exchange: b.exchange, Kind: "watch event in too many " + b.opt.carriers(), Warning: true, Time: b.now,
				Detail: fmt.Sprintf("%d more %s carried %d of its %d bytes; only the first %d %s are listed",
					f.UnlistedChunks, b.opt.carriers(), f.UnlistedBytes, f.Length, len(f.Spans), b.opt.carriers())})
		}
		if len(b.pending) >= maxPendingEvents || b.pendBytes > b.framerMax() {
			// A huge carrier full of events (a chunk-size of 1 GiB,
			// say) would keep them all: emit them now, with the
			// counts of events per carrier known so far.
			b.emitPending()
		}
	}
	if b.framer != nil {
		for _, out := range b.completed {
			if out.frame != nil {
				b.framer.Recycle(out.frame) // decoded: its record holds what it needs
			}
		}
	}
	clear(b.completed) // drop the frames' data
	b.completed = b.completed[:0]
}

// flushCompleted handles what the last write completed (drain), counts
// events per carrier, and emits every pending event whose carriers are all
// complete. c is the carrier the write belonged to (-1 for none).
func (b *Body) flushCompleted(c int) {
	b.drain()
	if b.framer == nil {
		return
	}
	if b.framer.InFrame() && c >= 0 && b.framer.CurrentInChunk(c) {
		b.countIn([]event.Span{{Carrier: c}}, b.framer.Serial())
	}
	if c >= 0 && b.curData < b.curSize {
		return // the carrier's data is not complete yet
	}
	b.release()
}

// countIn counts frame serial in the carriers of spans.
func (b *Body) countIn(spans []event.Span, serial int) {
	for _, sp := range spans {
		w := b.find(sp.Carrier)
		if sp.Carrier < 0 || w == nil {
			continue
		}
		if w.lastSerial < serial {
			if w.Events == 0 {
				w.firstSerial = serial
			}
			w.lastSerial = serial
			w.Events++
		}
	}
}

// maxKeptSpans bounds the arrays a Body keeps from event to event (spans
// and carried, in entries): a few KiB per watch body, of which there may
// be thousands.
const maxKeptSpans = 64

// maxPendingEvents bounds the events kept waiting for the end of their
// carrier (see release); pendBytes is bounded by the largest event.
const maxPendingEvents = 1024

// framerMax is the bound on one event's bytes.
func (b *Body) framerMax() int64 {
	if m := b.opt.MaxEventBytes; m > 0 {
		return m
	}
	return event.DefaultMaxEventBytes
}

// problem reports a problem with the events of the body. While decoded
// events wait for their carriers (see release), it waits behind them, so
// that records keep the order of the bytes they are about.
func (b *Body) problem(p *record.Problem) {
	b.emitHeld()
	if p.Warning {
		b.warnings++
	} else {
		b.problems++
	}
	if len(b.pending) == 0 {
		b.env.Problem(p)
		return
	}
	b.env.Locate(p)
	b.pending = append(b.pending, p)
}

// release emits pending events (and the problems behind them) and trims
// the carrier window.
func (b *Body) release() {
	b.emitPending()
	// Keep only carriers the event in progress may still need.
	keepFrom := b.cur
	if b.framer != nil && b.framer.InFrame() {
		keepFrom = b.framer.FirstChunk()
	}
	if b.inf != nil {
		// Compressed bytes read but not yet inflated will be shared
		// out among their carriers.
		if c, ok := b.inf.Oldest(); ok && c >= 0 && c < keepFrom {
			keepFrom = c
		}
	}
	drop := 0
	for drop < len(b.window) && b.window[drop].Index < keepFrom {
		drop++
	}
	if drop > 0 {
		n := copy(b.window, b.window[drop:])
		clear(b.window[n:])
		b.window = b.window[:n]
	}
}

// emitPending emits the pending events, with their carriers, and the
// problems behind them.
func (b *Body) emitPending() {
	for _, r := range b.pending {
		if ev, ok := r.(*record.Event); ok {
			b.attachCarriers(ev)
		}
		b.env.Emit(r)
	}
	clear(b.pending)
	b.pending = b.pending[:0]
	// Every placeholder was replaced by attachCarriers: the array is free.
	b.spans = b.spans[:0]
	if cap(b.spans) > maxKeptSpans {
		b.spans = nil // do not keep an array sized for many events or carriers
	}
	b.pendBytes = 0
	b.opt.Budget.Release(b.pendHeld)
	b.pendHeld = 0
}

// attachCarriers hands the event's carriers to the protocol's AttachFunc.
// decode left them in ev.Chunks as placeholders (Index, Bytes and the
// frame's serial in Ordinal).
func (b *Body) attachCarriers(ev *record.Event) {
	spans := ev.Chunks
	ev.Chunks = nil
	out := b.carried[:0]
	for _, sp := range spans {
		w := b.find(sp.Index)
		if sp.Index < 0 || w == nil {
			continue
		}
		out = append(out, Carried{Carrier: *w, Bytes: sp.Bytes, Ordinal: sp.Ordinal - w.firstSerial + 1})
	}
	b.attach(ev, out)
	clear(out) // hold no carrier's Meta past its event
	if cap(out) > maxKeptSpans {
		out = nil // an event of many carriers does not size the array for good
	}
	b.carried = out
}

// decode turns a frame into an event record, or reports why it cannot.
func (b *Body) decode(f *event.Frame) *record.Event {
	ev, err := f.Decoded, f.DecodeErr
	if ev == nil && err == nil {
		ev, err = event.Decode(b.format, f.Data, b.opt.Decode)
	}
	if err != nil {
		if b.tentative && b.seq == 0 {
			// The response only looked like a watch: it goes out as
			// no watch (HoldResponse).
			b.notWatch()
			return nil
		}
		b.problem(&record.Problem{Direction: b.direction, Where: b.where(), Offset: f.Offset,
			Exchange: b.exchange, Kind: "watch event does not decode", Detail: phrase.ClipCounted(err.Error(), 300), Time: b.now})
		b.framer.Suspect(f.Serial, f.Offset+f.Length)
		if ev == nil {
			return nil
		}
	}
	if b.tentative {
		// Confirmed: the response goes out before its first event.
		b.tentative = false
		if b.held != nil {
			b.env.Emit(b.held)
			b.held = nil
		}
	}
	b.seq++
	event.CountType(b.events, ev.Type)
	if ev.NotObject != "" {
		how := "shown as sent"
		if ev.Redacted {
			how = "shown as sent, Secret values redacted"
		}
		b.problem(&record.Problem{Direction: b.direction, Where: b.where(), Offset: f.Offset,
			Exchange: b.exchange, Kind: KindNotObject, Warning: true, Time: b.now,
			Detail: fmt.Sprintf("event %d's object is a JSON %s, not an object: no Kubernetes client decodes it as one; %s", b.seq, ev.NotObject, how)})
	}
	rec := &record.Event{Conn: b.conn, Exchange: b.exchange, Seq: b.seq, Time: b.now,
		Type: ev.Type, Object: ev.Object, APIVersion: ev.APIVersion, Kind: ev.Kind,
		Namespace: ev.Namespace, Name: ev.Name, UID: ev.UID, ResourceVersion: ev.ResourceVersion, RowKind: ev.RowKind,
		InitialEventsEnd: ev.InitialEventsEnd, Status: ev.Status, Initial: b.initial && ev.Type == "ADDED", NotObject: ev.NotObject,
		Offset: f.Offset, Length: f.Length, Format: b.format.String()}
	from := len(b.spans)
	for _, sp := range f.Spans {
		if sp.Carrier >= 0 {
			b.spans = append(b.spans, record.Chunk{Index: sp.Carrier, Bytes: sp.Bytes, Ordinal: f.Serial})
		}
	}
	if n := len(b.spans); n > from {
		rec.Chunks = b.spans[from:n:n]
	}
	if ev.Type != "ADDED" {
		// The initial state is ADDED events, ended by the
		// initial-events-end BOOKMARK (or, from a server that sends
		// none, by the first other event).
		b.initial = false
	}
	return rec
}

// Gap tells the Body that n bytes of its content were lost (inside the
// current carrier's data when inData).
func (b *Body) Gap(n int64, inData bool) {
	if inData {
		b.curData += n
	}
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

// LostFraming tells the Body that n bytes were lost across the carriers'
// own framing (a chunk-size line among them): how many of them were
// content is unknown, so the events' framing cannot count through them and
// the framer looks for the next event instead (Framer.Break).
func (b *Body) LostFraming(n int64) {
	if b.inf != nil {
		b.Gap(n, false)
		return
	}
	if b.framer != nil {
		b.framer.Break(fmt.Sprintf("%d bytes missing across chunk framing; the event cannot be decoded", n))
		b.drain()
	}
}

// Close ends the body: a compressed member cut short is reported and what
// it produced framed, then an event left incomplete is reported, and every
// event still waiting is emitted. The budget it held is released.
func (b *Body) Close() {
	if b.inf != nil {
		b.inf.Close()
		b.inf = nil
		b.opt.Budget.Release(b.infHeld)
		b.infHeld = 0
	}
	if b.framer != nil {
		b.framer.Close()
		b.drain()
		b.release()
	}
	if b.tentative {
		b.notWatch() // it ended before a first event confirmed it
	}
}
