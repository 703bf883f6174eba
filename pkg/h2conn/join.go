package h2conn

import (
	"fmt"
	"net/textproto"
	"time"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// A connection joined mid-connection (Options.Joined) is one a capture, or
// a live attach, began between (or inside) frames of a long-lived HTTP/2
// connection: a controller's connection to the API server, the API
// server's gRPC connections to etcd. What came before is unknown and
// never guessed:
//
//   - Each direction starts in phaseSync: its FrameScan finds where its
//     frames start (from TLS records' ends too, when its bytes come as
//     records: ClientRecord, ServerRecord); the bytes before are the rest
//     of a frame whose start was not captured (an "h2-joined" note says
//     how many).
//   - Neither side's SETTINGS were seen (RFC 9113 §6.5): a setting is
//     known once a SETTINGS frame after the join names it, and is not
//     judged by before (SETTINGS_MAX_FRAME_SIZE); flow-control windows
//     (§6.9) are not known at all, so they are not judged.
//   - A stream the server sends DATA on without HEADERS since the join is
//     a stream opened before it: its response is inferred from the first
//     DATA frame whose data start a watch event (exchange.StartOfBody),
//     frames before it passed over (the rest of an event, or of a gzip
//     member), and its resource is named from its first event's object
//     (a Resource note), since the request's path was not seen.
//   - Header blocks are decoded by joinedHPACK: a field that refers to a
//     dynamic table entry from before the join is a record.UnknownField.
//     A response whose :status or Content-Type is among them is held
//     until its first DATA frame says what its body is.
//   - A CONTINUATION before the direction's first HEADERS since the join
//     ends a header block that began before it: it is passed over.

// KindJoinNoFrames is the problem of a connection joined mid-connection
// whose direction holds no frame boundary where one must be, so that it is
// not decoded; README.md lists it. (The bytes before a direction's first
// frame are the rest of a frame that began before the join: where the
// capture began, said in an "h2-joined" note, not a problem.)
const KindJoinNoFrames = "no HTTP/2 frame boundary found"

// noteJoined emits, once, what a connection joined mid-connection does not
// know.
func (c *Conn) noteJoined(t time.Time) {
	if !c.opt.Joined || c.joinNoted {
		return
	}
	c.joinNoted = true
	c.emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "h2-joined",
		Message: "joined mid-connection: SETTINGS not seen (a setting is the RFC 9113 default until a SETTINGS frame names it; flow control is not judged); " +
			"HPACK dynamic table entries from before the join are unknown; streams opened before it are named from their events"})
}

func (c *Conn) noteStream(t time.Time, stream uint32, res *record.Resource, msg string) {
	c.emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "h2-joined", Stream: stream, Resource: res, Message: msg})
}

// JoinAt tells a Conn of Options.Joined that the direction of the server
// (or of the client) showed the connection to be HTTP/2 with frames from
// offset at of its first bytes, as a FrameScan of pkg/wire found them:
// that direction starts there, and the other looks for its first frame
// knowing the connection is HTTP/2 (FrameScan.Known; a client Eager).
// Without it, each direction scans as if nothing were known. Call it
// before any bytes.
func (c *Conn) JoinAt(server bool, at int) {
	d, o := c.client, c.server
	if server {
		d, o = o, d
	}
	d.joinAt = at
	o.scan.Known, o.scan.Eager = true, !o.isServer
}

