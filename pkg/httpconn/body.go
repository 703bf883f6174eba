package httpconn

import (
	"fmt"
	"net/textproto"
	"strconv"
	"time"

	"github.com/kwatch/kwatch/pkg/carrier"
	"github.com/kwatch/kwatch/pkg/chunk"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
)

// body follows one message body: its framing, its chunks and, for a watch,
// its events.
type body struct {
	// byClient: the client closed the connection before the body ended
	// (record.End.ByClient).
	byClient bool
	// cut: how the server cut the body short, when it did
	// (record.End.Cut, for a watch).
	cut *record.Cut
	// gapped: bytes of the body were lost, so whether the server ended it
	// early cannot be told (its end may have been among them).
	gapped     bool
	s          *direction
	resp       *record.Response // nil for a request body
	exchange   int
	framing    string // "chunked", "content-length", "close", "none"
	length     int64  // Content-Length
	coded      string // transfer codings applied before chunked
	read       int64  // body bytes consumed (framing included)
	done       bool
	start      time.Time
	now        time.Time
	dec        *chunk.Decoder
	chunks     int
	data       int64 // de-chunked bytes
	trailers   []string
	sawTrailer bool   // a trailer field line came (kept or not)
	trailerEnd []byte // the line ending the trailer section, when sawTrailer
	lastChunk  []byte // last-chunk line and the final line ending, as on the wire
	endDetail  string // where inside the framing an unclean body stopped
	lost       int64  // lost bytes that crossed chunk framing
	bareLFAt   int64  // body offset of the last bare LF reported
	sizes      []int64
	problems   int // errors reported about this body
	warnings   int // warnings reported about this body

	// Watch events, mapped to the chunks that carried them (pkg/carrier,
	// shared with the other protocol followers); nil when the body is not
	// (or no longer) followed as a watch.
	ev *carrier.Body

	// Non-2xx: the body is kept (bounded) to show its Status.
	keepStatus bool
	statusBuf  []byte
	ended      bool
}

// newBody starts the body of a message with header hdr; noBody says that
// the message has none whatever its fields say (RFC 9112 §6.3 items 1-2).
func (s *direction) newBody(hdr textproto.MIMEHeader, response, noBody bool, t time.Time) *body {
	f := framing{how: "none"}
	if !noBody {
		f = framingOf(hdr, response)
	}
	b := &body{s: s, framing: f.how, length: f.length, coded: f.coded, start: t, now: t, bareLFAt: -1}
	for _, w := range f.warns {
		s.problem("stream", s.hdrStart, "unusual body framing", w, "", true, t)
	}
	if f.how == "chunked" {
		b.dec = chunk.NewDecoder(b, s.c.opt.Chunk)
	}
	return b
}

// startEvents follows the body's watch events as w says.
func (b *body) startEvents(w exchange.WatchBody) {
	b.ev = w.Start(connEnv{b.s.c}, b.s.c.opt.Events(), attachChunks, b.s.c.rec, b.exchange, b.s.name(), b.now)
}

// emitResponse emits resp, the body's response, or hands it to the body's
// watch events when they follow a watch its request did not announce: they
// emit it once their first event confirms it, or as no watch
// (carrier.Body.HoldResponse).
func (b *body) emitResponse(resp *record.Response) {
	if b.ev != nil {
		b.ev.HoldResponse(resp)
		return
	}
	b.s.c.emit(resp)
}

// connEnv is where a body's event records go: the connection's sink.
type connEnv struct{ c *Conn }

func (e connEnv) Emit(r record.Record)      { e.c.emit(r) }
func (e connEnv) Problem(p *record.Problem) { e.c.problem(p) }
func (e connEnv) Locate(p *record.Problem)  { e.c.locate(p) }

// attachChunks lists an event's chunks (RFC 9112 §7.1) as record.Chunks.
func attachChunks(ev *record.Event, carried []carrier.Carried) {
	out := make([]record.Chunk, 0, len(carried))
	for _, cd := range carried {
		rc := cd.Carrier.Meta.(record.Chunk)
		rc.Events, rc.Inflated = cd.Carrier.Events, cd.Carrier.Inflated
		rc.Bytes, rc.Ordinal, rc.DataAt = cd.Bytes, cd.Ordinal, cd.Carrier.Data
		out = append(out, rc)
	}
	ev.Chunks = out
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
	if b.ev != nil {
		b.ev.SetTime(t)
		b.ev.WriteUncarried(p)
	}
}