// syncData holds the first bytes of a direction in phaseSync (at most
// ScanBytes, the rest of p waiting in p) until its FrameScan decides;
// end: no more bytes will come before a gap or the end. Once frames are
// found, the held bytes from the first frame on are read as frames; the
// bytes of p not held are returned, to be read next.
func (s *direction) syncData(p []byte, end bool, t time.Time) []byte {
	if k := min(len(p), ScanBytes-len(s.sync)); k > 0 {
		// Up to a frame's worth is held without asking the budget, as
		// for frames.
		if grow := int64(len(s.sync)+k-freeFrameBytes) - s.syncHeld; grow > 0 {
			if s.c.opt.Events.Budget.Reserve(grow) {
				s.syncHeld += grow
			} else {
				// No room for more: decide on what may be held free.
				k, end = max(0, freeFrameBytes-len(s.sync)), true
			}
		}
		if len(s.sync) == 0 {
			s.syncSince = t
		}
		s.sync = append(s.sync, p[:k]...)
		p = p[k:]
	}
	if end && len(s.sync) == 0 {
		s.enter(phaseFrames) // nothing came: nothing to find
		return p
	}
	var at int
	var v ScanVerdict
	switch {
	case s.joinAt < 0:
		at, v = s.scan.Scan(s.sync, end)
	case len(s.sync) >= s.joinAt:
		at, v = s.joinAt, ScanFound
	case end:
		v = ScanNone
	default:
		v = ScanMore
	}
	switch v {
	case ScanMore:
		return p
	case ScanNone:
		n := len(s.sync)
		s.syncDone()
		s.problem("stream", s.off, KindJoinNoFrames,
			fmt.Sprintf("the %s's first %d bytes hold no HTTP/2 frame boundary (a chain of frame headers within %d bytes of the start); the rest of its bytes are not decoded",
				s.name(), n, MaxJoinSkip), "", false, t)
		s.off += int64(n)
		s.enter(phaseDead)
		return nil
	}
	held := s.sync
	s.sync = nil
	if at > 0 {
		// Where the capture (or attach) began, not a fault of the
		// traffic: a note, not a warning.
		s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "h2-joined",
			Message: fmt.Sprintf("the %s's first %s (from offset %d) are the rest of a frame that began before the join, passed over; its frames start at offset %d",
				s.name(), phrase.Count(at, "byte", "bytes"), s.off, s.off+int64(at))})
	}
	s.off += int64(at)
	s.enter(phaseFrames)
	s.fromSync = !s.syncSince.Equal(t)
	s.feed(held[at:], t)
	s.fromSync = false
	s.syncDone()
	return p
}

// syncDone gives back what phaseSync held.
func (s *direction) syncDone() {
	s.sync = nil
	s.c.opt.Events.Budget.Release(s.syncHeld)
	s.syncHeld = 0
}

// passContinuation reports whether the frame in progress is a
// CONTINUATION that ends a header block begun before the join (before the
// direction's first HEADERS since it): it is then passed over, once said.
func (s *direction) passContinuation(t time.Time) bool {
	if s.jh == nil || s.phase == phaseBlock || s.blocks > 0 || s.hdr[3] != 0x9 {
		return false
	}
	if s.passed++; s.passed == 1 {
		s.c.noteStream(t, streamOf(s.hdr), nil, fmt.Sprintf("CONTINUATION from the %s on stream %d: the rest of a header block that began before the join; passed over (and any more before its first HEADERS)", s.name(), streamOf(s.hdr)))
	}
	return true
}

// onUnknown collects a field of the block in progress that could not be
// decoded (at most maxUnknownFields are kept).
func (s *direction) onUnknown(u record.UnknownField) {
	if len(s.unknown) < maxUnknownFields {
		s.unknown = append(s.unknown, u)
	}
}

// maxUnknownFields bounds the unknown fields listed for one header block.
const maxUnknownFields = 64

// joinedFragment adds a header block fragment of a joined direction to
// the block in progress (at most MaxHeaderListBytes of it) and, at its
// end, decodes the block; it reports whether the fields are ready for
// blockDone.
func (s *direction) joinedFragment(p []byte, end bool, t time.Time) bool {
	s.hpackIn += int64(len(p))
	if s.blockCut == "" {
		// Past a frame's worth, the block held counts against the
		// budget, as a frame does.
		grow := int64(len(s.block)+len(p)-freeFrameBytes) - s.blockHeld
		switch {
		case len(s.block)+len(p) > s.c.opt.MaxHeaderListBytes:
			s.blockCut = KindHeaderList
		case grow > 0 && !s.c.opt.Events.Budget.Reserve(grow):
			s.blockCut = event.KindBudget
		default:
			s.blockHeld += max(grow, 0)
			s.block = append(s.block, p...)
		}
	}
	if !end {
		return false
	}
	s.enter(phaseFrames)
	block := s.block
	defer s.blockDoneJoined()
	if cut := s.blockCut; cut != "" {
		s.jh.forget()
		why := fmt.Sprintf("more than %d bytes (--max-header-bytes)", s.c.opt.MaxHeaderListBytes)
		if cut == event.KindBudget {
			why = "more than --max-buffered-bytes-total has room for"
		}
		s.problem("stream", s.frameAt, cut,
			fmt.Sprintf("stream %d: a header block of %s; not decoded, and the HPACK entries it may add are unknown, as those from before the join", s.blockStream, why),
			"", false, t)
		return false
	}
	if err := s.jh.decode(block, s.onField, s.onUnknown); err != nil {
		s.problem("stream", s.frameAt, KindHPACK, fmt.Sprintf("stream %d: %v", s.blockStream, err),
			"the entries added since the join are forgotten: from here on every reference to the dynamic table is unknown, as those from before the join", false, t)
		return false
	}
	return true
}

// blockDoneJoined forgets the header block a joined direction held.
func (s *direction) blockDoneJoined() {
	s.block, s.blockCut = s.block[:0], ""
	if cap(s.block) > freeFrameBytes {
		s.block = nil
	}
	s.c.opt.Events.Budget.Release(s.blockHeld)
	s.blockHeld = 0
}

// joinStream starts following stream id, which the server sends DATA on
// without HEADERS since the join. Streams are numbered in the order they
// open (RFC 9113 §5.1.1): one below the first opened since the join was
// opened before it; others (a stream that ended, DATA after a reset) are
// not followed again. nil when it is not followed.
func (c *Conn) joinStream(id uint32, t time.Time) *stream {
	if _, gone := c.gone[id]; gone || c.firstOpened != 0 && id >= c.firstOpened {
		return nil
	}
	if len(c.streams) >= DefaultMaxStreams {
		c.untracked++
		return nil
	}
	st := c.newStream(id, nil, t)
	st.joined = true
	return st
}

// forgetJoined remembers that joined stream id ended, so that late DATA
// does not start it again (at most DefaultMaxStreams are remembered).
func (c *Conn) forgetJoined(id uint32) {
	if c.gone == nil || len(c.gone) >= DefaultMaxStreams {
		c.gone = map[uint32]struct{}{}
	}
	c.gone[id] = struct{}{}
}

// inferJoined starts the response of joined stream st at a DATA frame
// whose data start a watch event; a frame that does not is passed over.
func (c *Conn) inferJoined(st *stream, data []byte, t time.Time) {
	f, coding, ok := exchange.StartOfBody(data)
	if !ok {
		st.passed++
		st.passedBytes += int64(len(data))
		return
	}
	if st.passed > 0 {
		c.noteStream(t, st.id, nil, fmt.Sprintf("stream %d: %s (%d data bytes) before the first that starts a watch event passed over: the rest of an event, or of a gzip member, that began before the join",
			st.id, phrase.Count(st.passed, "DATA frame", "DATA frames"), st.passedBytes))
	}
	resp := &record.Response{Conn: c.rec, Exchange: int(st.id), Time: t, Proto: "HTTP/2.0", StatusCode: 200,
		Reason: "(HEADERS not captured: joined mid-connection)", Header: textproto.MIMEHeader{}, ContentType: exchange.MediaType(f),
		ContentEncoding: coding, Framing: "http2", Watch: true, Format: f.String(), Inferred: true}
	st.resp = resp
	st.ev = exchange.WatchBody{Format: f, Tentative: true, Coding: coding}.
		Start(joinedEnv{c, st}, c.opt.Events, attachFrames, c.rec, int(st.id), "server", t)
	c.emitResponse(st, resp)
}