func (b *body) keep(p []byte) {
	if b.keepStatus && len(b.statusBuf) < exchange.MaxStatusBody {
		n := min(len(p), exchange.MaxStatusBody-len(b.statusBuf))
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
	if b.ev == nil {
		return
	}
	b.ev.Start(carrier.Carrier{Index: c.Index, Size: c.Size, Meta: record.Chunk{
		Index: c.Index, Size: c.Size, SizeLine: string(c.Line), Offset: c.Offset,
		Header: append([]byte(nil), c.Header...),
	}})
}

// Data frames chunk data.
func (b *body) Data(c *chunk.Chunk, p []byte) {
	b.data += int64(len(p))
	b.keep(p)
	if b.ev != nil {
		b.ev.SetTime(b.now)
		b.ev.Write(p)
	}
}

// ChunkEnd is a no-op: events are released when a chunk's data is complete.
func (b *body) ChunkEnd(*chunk.Chunk) {}

// Trailer keeps a trailer field line.
func (b *body) Trailer(line []byte, _ int64) {
	b.sawTrailer = true
	if len(b.trailers) < 32 {
		b.trailers = append(b.trailers, exchange.RedactTrailerLine(string(line)))
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
	detail := err.Detail
	if err.Kind == chunk.KindBadTrailer {
		// The line, quoted: shown only as a trailer line would be.
		if line, uerr := strconv.Unquote(detail); uerr != nil || exchange.RedactTrailerLine(line) != line {
			detail = "a line not shown: it may hold a credential"
		}
	}
	b.s.c.problem(&record.Problem{Direction: b.s.name(), Where: "body", Offset: err.Offset,
		Exchange: b.exchange, Kind: err.Kind, Detail: detail, Warning: true, Time: b.now})
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
	b.gapped = true
	switch b.framing {
	case "chunked":
		inData, remain := b.dec.InData()
		keep := b.dec.Skip(n)
		inData = inData && n < remain
		b.read += n
		if inData {
			b.data += n
			b.gapContent(n, true)
		} else {
			b.lost += n // framing and data alike: unknown which
			if b.ev != nil {
				b.ev.SetTime(b.now)
				b.ev.LostFraming(n)
			}
		}
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
		b.gapContent(n, false)
		if b.read == b.length {
			b.done = true
			b.finish(t)
			b.s.body = nil
		}
		return true
	default:
		b.read += n
		b.data += n
		b.gapContent(n, false)
		return true
	}
}

// gapContent tells the events' Body that n bytes of the de-chunked body
// were lost (inside the current chunk's data when inData).
func (b *body) gapContent(n int64, inData bool) {
	if b.ev != nil {
		b.ev.SetTime(b.now)
		b.ev.Gap(n, inData)
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
func (b *body) closeWith(how exchange.Ending, t time.Time) {
	if b.done {
		b.finish(t)
		return
	}
	if b.framing == "close" && (how == exchange.EndFIN || how == exchange.EndRST || how == exchange.EndClientRST) {
		b.end("close", true, t)
		return
	}
	var desc, detail string
	switch how {
	case exchange.EndFIN:
		desc = "closed without the last chunk"
		if b.framing == "content-length" {
			desc, detail = "closed before the end of the body", fmt.Sprintf("%d of %d bytes", b.read, b.length)
		}
	case exchange.EndRST, exchange.EndClientRST:
		desc = "reset without the last chunk"
		if b.framing == "content-length" {
			desc, detail = "reset before the end of the body", fmt.Sprintf("%d of %d bytes", b.read, b.length)
		}
	case exchange.EndCapture:
		desc = "capture ended mid-stream"
	case exchange.EndDetach:
		desc = exchange.Detached
	case exchange.EndLocal:
		desc, detail = "closed by the client", exchange.ClosedByKwatch
		b.byClient = true
		if b.ev != nil {
			b.ev.ClosedByClient(true)
		}
	case exchange.EndClient:
		desc = "closed by the client"
		b.byClient = true
		if b.ev != nil {
			b.ev.ClosedByClient(false)
		}
	case exchange.EndDropped:
		// One of record.End's fixed set; the detail says why.
		desc, detail = "not decoded further", "no longer followed: too many connections open at once"
	default:
		desc = "not decoded further"
	}
	if b.dec != nil && how >= 0 {
		if err := b.dec.Close(); err != nil && how != exchange.EndCapture && how != exchange.EndDetach && how != exchange.EndLocal && how != exchange.EndDropped {
			if ce, ok := err.(*chunk.Error); ok && ce.Detail != "" {
				detail = ce.Detail
			}
		}
	}
	b.endDetail = detail
	if !b.gapped {
		b.cut = exchange.ConnCut(how)
	}
	b.end(desc, false, t)
}

func (b *body) end(how string, clean bool, t time.Time) {
	if b.ended {
		return
	}
	b.ended = true
	// Problems the framer reports now (an event cut short) happened when
	// the body ended, not when its last byte came.
	b.now = t
	e := &record.End{Conn: b.s.c.rec, Exchange: b.exchange, Time: t, How: how, Detail: b.endDetail, Clean: clean, ByClient: b.byClient,
		Trailers: b.trailers, LastChunk: b.lastChunk, TrailerEnd: b.trailerEnd, Chunks: b.chunks,
		Bytes: b.read, Data: b.data, Lost: b.lost + b.discarded(), Duration: t.Sub(b.start), Problems: b.problems, Warnings: b.warnings,
		ChunkSizes: b.sizes, Request: b.resp == nil}
	exchange.EndBody(e, b.ev, t)
	if b.keepStatus && b.resp != nil {
		exchange.EndStatus(e, b.resp.ContentType, b.statusBuf)
	}
	if !clean && b.resp != nil {
		e.Cut = b.cut
	}
	b.s.c.emit(e)
	if p := exchange.CutProblem(e); p != nil {
		b.s.c.problem(p)
	}
}