// emitResponse emits resp, st's response, or hands it to st's watch events
// when they follow a watch its request did not announce: they emit it once
// their first event confirms it, or as no watch (carrier.Body.HoldResponse).
func (c *Conn) emitResponse(st *stream, resp *record.Response) {
	if st.ev != nil {
		st.ev.HoldResponse(resp)
		return
	}
	c.emit(resp)
}

// inferPending completes the response held on st (its :status or
// Content-Type was an unknown field) from its first DATA frame's data,
// and emits it.
func (c *Conn) inferPending(st *stream, data []byte, t time.Time) {
	resp := st.pend
	st.pend = nil
	st.resp = resp
	f, coding, ok := exchange.StartOfBody(data)
	pathKnown := st.req != nil && st.req.Target != ""
	if !ok || pathKnown && !st.req.Watch || resp.StatusCode != 0 && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		if resp.StatusCode >= 300 {
			st.keep = true
		}
		c.emit(resp)
		return
	}
	resp.Inferred = true
	if resp.StatusCode == 0 {
		resp.StatusCode, resp.Reason = 200, "(:status not known: inferred from the watch events)"
	}
	if resp.ContentType == "" {
		resp.ContentType = exchange.MediaType(f)
	}
	if resp.ContentEncoding == "" {
		resp.ContentEncoding = coding
	}
	resp.Watch, resp.Format = true, f.String()
	if pathKnown && c.omitted(st.req) {
		c.emit(resp) // left out by the filters: not framed
		return
	}
	var env carrierEnvAny = carrierEnv{c}
	if !pathKnown {
		env = joinedEnv{c, st}
	}
	st.ev = exchange.WatchBody{Format: f, Tentative: !pathKnown, Initial: pathKnown && st.req.InitialState,
		Secrets: pathKnown && st.req.Secrets, OtherResource: pathKnown && st.req.OtherResource, Coding: resp.ContentEncoding}.
		Start(env, c.opt.Events, attachFrames, c.rec, int(st.id), "server", t)
	c.emitResponse(st, resp)
}

// emitPending emits the response held on st as it is, when the stream
// ends (or trailers come) before any DATA frame.
func (c *Conn) emitPending(st *stream) {
	if st.pend != nil {
		st.resp, st.pend = st.pend, nil
		c.emit(st.resp)
	}
}

// carrierEnvAny is the carrier.Env of a stream's events.
type carrierEnvAny interface {
	Emit(record.Record)
	Problem(*record.Problem)
	Locate(*record.Problem)
}

// joinedEnv is where the events of a stream whose request path was not
// seen go: before its first event that names an object, a note names the
// stream's resource from it.
type joinedEnv struct {
	c  *Conn
	st *stream
}

func (e joinedEnv) Emit(r record.Record) {
	if ev, ok := r.(*record.Event); ok && !e.st.named && ev.Kind != "" && ev.Type != "ERROR" && ev.Type != "BOOKMARK" {
		e.st.named = true
		res := &record.Resource{APIVersion: ev.APIVersion, Kind: ev.Kind, Namespace: ev.Namespace, RowKind: ev.RowKind}
		where := "cluster-scoped or in no namespace"
		if ev.Namespace != "" {
			where = "the first in namespace " + ev.Namespace + ", the namespace watched not known"
		}
		e.c.noteStream(ev.Time, e.st.id, res, fmt.Sprintf("stream %d: its request was not seen; its events are %s, as named by event %d's object (%s)",
			e.st.id, res.WatchedText(), ev.Seq, where))
	}
	e.c.emit(r)
}
func (e joinedEnv) Problem(p *record.Problem) { e.c.problem(p) }
func (e joinedEnv) Locate(p *record.Problem)  { e.c.locate(p) }

// unknownStatus is the Reason of a response whose :status was an unknown
// field and whose data did not say.
const unknownStatus = "(:status not known: an HPACK entry from before the join)"
