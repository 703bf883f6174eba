// Package h2conn follows one HTTP/2 connection (RFC 9113) in both
// directions, fed its bytes in any split, and decodes the watches its
// streams carry: each stream's request and response HEADERS (HPACK, RFC
// 7541, one decoder per direction), and its DATA frames, whose data go to
// the same event mapping as HTTP/1.1 chunks (pkg/carrier), so that every
// watch event lists the DATA frames that carried it. It also reports what
// only the connection shows: SETTINGS, PING round trips, RST_STREAM and
// GOAWAY.
//
// Frames are parsed by golang.org/x/net/http2's Framer, one whole frame at
// a time from a buffer bounded by the largest frame HTTP/2 allows; header
// blocks are decoded by golang.org/x/net/http2/hpack. What kwatch adds is
// following a connection it does not take part in: both peers' settings,
// streams paired into exchanges, and DATA frames mapped to events.
package h2conn

import (
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/kwatch/kwatch/pkg/carrier"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// ClientPreface is the connection preface every HTTP/2 client sends first
// (RFC 9113 §3.4).
const ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Bounds on what one connection may make kwatch hold.
const (
	// DefaultMaxHeaderListBytes bounds the decoded header fields of one
	// header block, in bytes as RFC 9113 §6.5.2 counts them (name + value
	// + 32 per field): past it the fields are dropped and a problem
	// reported (an HPACK bomb). The block is still decoded, to keep the
	// dynamic table in step.
	DefaultMaxHeaderListBytes = 1 << 20
	// maxHeaderTableBytes bounds the HPACK dynamic table a peer may ask
	// the decoder to keep (SETTINGS_HEADER_TABLE_SIZE), in bytes: x/net's
	// decoder evicts by copying the table, so a huge table of tiny
	// entries costs CPU per field; real peers advertise 4 KiB.
	maxHeaderTableBytes = 64 << 10
	// DefaultMaxStreams bounds the streams followed at once on one
	// connection; later streams are counted, not followed.
	DefaultMaxStreams = 1024
	// maxFrameBytes is the largest frame payload HTTP/2 allows (RFC 9113
	// §4.2: 2^24-1), so the largest frame kwatch buffers.
	maxFrameBytes = 1<<24 - 1
	// freeFrameBytes is the frame size held without asking the shared
	// budget: HTTP/2's default SETTINGS_MAX_FRAME_SIZE, 16 KiB.
	freeFrameBytes = 16 << 10
)

// Options tune a Conn.
type Options struct {
	// Events bounds and tunes the watch events of each stream.
	Events carrier.Options
	// MaxHeaderListBytes bounds one header block's decoded fields
	// (DefaultMaxHeaderListBytes when 0).
	MaxHeaderListBytes int
	// Locate, if set, completes every Problem with where its bytes came
	// from (capture file and packet number).
	Locate func(*record.Problem)
	// ListFrames lists every frame of both directions in a note of kind
	// "h2-frame": type, stream, length, flags and offset (RFC 9113 §4.1).
	ListFrames bool
	// Omit, if set, says whether the filters leave out the stream a
	// request opens (exchange.Limits.Omit): its DATA frames are counted,
	// not framed into events.
	Omit func(*record.Request) bool
	// Joined follows a connection the capture joined in the middle (see
	// join.go): no preface is expected; each direction first finds where
	// its frames start (FrameScan), the bytes before being the rest of a
	// frame; neither side's SETTINGS were seen, so a setting is known
	// only once a SETTINGS frame after the join names it, and flow
	// control is not judged; a stream first seen by its DATA frames is
	// followed with a response inferred from them (record.Response.
	// Inferred), its resource named from its first event; header blocks
	// are decoded as far as HPACK allows (record.UnknownField).
	Joined bool
}

// Conn is the HTTP/2 state of one connection. Create it with New; it is not
// safe for concurrent use.
type Conn struct {
	rec     *record.Conn
	sink    record.Sink
	opt     Options
	client  *direction
	server  *direction
	streams map[uint32]*stream
	// untracked counts streams not followed (beyond DefaultMaxStreams).
	untracked int
	maxOpen   int // the most streams open at once
	last      time.Time
	pings     map[[8]byte]pingSent
	goaway    bool
	// goawayErr is the error code of a GOAWAY from the server other than
	// NO_ERROR ("" before one): the streams the connection's end cuts
	// short were cut by it (record.CutGOAWAY).
	goawayErr string
	// closedByClient: the client closed the connection (EndLocal,
	// EndClient); the streams it ends are ended by the client.
	closedByClient bool
	// What the connection's closing summary counts (healthLine).
	streamsSeen               int
	resets, goaways, pingsRTT int
	// pingsUntimed counts PINGs answered whose round trip is not known:
	// the PING or its ack was held while a joined direction's first
	// frame was found, and handed on at the time of that decision.
	pingsUntimed   int
	minRTT, maxRTT time.Duration
	lastPing       time.Time
	pingGaps       []time.Duration // between PINGs sent, the last 64
	stalls         int
	longestStall   time.Duration
	summarized     bool
	joinNoted      bool // the joined connection's note was emitted
	// firstOpened is the first stream a client's HEADERS opened since
	// the join (0: none yet), and gone the joined streams that ended: a
	// stream below firstOpened and not gone was opened before the join.
	firstOpened uint32
	gone        map[uint32]struct{}
}

type pingSent struct {
	t      time.Time
	client bool
	held   bool // its time is not known (direction.held)
}

// New returns a Conn that emits the records of connection rec to sink.
func New(rec *record.Conn, sink record.Sink, opt Options) *Conn {
	if opt.MaxHeaderListBytes <= 0 {
		opt.MaxHeaderListBytes = DefaultMaxHeaderListBytes
	}
	c := &Conn{rec: rec, sink: sink, opt: opt, streams: map[uint32]*stream{}, pings: map[[8]byte]pingSent{}}
	c.client = newDirection(c, false)
	c.server = newDirection(c, true)
	return c
}

// Upgraded starts stream 1 with req, the HTTP/1.1 request whose Upgrade: h2c
// the server accepted (RFC 7540 §3.2): its response comes on stream 1. The
// client's bytes still start with the connection preface.
func (c *Conn) Upgraded(req *record.Request, t time.Time) {
	r := *req
	r.Exchange = 1
	c.newStream(1, &r, t)
}

// newStream follows stream id, answering req (nil when not seen), with the
// flow-control windows both sides advertise for new streams.
func (c *Conn) newStream(id uint32, req *record.Request, t time.Time) *stream {
	st := &stream{id: id, req: req, start: t, recvWin: [2]int64{
		int64(c.client.setting(http2.SettingInitialWindowSize, defaultWindow)),
		int64(c.server.setting(http2.SettingInitialWindowSize, defaultWindow))}}
	c.streams[id] = st
	c.maxOpen = max(c.maxOpen, len(c.streams))
	c.streamsSeen++
	return st
}

// ClientData consumes bytes the client sent, starting with the preface
// (unless Options.Joined).
func (c *Conn) ClientData(p []byte, t time.Time) { c.last = t; c.noteJoined(t); c.client.feed(p, t) }

// ServerData consumes bytes the server sent.
func (c *Conn) ServerData(p []byte, t time.Time) { c.last = t; c.noteJoined(t); c.server.feed(p, t) }

// ClientRecord is ClientData for p, one whole record of the protocol that
// carries the connection (exchange.RecordFollower): a direction joined
// mid-connection finds its first frame by it sooner (FrameScan.RecordEnd).
func (c *Conn) ClientRecord(p []byte, t time.Time) { c.client.record(len(p)); c.ClientData(p, t) }

// ServerRecord is ClientRecord for the server's records.
func (c *Conn) ServerRecord(p []byte, t time.Time) { c.server.record(len(p)); c.ServerData(p, t) }

// record tells a direction that still looks for its first frame that its
// next n bytes are one record.
func (s *direction) record(n int) {
	if s.phase == phaseSync && s.joinAt < 0 && s.skip == 0 {
		s.scan.RecordEnd(len(s.sync) + n)
	}
}

// ClientGap reports n bytes the client sent that the capture lost.
func (c *Conn) ClientGap(n int64, t time.Time) { c.client.gap(n, t) }

// ServerGap reports n bytes the server sent that the capture lost.
func (c *Conn) ServerGap(n int64, t time.Time) { c.server.gap(n, t) }

// CloseClient ends the client's byte stream.
func (c *Conn) CloseClient(how exchange.Ending, t time.Time) { c.client.close(how, t) }

// CloseServer ends the server's byte stream: every stream still open ends
// with it.
func (c *Conn) CloseServer(how exchange.Ending, t time.Time) { c.server.close(how, t) }

func (c *Conn) emit(r record.Record) { c.sink.Emit(r) }

func (c *Conn) note(t time.Time, msg string) {
	c.emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "h2", Message: msg})
}

// noteFrame emits a note about one frame of type frame (RFC 9113 §6's
// name; record.ConnNote.Frame), of stream (0: the connection).
func (c *Conn) noteFrame(t time.Time, frame string, stream uint32, msg string) {
	c.emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "h2", Frame: frame, Stream: stream, Message: msg})
}

// noteStall emits a note of a flow-control stall that lasted d, of the
// window of stream (0: the connection's), at its end t.
func (c *Conn) noteStall(t time.Time, d time.Duration, stream uint32, msg string) {
	c.stall(d)
	c.emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "h2", Frame: "WINDOW_UPDATE", Stall: d, Stream: stream, Message: msg})
}

// problem completes p with its connection, time and location, and emits it.
func (c *Conn) problem(p *record.Problem) {
	c.locate(p)
	c.emit(p)
}

func (c *Conn) locate(p *record.Problem) {
	p.Conn = c.rec
	if p.Time.IsZero() {
		p.Time = c.last
	}
	if c.opt.Locate != nil {
		c.opt.Locate(p)
	}
}

// carrierEnv is where a stream's event records go.
type carrierEnv struct{ c *Conn }

func (e carrierEnv) Emit(r record.Record)      { e.c.emit(r) }
func (e carrierEnv) Problem(p *record.Problem) { e.c.problem(p) }
func (e carrierEnv) Locate(p *record.Problem)  { e.c.locate(p) }

// direction is one direction of the connection: a sequence of frames.
type direction struct {
	c        *Conn
	isServer bool
	off      int64 // offset of the next byte in this direction
	// phase is what the next bytes are read as, or that they are not
	// read (phase.go); it changes only in enter.
	phase   phase
	preface int // client: bytes of ClientPreface matched so far

	hdr      [9]byte
	nhdr     int
	payload  []byte     // the frame in progress, header included
	need     int        // its length, header included
	frameAt  int64      // offset of its header
	held     int64      // bytes of payload reserved from the budget
	skip     int        // payload bytes of a frame passed over (no budget for it)
	frd      frameBytes // what the Framer reads: the frame in progress
	fr       *http2.Framer
	dec      *hpack.Decoder
	fields   []hpack.HeaderField
	listSize int  // bytes of fields decoded in the block in progress
	tooBig   bool // the block in progress went past MaxHeaderListBytes
	// hpackIn and hpackOut count the header block bytes read and the
	// field bytes they decoded to; bomb is set once out passed
	// maxHPACKRatio times in (plus an allowance): an HPACK bomb.
	hpackIn, hpackOut int64
	bomb              bool
	frameErrs         int // frames that did not decode (the first few are reported)
	// The header block in progress (HEADERS, then CONTINUATION).
	blockStream uint32
	blockEnd    bool // END_STREAM on the HEADERS
	blockFrames int
	// hpackBroken: the HPACK decoder is out of step (hpackLost); not a
	// phase, since frames and header blocks are still followed.
	hpackBroken bool
	// settings this side advertised (RFC 9113 §6.5.2), by identifier.
	settings map[http2.SettingID]uint32
	// A direction joined mid-connection (Options.Joined): scan finds its
	// first frame in sync (syncHeld of it reserved from the budget); jh
	// decodes its header blocks, block (at most MaxHeaderListBytes)
	// holding the block in progress; unknown holds the fields of the
	// block that could not be decoded; blocks counts the header blocks
	// begun since the join.
	scan   FrameScan
	joinAt int // where frames start, when told (JoinAt); -1: scan finds it
	sync   []byte
	// syncSince is when the first byte held in sync came; fromSync is
	// set while bytes held since before the decision's time are read as
	// frames, at that time: what they carry is not dated by when it came
	// (a PING's round trip is not known).
	syncSince time.Time
	fromSync  bool
	syncHeld  int64
	jh        *joinedHPACK
	block     []byte
	blockHeld int64  // bytes of block reserved from the budget
	blockCut  string // the problem kind of a block not held whole, "" when held
	unknown   []record.UnknownField
	blocks    int
	passed    int // CONTINUATIONs passed over before the first HEADERS
	frames    int
	// Flow control (RFC 9113 §5.2, §6.9) of the data this side receives:
	// connWin is the connection window it advertised, as far as its
	// WINDOW_UPDATEs and the peer's DATA frames say; connStall when it
	// last reached 0 (zero time: not exhausted).
	connWin   int64
	connStall time.Time
}

func (c *Conn) stall(d time.Duration) {
	c.stalls++
	c.longestStall = max(c.longestStall, d)
}

// healthLine emits, once, what the connection as a whole showed: its
// streams and how many were open at once (the server allows
// SETTINGS_MAX_CONCURRENT_STREAMS), resets, GOAWAYs, PINGs with their
// interval and round trips, and flow-control stalls.
func (c *Conn) healthLine(t time.Time) {
	if c.summarized {
		return
	}
	c.summarized = true
	streams := fmt.Sprintf("%d streams", c.streamsSeen)
	if c.streamsSeen == 1 {
		streams = "1 stream"
	}
	if c.opt.Joined {
		streams += " since the join"
	}
	parts := []string{fmt.Sprintf("%s, at most %d open at once", streams, c.maxOpen)}
	if v, ok := c.server.settings[http2.SettingMaxConcurrentStreams]; ok {
		parts[0] += fmt.Sprintf(" (the server allows %d)", v)
	}
	parts = append(parts, fmt.Sprintf("%d RST_STREAM", c.resets), fmt.Sprintf("%d GOAWAY", c.goaways))
	if answered := c.pingsRTT + c.pingsUntimed; answered > 0 {
		p := phrase.Count(answered, "PING", "PINGs") + " answered"
		switch {
		case c.pingsRTT > 0 && c.minRTT == c.maxRTT:
			p += fmt.Sprintf(" (round trip %s", c.minRTT.Round(time.Microsecond))
		case c.pingsRTT > 0:
			p += fmt.Sprintf(" (round trip %s to %s", c.minRTT.Round(time.Microsecond), c.maxRTT.Round(time.Microsecond))
		}
		switch {
		case c.pingsUntimed > 0 && c.pingsRTT > 0:
			p += fmt.Sprintf("; %d not timed: held while the join was recognised)", c.pingsUntimed)
		case c.pingsUntimed > 0:
			p += " (round trip not known: held while the join was recognised)"
		default:
			p += ")"
		}
		if len(c.pingGaps) > 0 {
			gaps := slices.Clone(c.pingGaps)
			slices.Sort(gaps)
			p += fmt.Sprintf(", every %s (median)", gaps[len(gaps)/2].Round(time.Millisecond))
		}
		parts = append(parts, p)
	} else {
		parts = append(parts, "no PING")
	}
	if c.opt.Joined {
		parts = append(parts, "flow control not judged (joined mid-connection)")
	} else if c.stalls > 0 {
		parts = append(parts, fmt.Sprintf("%d flow-control stalls (longest %s)", c.stalls, c.longestStall.Round(time.Microsecond)))
	} else {
		parts = append(parts, "no flow-control stall")
	}
	c.note(t, "HTTP/2 connection: "+strings.Join(parts, " · "))
}

// defaultWindow is HTTP/2's initial flow-control window, in bytes (RFC 9113
// §6.9.2), for the connection and for every stream until SETTINGS change it.
const defaultWindow = 65535

// newFramer returns x/net/http2's Framer reading frames from r, up to
// maxFrameBytes of payload each. Its DataFrames are reused from frame to
// frame (SetReuseFrames): a frame is handled whole before the next is read,
// and none is kept.
func newFramer(r io.Reader) *http2.Framer {
	fr := http2.NewFramer(io.Discard, r)
	fr.SetMaxReadFrameSize(maxFrameBytes)
	fr.SetReuseFrames()
	return fr
}

func newDirection(c *Conn, isServer bool) *direction {
	s := &direction{c: c, isServer: isServer, settings: map[http2.SettingID]uint32{}, connWin: defaultWindow, joinAt: -1}
	s.fr = newFramer(&s.frd)
	s.dec = hpack.NewDecoder(4096, s.onField)
	s.dec.SetMaxStringLength(c.opt.MaxHeaderListBytes)
	switch {
	case c.opt.Joined:
		s.preface = len(ClientPreface)
		s.jh = newJoinedHPACK(c.opt.MaxHeaderListBytes)
		s.enter(phaseSync)
	case isServer:
		s.preface = len(ClientPreface)
		s.enter(phaseFrames) // only the client sends a preface
	}
	return s
}

func (s *direction) name() string {
	if s.isServer {
		return "server"
	}
	return "client"
}

func (s *direction) peer() *direction {
	if s.isServer {
		return s.c.client
	}
	return s.c.server
}

func (s *direction) problem(where string, off int64, kind, detail, hint string, warning bool, t time.Time) {
	s.c.problem(&record.Problem{Direction: s.name(), Where: where, Offset: off, Kind: kind,
		Detail: detail, Hint: hint, Warning: warning, Time: t})
}

// feed consumes bytes of this direction.
func (s *direction) feed(p []byte, t time.Time) {
	for len(p) > 0 && s.live() {
		if s.skip > 0 {
			k := min(len(p), s.skip)
			s.skip -= k
			s.off += int64(k)
			p = p[k:]
			continue
		}
		if s.phase == phaseSync {
			p = s.syncData(p, false, t)
			continue
		}
		if s.phase == phasePreface {
			n := 0
			for n < len(p) && s.preface < len(ClientPreface) {
				if p[n] != ClientPreface[s.preface] {
					s.problem("stream", s.off, KindPreface, fmt.Sprintf("byte %d is 0x%02x", s.preface, p[n]),
						"the connection is not HTTP/2 with prior knowledge; neither direction is decoded further", false, t)
					s.enter(phaseDead)
					s.peer().enter(phaseDead)
					return
				}
				s.preface++
				n++
			}
			if s.preface == len(ClientPreface) {
				s.enter(phaseFrames)
			}
			s.off += int64(n)
			p = p[n:]
			continue
		}
		if s.nhdr < 9 {
			if s.nhdr == 0 {
				s.frameAt = s.off
			}
			k := copy(s.hdr[s.nhdr:], p)
			s.nhdr += k
			s.off += int64(k)
			p = p[k:]
			if s.nhdr < 9 {
				return
			}
			length := int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			s.need = 9 + length
			s.payload = append(s.payload[:0], s.hdr[:]...)
			if max, known := s.peer().knownSetting(http2.SettingMaxFrameSize, 16384); known && uint32(length) > max {
				s.problem("stream", s.frameAt, KindFrameSize,
					fmt.Sprintf("a %s frame of %d bytes; the %s allowed %d (SETTINGS_MAX_FRAME_SIZE)",
						http2.FrameType(s.hdr[3]), length, s.peer().name(), max), "", true, t)
			}
			// A frame is held whole until it has come: its bytes count
			// against the budget shared with every connection.
			if length > freeFrameBytes {
				if !s.c.opt.Events.Budget.Reserve(int64(length)) {
					s.problem("stream", s.frameAt, event.KindBudget,
						fmt.Sprintf("a %s frame of %d bytes on stream %d does not fit in --max-buffered-bytes-total; skipped",
							http2.FrameType(s.hdr[3]), length, streamOf(s.hdr)), "raise --max-buffered-bytes-total, or lower --max-connections", false, t)
					s.skip, s.nhdr = length, 0
					switch ft := http2.FrameType(s.hdr[3]); ft {
					case http2.FrameHeaders, http2.FrameContinuation, http2.FramePushPromise:
						s.hpackLost(time.Time{}, "a header block fragment was skipped")
					case http2.FrameData:
						if st := s.c.streams[streamOf(s.hdr)]; st != nil && s.isServer {
							st.skipped(int64(length), t)
						}
					}
					continue
				}
				s.held = int64(length)
			}
		}
		if len(s.payload) == 9 && len(p) >= s.need-9 {
			// The whole payload is in p: the frame is read from there,
			// not copied first.
			k := s.need - 9
			s.frd = frameBytes{hdr: s.payload, payload: p[:k]}
			s.payload = s.payload[:0] // nothing of the frame is held
			s.off += int64(k)
			p = p[k:]
		} else {
			k := min(len(p), s.need-len(s.payload))
			s.payload = append(s.payload, p[:k]...)
			s.off += int64(k)
			p = p[k:]
			if len(s.payload) < s.need {
				return
			}
			s.frd = frameBytes{payload: s.payload}
		}
		s.nhdr = 0
		s.frame(t)
		s.c.opt.Events.Budget.Release(s.held)
		s.held = 0
		if cap(s.payload) > freeFrameBytes*4 {
			// Keep no buffer sized for one large frame: the frame's
			// copy, and the Framer's read buffer of that size.
			s.payload = nil
			s.fr = newFramer(&s.frd)
		}
	}
}

// frameBytes is an io.Reader of one frame held in two parts, its header
// and its payload (where the payload came, when it came whole), so that
// the two need not be joined into one slice first.
type frameBytes struct{ hdr, payload []byte }

// Read implements io.Reader: the header's bytes, then the payload's.
func (r *frameBytes) Read(p []byte) (int, error) {
	if len(r.hdr) > 0 {
		n := copy(p, r.hdr)
		r.hdr = r.hdr[n:]
		return n, nil
	}
	if len(r.payload) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.payload)
	r.payload = r.payload[n:]
	return n, nil
}

// setting returns the value this side advertised for id, or def.
func (s *direction) setting(id http2.SettingID, def uint32) uint32 {
	if v, ok := s.settings[id]; ok {
		return v
	}
	return def
}

// knownSetting returns the value this side advertised for id, or def,
// and whether it is known: on a connection joined mid-connection, a
// setting no SETTINGS frame since the join named may have been changed
// before it.
func (s *direction) knownSetting(id http2.SettingID, def uint32) (uint32, bool) {
	v, ok := s.settings[id]
	if !ok {
		v = def
	}
	return v, ok || !s.c.opt.Joined
}

// frame handles the complete frame in s.frd.
func (s *direction) frame(t time.Time) {
	s.frames++
	if s.c.opt.ListFrames {
		s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "h2-frame", Message: s.frameText()})
	}
	if s.passContinuation(t) {
		return
	}
	f, err := s.fr.ReadFrame()
	if err != nil {
		s.frameError(err, t)
		return
	}
	if s.phase == phaseBlock {
		if cf, ok := f.(*http2.ContinuationFrame); ok && cf.StreamID == s.blockStream {
			s.blockFrames++
			s.headerFragment(cf.HeaderBlockFragment(), cf.HeadersEnded(), t)
			return
		}
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		s.data(f, t)
	case *http2.HeadersFrame:
		s.blockStream, s.blockEnd, s.blockFrames = f.StreamID, f.StreamEnded(), 1
		s.enter(phaseBlock)
		s.fields, s.listSize, s.tooBig, s.unknown = s.fields[:0], 0, false, s.unknown[:0]
		s.blocks++
		s.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded(), t)
	case *http2.PushPromiseFrame:
		// The promised request's fields go through this side's HPACK
		// decoder too; kwatch does not follow pushed streams.
		s.blockStream, s.blockEnd, s.blockFrames = 0, false, 1
		s.enter(phaseBlock)
		s.fields, s.listSize, s.tooBig, s.unknown = s.fields[:0], 0, false, s.unknown[:0]
		s.blocks++
		s.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded(), t)
	case *http2.SettingsFrame:
		s.onSettings(f, t)
	case *http2.PingFrame:
		s.onPing(f, t)
	case *http2.RSTStreamFrame:
		if st := s.c.streams[f.StreamID]; st != nil {
			st.reset(s, f.ErrCode, t)
		}
		s.c.resets++
		s.c.noteFrame(t, "RST_STREAM", f.StreamID, fmt.Sprintf("RST_STREAM from the %s: stream %d, %s", s.name(), f.StreamID, f.ErrCode))
	case *http2.GoAwayFrame:
		s.c.goaway = true
		if s.isServer && f.ErrCode != http2.ErrCodeNo && s.c.goawayErr == "" {
			s.c.goawayErr = f.ErrCode.String()
		}
		s.c.goaways++
		msg := fmt.Sprintf("GOAWAY from the %s: last stream %d, %s", s.name(), f.LastStreamID, f.ErrCode)
		if d := f.DebugData(); len(d) > 0 {
			msg += fmt.Sprintf(" (%q)", phrase.Clip(string(d), 80))
		}
		s.c.noteFrame(t, "GOAWAY", 0, msg)
	case *http2.WindowUpdateFrame:
		s.windowUpdate(f.StreamID, int64(f.Increment), t)
	case *http2.PriorityFrame, *http2.UnknownFrame:
		// Counted in the frame total.
	}
}

// frameError reports a frame x/net/http2 refused. A frame whose header was
// read is skipped (the length in its header keeps the framing); HPACK state
// is not touched.
func (s *direction) frameError(err error, t time.Time) {
	detail := err.Error()
	if d := s.fr.ErrorDetail(); d != nil {
		detail += ": " + d.Error()
	}
	s.frameErrs++
	if s.frameErrs <= maxFrameErrors {
		hint := "the frame is skipped"
		if s.frameErrs == maxFrameErrors {
			hint += fmt.Sprintf("; later frames that do not decode in this direction are counted, not listed (%d reported)", maxFrameErrors)
		}
		s.problem("stream", s.frameAt, KindFrame, fmt.Sprintf("%s frame on stream %d: %s",
			http2.FrameType(s.hdr[3]), streamOf(s.hdr), detail), hint, false, t)
	}
	// The Framer remembers the last frame to check CONTINUATION order:
	// start it afresh.
	s.fr = newFramer(&s.frd)
	if s.phase == phaseBlock {
		s.enter(phaseFrames)
		s.hpackLost(t, "a header block was cut by a frame that did not decode")
	}
}

// frameText describes the frame in progress from its header: "server
// DATA stream 1, 16384 bytes, flags END_STREAM, @1234".
func (s *direction) frameText() string {
	h := s.hdr
	ft := http2.FrameType(h[3])
	flags := http2.Flags(h[4])
	var names []string
	for _, f := range []struct {
		flag http2.Flags
		name string
	}{{http2.FlagDataEndStream, "END_STREAM"}, {http2.FlagHeadersEndHeaders, "END_HEADERS"}, {http2.FlagDataPadded, "PADDED"}, {http2.FlagHeadersPriority, "PRIORITY"}} {
		switch {
		case flags&f.flag == 0:
		case f.flag == http2.FlagDataEndStream && (ft == http2.FrameSettings || ft == http2.FramePing):
			names = append(names, "ACK")
		case f.flag == http2.FlagHeadersEndHeaders && ft != http2.FrameHeaders && ft != http2.FrameContinuation && ft != http2.FramePushPromise:
		case f.flag == http2.FlagHeadersPriority && ft != http2.FrameHeaders:
		case f.flag == http2.FlagDataPadded && ft != http2.FrameData && ft != http2.FrameHeaders && ft != http2.FramePushPromise:
		default:
			names = append(names, f.name)
		}
	}
	text := fmt.Sprintf("%s %s stream %d, %d bytes", s.name(), ft, streamOf(h), s.need-9)
	if len(names) > 0 {
		text += ", flags " + strings.Join(names, "|")
	}
	return text + fmt.Sprintf(", @%d", s.frameAt)
}

func streamOf(h [9]byte) uint32 {
	return (uint32(h[5])<<24 | uint32(h[6])<<16 | uint32(h[7])<<8 | uint32(h[8])) & (1<<31 - 1)
}

// HPACK may decode small blocks to large field lists by referring to its
// table again and again (an HPACK bomb): a direction whose fields come to
// more than maxHPACKRatio times its header block bytes, past an allowance
// of hpackAllowance, is a bomb, and its later header blocks are decoded
// only to keep the table in step (their streams are not followed). Real
// clients, indexing repeated headers, stay under 20.
const (
	maxHPACKRatio  = 64
	hpackAllowance = 1 << 20
)

// onField collects one decoded header field, within MaxHeaderListBytes.
func (s *direction) onField(f hpack.HeaderField) {
	s.hpackOut += int64(f.Size())
	s.listSize += int(f.Size())
	if s.listSize > s.c.opt.MaxHeaderListBytes {
		s.tooBig = true
		return
	}
	s.fields = append(s.fields, f)
}

// headerFragment decodes a header block fragment as it comes (nothing of
// the block is buffered but the decoder's current field), and handles the
// fields when the block ends.
func (s *direction) headerFragment(p []byte, end bool, t time.Time) {
	if s.jh != nil {
		if s.joinedFragment(p, end, t) {
			s.blockDone(t)
		}
		return
	}
	// The direction is in phaseBlock: END_HEADERS ends it.
	if s.hpackBroken {
		if end {
			s.enter(phaseFrames)
		}
		return
	}
	s.hpackIn += int64(len(p))
	if _, err := s.dec.Write(p); err != nil {
		s.enter(phaseFrames)
		s.hpackLost(t, err.Error())
		return
	}
	if !end {
		return
	}
	s.enter(phaseFrames)
	if err := s.dec.Close(); err != nil {
		s.hpackLost(t, err.Error())
		return
	}
	s.blockDone(t)
}

// blockDone handles the fields of a header block decoded whole.
func (s *direction) blockDone(t time.Time) {
	if !s.bomb && s.hpackOut > hpackAllowance+maxHPACKRatio*s.hpackIn {
		s.bomb = true
		s.problem("stream", s.frameAt, KindHPACKBomb,
			fmt.Sprintf("%d bytes of header blocks decoded to %d bytes of fields, more than %d times as many", s.hpackIn, s.hpackOut, maxHPACKRatio),
			"later header blocks in this direction are decoded only to keep HPACK in step; their streams are not followed", false, t)
	}
	if s.bomb {
		return
	}
	if s.tooBig {
		// A header list cut short names no request or response that can
		// be trusted: the stream is not followed.
		s.problem("stream", s.frameAt, KindHeaderList,
			fmt.Sprintf("stream %d: %d bytes of header fields (RFC 9113 §6.5.2 size), more than %d; the fields are dropped and the stream is not followed",
				s.blockStream, s.listSize, s.c.opt.MaxHeaderListBytes), "", false, t)
		return
	}
	if s.blockStream == 0 {
		return // a PUSH_PROMISE
	}
	if s.isServer {
		s.c.responseHeaders(s.blockStream, s.fields, s.unknown, s.blockEnd, t)
	} else {
		s.c.requestHeaders(s.blockStream, s.fields, s.unknown, s.blockEnd, t)
	}
}

// hpackLost reports that this direction's header blocks cannot be decoded
// any more: the dynamic table is out of step (RFC 7541 §2.3.2).
func (s *direction) hpackLost(t time.Time, why string) {
	if s.jh != nil {
		// Joined mid-connection: what the table holds is unknown
		// again, as at the join; decoding goes on from there.
		s.jh.forget()
		s.blockDoneJoined()
		s.problem("stream", s.frameAt, KindHPACK, why,
			"the entries added since the join are forgotten: from here on every reference to the dynamic table is unknown, as those from before the join", false, t)
		return
	}
	s.problem("stream", s.frameAt, KindHPACK, why,
		"the header fields of later streams in this direction cannot be decoded; their frames are still followed", false, t)
	s.dec = hpack.NewDecoder(4096, s.onField)
	s.dec.SetMaxStringLength(s.c.opt.MaxHeaderListBytes)
	s.hpackBroken = true
}

func (s *direction) onSettings(f *http2.SettingsFrame, t time.Time) {
	if f.IsAck() {
		return
	}
	var parts []string
	_ = f.ForeachSetting(func(st http2.Setting) error {
		if st.ID == http2.SettingInitialWindowSize {
			// RFC 9113 §6.9.2: the change applies to every open stream.
			delta := int64(st.Val) - int64(s.setting(http2.SettingInitialWindowSize, defaultWindow))
			for _, str := range s.c.streams {
				str.recvWin[s.index()] += delta
			}
		}
		s.settings[st.ID] = st.Val
		parts = append(parts, fmt.Sprintf("%s=%d", settingName(st.ID), st.Val))
		if st.ID == http2.SettingHeaderTableSize {
			// The peer's encoder may use up to this much of the table
			// this side decodes with... of the table the peer decodes.
			s.peer().dec.SetAllowedMaxDynamicTableSize(min(st.Val, maxHeaderTableBytes))
		}
		return nil
	})
	if len(parts) == 0 {
		parts = append(parts, "none (defaults)")
	}
	s.c.noteFrame(t, "SETTINGS", 0, fmt.Sprintf("SETTINGS from the %s: %s", s.name(), strings.Join(parts, " ")))
}

func settingName(id http2.SettingID) string {
	n := id.String()
	if strings.HasPrefix(n, "UNKNOWN_SETTING_") {
		return "0x" + strconv.FormatUint(uint64(id), 16)
	}
	return n
}

func (s *direction) onPing(f *http2.PingFrame, t time.Time) {
	if !f.IsAck() {
		if !s.c.lastPing.IsZero() && len(s.c.pingGaps) < 64 {
			s.c.pingGaps = append(s.c.pingGaps, t.Sub(s.c.lastPing))
		}
		s.c.lastPing = t
		s.c.pings[f.Data] = pingSent{t: t, client: !s.isServer, held: s.fromSync}
		if len(s.c.pings) > 64 { // unanswered pings: keep the newest
			var oldest [8]byte
			var ot time.Time
			for k, v := range s.c.pings {
				if ot.IsZero() || v.t.Before(ot) {
					oldest, ot = k, v.t
				}
			}
			delete(s.c.pings, oldest)
		}
		return
	}
	if sent, ok := s.c.pings[f.Data]; ok {
		delete(s.c.pings, f.Data)
		if sent.held || s.fromSync {
			s.c.pingsUntimed++
			s.c.noteFrame(t, "PING", 0, fmt.Sprintf("PING from the %s answered (round trip not known: the PING or its ack came while the connection joined mid-connection was still being recognised)", s.peer().name()))
			return
		}
		rtt := t.Sub(sent.t)
		if s.c.pingsRTT == 0 || rtt < s.c.minRTT {
			s.c.minRTT = rtt
		}
		s.c.maxRTT = max(s.c.maxRTT, rtt)
		s.c.pingsRTT++
		s.c.noteFrame(t, "PING", 0, fmt.Sprintf("PING from the %s answered after %s", s.peer().name(), rtt.Round(time.Microsecond)))
	}
}

// data handles a DATA frame: its data are body bytes of the stream, and
// its length counts against the receiver's flow-control windows.
func (s *direction) data(f *http2.DataFrame, t time.Time) {
	r := s.peer()
	n := int64(f.Header().Length)
	st := s.c.streams[f.StreamID]
	if st == nil && s.c.opt.Joined && s.isServer {
		st = s.c.joinStream(f.StreamID, t)
	}
	if n > 0 && !s.c.opt.Joined { // a joined connection's windows are not known
		r.connWin -= n
		if r.connWin < 0 {
			s.problem("stream", s.frameAt, KindFlowControl, fmt.Sprintf("a DATA frame of %d bytes on stream %d is %d bytes past the connection window the %s advertised",
				n, f.StreamID, -r.connWin, r.name()), "the receiver should have answered FLOW_CONTROL_ERROR (RFC 9113 §6.9.1)", true, t)
			r.connWin = 0
		}
		if r.connWin == 0 && r.connStall.IsZero() {
			r.connStall = t
		}
		if st != nil {
			i := r.index()
			st.recvWin[i] -= n
			if st.recvWin[i] < 0 {
				s.problem("stream", s.frameAt, KindFlowControl, fmt.Sprintf("a DATA frame of %d bytes on stream %d is %d bytes past the stream's window the %s advertised",
					n, f.StreamID, -st.recvWin[i], r.name()), "the receiver should have answered FLOW_CONTROL_ERROR (RFC 9113 §6.9.1)", true, t)
				st.recvWin[i] = 0
			}
			if st.recvWin[i] == 0 && st.stall[i].IsZero() {
				st.stall[i] = t
			}
		}
	}
	if st == nil {
		return
	}
	st.data(s, f, s.frameAt, t)
}

func (s *direction) index() int {
	if s.isServer {
		return 1
	}
	return 0
}

// windowUpdate handles a WINDOW_UPDATE this side sent: it opens its
// window again. A window that had reached 0 held the peer's data back
// (a flow-control stall, RFC 9113 §5.2): how long is said in a note.
func (s *direction) windowUpdate(id uint32, inc int64, t time.Time) {
	if s.c.opt.Joined {
		return // the windows before the join are not known
	}
	if id == 0 {
		s.connWin += inc
		if !s.connStall.IsZero() && s.connWin > 0 {
			s.c.noteStall(t, t.Sub(s.connStall), 0, fmt.Sprintf("flow control: the %s's connection window was at 0 for %s, holding back the %s's DATA; WINDOW_UPDATE +%d",
				s.name(), t.Sub(s.connStall).Round(time.Microsecond), s.peer().name(), inc))
			s.connStall = time.Time{}
		}
		return
	}
	st := s.c.streams[id]
	if st == nil {
		return
	}
	i := s.index()
	st.recvWin[i] += inc
	if !st.stall[i].IsZero() && st.recvWin[i] > 0 {
		s.c.noteStall(t, t.Sub(st.stall[i]), id, fmt.Sprintf("flow control: stream %d's window at the %s was at 0 for %s, holding back the %s's DATA; WINDOW_UPDATE +%d",
			id, s.name(), t.Sub(st.stall[i]).Round(time.Microsecond), s.peer().name(), inc))
		st.stall[i] = time.Time{}
	}
}

// gap handles n lost bytes: frame boundaries in this direction cannot be
// found again, so the rest of it is not decoded.
func (s *direction) gap(n int64, t time.Time) {
	switch {
	case s.phase == phaseSync && len(s.sync) == 0:
		// Nothing came yet: the direction starts after the lost bytes,
		// its first frame still to be found.
		s.off += n
		return
	case s.phase == phaseSync && n > 0:
		s.syncData(nil, true, t) // the bytes before the gap are all there is to decide on
	}
	if !s.live() || n <= 0 {
		s.off += n
		return
	}
	s.problem("stream", s.off, exchange.KindMissing, fmt.Sprintf("%d bytes missing at offset %d; HTTP/2 frames cannot be found again after them, so the rest of the %s's bytes are not decoded", n, s.off, s.name()),
		"capture with a larger buffer (tcpdump -B 65536 --immediate-mode)", false, t)
	s.off += n
	s.enter(phaseDead)
	s.c.opt.Events.Budget.Release(s.held)
	s.held = 0
	if s.isServer {
		s.c.endStreams("not decoded further", "bytes missing from the capture", nil, t)
	}
}

// close ends this direction's byte stream.
func (s *direction) close(how exchange.Ending, t time.Time) {
	if s.phase == phaseClosed {
		return
	}
	if s.phase == phaseSync {
		s.syncData(nil, true, t)
	}
	was := s.phase
	s.enter(phaseClosed)
	s.c.opt.Events.Budget.Release(s.held)
	s.held = 0
	if n := s.frameErrs - maxFrameErrors; n > 0 {
		s.problem("stream", -1, KindFrame, fmt.Sprintf("%d more frames from the %s did not decode (not listed)", n, s.name()), "", false, t)
	}
	if was != phaseDead && (s.nhdr > 0 || len(s.payload) > 0 && len(s.payload) < s.need) {
		s.problem("stream", s.frameAt, KindFrameCut, fmt.Sprintf("%d bytes of a frame, then the %s's stream ended", s.off-s.frameAt, s.name()), "", false, t)
	}
	if s.isServer {
		// The client ending the connection ends its streams itself.
		s.c.closedByClient = how == exchange.EndLocal || how == exchange.EndClient
		cut := exchange.ConnCut(how)
		if s.c.goawayErr != "" {
			// The server said why first: GOAWAY with an error code.
			cut = &record.Cut{By: record.CutGOAWAY, Code: s.c.goawayErr}
		}
		text, detail := endText(how)
		s.c.endStreams(text, detail, cut, t)
		// The connection's summary note comes after its streams' ends.
		s.c.healthLine(t)
		if s.c.untracked > 0 {
			s.c.note(t, fmt.Sprintf("%d streams were not followed: more than %d open at once (at most %d were)", s.c.untracked, DefaultMaxStreams, s.c.maxOpen))
		}
	}
}

func endText(how exchange.Ending) (string, string) {
	switch how {
	case exchange.EndRST, exchange.EndClientRST:
		return "reset before the end of the stream", "the connection was reset before END_STREAM"
	case exchange.EndCapture:
		return "capture ended mid-stream", ""
	case exchange.EndDetach:
		return exchange.Detached, ""
	case exchange.EndLocal:
		return "closed by the client", "kwatch closed the connection"
	case exchange.EndClient:
		return "closed by the client", "the client closed the connection before END_STREAM"
	case exchange.EndDropped:
		return "not decoded further", "no longer followed: too many connections open at once"
	}
	return "closed before the end of the stream", "the connection closed before END_STREAM"
}

// Problem kinds of HTTP/2 connections; README.md lists them.
const (
	KindPreface = "not an HTTP/2 connection preface"
	// maxFrameErrors bounds the frames that did not decode reported one by
	// one per direction; the rest are counted (a flood of bad frames
	// would otherwise print a line per 9 bytes).
	maxFrameErrors = 8
	KindFrame      = "HTTP/2 frame does not decode"
	KindFrameSize  = "HTTP/2 frame larger than allowed"
	KindFrameCut   = "HTTP/2 frame cut short"
	KindHPACK      = "HPACK decoding failed"
	KindHeaderList = "header list larger than the limit"
	KindHPACKBomb  = "HPACK decodes to far more than it carries"
	KindStreams    = "too many HTTP/2 streams"
	KindNoStatus   = "HTTP/2 response without :status"
	// KindFlowControl (a warning): DATA past the window its receiver
	// advertised.
	KindFlowControl = "HTTP/2 flow-control window exceeded"
)

// stream is one HTTP/2 stream: an exchange.
type stream struct {
	id uint32
	// resetByClient: the client ended the stream with RST_STREAM.
	resetByClient bool
	// cut: how the server cut the stream short, when it did
	// (record.End.Cut).
	cut      *record.Cut
	req      *record.Request
	resp     *record.Response
	ev       *carrier.Body
	frames   int   // DATA frames of the response
	dataLen  int64 // their data bytes
	bytes    int64 // their frame bytes, headers included
	start    time.Time
	status   []byte // the body of a response that is not 2xx
	keep     bool
	trailers []string
	ended    bool
	// recvWin is the stream's flow-control window as the client [0] and
	// the server [1] advertised it for what they receive; stall when it
	// last reached 0.
	recvWin [2]int64
	stall   [2]time.Time
	// On a connection joined mid-connection: joined, a stream first seen
	// by its DATA frames (its HEADERS came before the join), passed and
	// passedBytes counting the frames (and their data) passed over before
	// one started a watch event; pend, a response held until its first
	// DATA frame says what its body is (its :status or Content-Type was
	// an unknown field); named, the note naming its resource was emitted.
	joined      bool
	passed      int
	passedBytes int64
	pend        *record.Response
	named       bool
}

// requestHeaders starts stream id with the client's request.
func (c *Conn) requestHeaders(id uint32, fields []hpack.HeaderField, unknown []record.UnknownField, end bool, t time.Time) {
	if st := c.streams[id]; st != nil {
		return // trailers of a request body
	}
	if c.opt.Joined && c.firstOpened == 0 {
		c.firstOpened = id
	}
	if len(c.streams) >= DefaultMaxStreams {
		if c.untracked == 0 {
			c.client.problem("stream", c.client.frameAt, KindStreams,
				fmt.Sprintf("more than %d streams open at once; later ones are counted, not followed", DefaultMaxStreams), "", true, t)
		}
		c.untracked++
		return
	}
	req := &record.Request{Conn: c.rec, Exchange: int(id), Time: t, Proto: "HTTP/2.0", Header: map[string][]string{}}
	for _, f := range fields {
		switch f.Name {
		case ":method":
			req.Method = f.Value
		case ":path":
			req.Target = exchange.RedactUserinfo(f.Value)
		case ":authority":
			req.Header["Host"] = append(req.Header["Host"], f.Value)
		default:
			if !strings.HasPrefix(f.Name, ":") {
				k := textproto.CanonicalMIMEHeaderKey(f.Name)
				req.Header[k] = append(req.Header[k], f.Value)
			}
		}
	}
	exchange.RedactCredentials(req.Header)
	if len(unknown) > 0 {
		req.Unknown = append([]record.UnknownField(nil), unknown...)
	}
	req.Watch = exchange.IsWatchRequest(req.Target)
	req.Secrets = event.SecretsPath(req.Target)
	req.OtherResource = event.OtherResourcePath(req.Target)
	if req.Watch {
		req.StartsWithState, req.InitialState = exchange.WatchState(req.Target)
	}
	req.Omitted = c.opt.Omit != nil && c.opt.Omit(req)
	c.newStream(id, req, t)
	c.emit(req)
}

// responseHeaders handles the server's HEADERS on stream id: the response,
// or its trailers. unknown lists the block's fields that could not be
// decoded (a connection joined mid-connection).
func (c *Conn) responseHeaders(id uint32, fields []hpack.HeaderField, unknown []record.UnknownField, end bool, t time.Time) {
	st := c.streams[id]
	if st == nil {
		// A response whose request was not seen (lost bytes, a capture
		// that starts after it, a client direction whose HPACK broke):
		// followed on its own, as HTTP/1.1 does.
		if len(c.streams) >= DefaultMaxStreams {
			c.untracked++
			return
		}
		st = c.newStream(id, nil, t)
	}
	c.emitPending(st) // HEADERS again before any DATA: trailers
	status := -1
	for _, f := range fields {
		if f.Name == ":status" {
			status, _ = strconv.Atoi(f.Value)
		}
	}
	if st.resp != nil && st.resp.StatusCode >= 200 || st.joined && st.resp == nil && status == -1 {
		// Trailers (RFC 9113 §8.1), of a response seen or of one that
		// began before the join.
		for _, f := range fields {
			if len(st.trailers) < 32 {
				st.trailers = append(st.trailers, exchange.RedactTrailerLine(f.Name+": "+f.Value))
			}
		}
		if end {
			c.endStream(st, "end of stream", "", true, t)
		}
		return
	}
	hdr := textproto.MIMEHeader{}
	code := status
	for _, f := range fields {
		if !strings.HasPrefix(f.Name, ":") {
			k := textproto.CanonicalMIMEHeaderKey(f.Name)
			hdr[k] = append(hdr[k], f.Value)
		}
	}
	exchange.RedactCredentials(hdr)
	resp := &record.Response{Conn: c.rec, Exchange: int(id), Time: t, Proto: "HTTP/2.0", StatusCode: code,
		Reason: httpReason(code), Header: hdr, Request: st.req, ContentType: hdr.Get("Content-Type"), Framing: "http2"}
	if len(unknown) > 0 {
		resp.Unknown = append([]record.UnknownField(nil), unknown...)
	}
	if cl := hdr.Get("Content-Length"); cl != "" {
		resp.ContentLength, _ = strconv.ParseInt(cl, 10, 64)
	}
	if code == -1 && len(unknown) > 0 {
		// :status is one of the fields not known.
		resp.StatusCode, resp.Reason = 0, unknownStatus
		code = 0
	}
	if code != 0 && (code < 100 || code > 999) {
		c.server.problem("stream", c.server.frameAt, KindNoStatus, fmt.Sprintf("stream %d: the response has no valid :status (RFC 9113 §8.3.2)", id),
			"the stream is not followed", false, t)
		c.endStream(st, "not decoded further", "no :status", false, t)
		return
	}
	if code >= 100 && code < 200 {
		st.resp = resp
		c.emit(resp)
		return // an interim response; the final one follows
	}
	if !end && len(unknown) > 0 && (code == 0 || code >= 200 && code < 300 && resp.ContentType == "") {
		// What the body is was among the fields not known: its first
		// DATA frame will say (inferPending).
		st.pend = resp
		return
	}
	st.resp = resp
	if code >= 200 && code < 300 {
		resp.ContentEncoding = exchange.ContentCoding(hdr.Values("Content-Encoding"))
		req := st.req
		if c.opt.Joined && req != nil && req.Target == "" && (req.Method == "" || req.Method == "GET") {
			// Its path was not known: judged as if not seen. A known
			// method other than GET (a DELETE, a POST) is no watch.
			req = nil
		}
		// Every stream can stream: a response whose request was not
		// seen may be a watch, which its first event confirms.
		f, watch, tentative := exchange.WatchOf(req, resp.ContentType, true)
		if watch && exchange.UnsupportedCoding(resp.ContentEncoding) {
			c.server.problem("stream", c.server.frameAt, exchange.KindContentCoded,
				fmt.Sprintf("stream %d: %s", id, exchange.UnsupportedCodingDetail(resp.ContentEncoding, "DATA frames")), "", true, t)
			watch = false
		}
		resp.Watch = watch
		if resp.Watch {
			resp.Format = f.String()
		}
		if resp.Watch && !c.omitted(req) {
			var env carrierEnvAny = carrierEnv{c}
			if c.opt.Joined && req == nil {
				env = joinedEnv{c, st}
			}
			st.ev = exchange.WatchBody{Format: f, Tentative: tentative, Initial: !tentative && req.InitialState,
				Secrets: req != nil && req.Secrets, OtherResource: req != nil && req.OtherResource, Coding: resp.ContentEncoding}.
				Start(env, c.opt.Events, attachFrames, c.rec, int(id), "server", t)
		}
	} else if code >= 300 {
		st.keep = true
	}
	c.emitResponse(st, resp)
	if end {
		c.endStream(st, "end of stream", "", true, t)
	}
}

// omitted reports whether the filters leave out the stream req opens
// (record.Request.Omitted; req nil: not seen, so not judged).
func (c *Conn) omitted(req *record.Request) bool {
	return req != nil && req.Omitted
}

// httpReason is the reason phrase HTTP/1.1 would show: HTTP/2 sends none.
func httpReason(code int) string { return http.StatusText(code) }

// data feeds a DATA frame of the response on st.
func (st *stream) data(s *direction, f *http2.DataFrame, at int64, t time.Time) {
	if s != s.c.server || st.ended {
		return // a request body, or DATA after the end
	}
	d := f.Data()
	switch {
	case st.pend != nil:
		s.c.inferPending(st, d, t)
	case st.joined && st.resp == nil:
		s.c.inferJoined(st, d, t)
	case st.resp == nil && st.req != nil && st.req.Watch && s.hpackBroken:
		s.c.inferResponse(st, d, t)
	}
	length := int64(f.Header().Length)
	rf := record.Frame{Stream: st.id, Index: st.frames, Length: length, EndStream: f.StreamEnded(), Offset: at, Header: s.hdr}
	if f.Flags.Has(http2.FlagDataPadded) {
		rf.Padded = true
		rf.Padding = length - int64(len(d)) - 1 // the Pad Length field is not padding
	}
	st.frames++
	st.dataLen += int64(len(d))
	st.bytes += 9 + length
	if st.keep && len(st.status) < exchange.MaxStatusBody {
		st.status = append(st.status, d[:min(len(d), exchange.MaxStatusBody-len(st.status))]...)
	}
	if st.ev != nil {
		st.ev.SetTime(t)
		st.ev.Start(carrier.Carrier{Index: rf.Index, Size: int64(len(d)), Meta: rf})
		st.ev.Write(d)
	}
	if f.StreamEnded() {
		s.c.endStream(st, "end of stream", "", true, t)
	}
}

// inferResponse stands in for the response of a watch whose response
// header block could not be decoded (HPACK out of step), so that its DATA
// frames still give their events: the media type the request asked for
// first, gzip when the data start with gzip's magic bytes. The first event
// confirms it is a watch (as for a capture that starts mid-response).
func (c *Conn) inferResponse(st *stream, first []byte, t time.Time) {
	accept := ""
	if vs := st.req.Header["Accept"]; len(vs) > 0 {
		accept = strings.TrimSpace(strings.Split(vs[0], ",")[0])
	}
	f, ok := event.FormatForContentType(accept)
	if !ok {
		f, accept = event.FormatJSON, event.MediaJSON
	}
	resp := &record.Response{Conn: c.rec, Exchange: int(st.id), Time: t, Proto: "HTTP/2.0", StatusCode: 200,
		Reason: "(header block not decoded)", Header: textproto.MIMEHeader{}, Request: st.req, ContentType: accept,
		Framing: "http2", Watch: true, Format: f.String(), Inferred: true}
	if len(first) >= 2 && first[0] == 0x1f && first[1] == 0x8b {
		resp.ContentEncoding = "gzip"
	}
	st.resp = resp
	if !c.omitted(st.req) {
		st.ev = exchange.WatchBody{Format: f, Tentative: true, Initial: st.req.InitialState, Secrets: st.req.Secrets, OtherResource: st.req.OtherResource,
			Coding: resp.ContentEncoding}.Start(carrierEnv{c}, c.opt.Events, attachFrames, c.rec, int(st.id), "server", t)
	}
	c.emit(resp)
}

// skipped counts a DATA frame of the response that was not read (no room
// in the budget): its events cannot be whole, so the framing starts again.
func (st *stream) skipped(n int64, t time.Time) {
	st.frames++
	st.bytes += 9 + n
	if st.ev != nil {
		st.ev.SetTime(t)
		st.ev.LostFraming(n)
	}
}

// attachFrames lists an event's DATA frames as record.Frames.
func attachFrames(ev *record.Event, carried []carrier.Carried) {
	out := make([]record.Frame, 0, len(carried))
	for _, cd := range carried {
		f := cd.Carrier.Meta.(record.Frame)
		f.Events, f.Inflated = cd.Carrier.Events, cd.Carrier.Inflated
		f.Bytes, f.Ordinal, f.DataAt = cd.Bytes, cd.Ordinal, cd.Carrier.Data
		out = append(out, f)
	}
	ev.Frames = out
}

// reset ends st with RST_STREAM from s.
func (st *stream) reset(s *direction, code http2.ErrCode, t time.Time) {
	if !s.isServer && st.ev != nil {
		st.ev.ClosedByClient(false)
	}
	st.resetByClient = !s.isServer
	if s.isServer && code != http2.ErrCodeNo {
		st.cut = &record.Cut{By: record.CutRSTStream, Code: code.String()}
	}
	s.c.endStream(st, "reset by RST_STREAM", fmt.Sprintf("%s from the %s", code, s.name()), false, t)
}

// endStream emits the End record of st and forgets it.
func (c *Conn) endStream(st *stream, how, detail string, clean bool, t time.Time) {
	if st.ended {
		return
	}
	st.ended = true
	delete(c.streams, st.id)
	if st.joined {
		c.forgetJoined(st.id)
	}
	c.emitPending(st)
	if st.resp == nil && st.joined {
		c.noteStream(t, st.id, nil, fmt.Sprintf("stream %d: %s (%d data bytes) of a response whose HEADERS were not captured, none starting a watch event; not decoded (%s)",
			st.id, phrase.Count(st.frames, "DATA frame", "DATA frames"), st.dataLen, how))
		return
	}
	if st.resp == nil {
		if st.req != nil {
			// The request was shown: say how its stream ended before
			// any response (a reset: rapid reset's shape), which also
			// lets the printer forget the exchange.
			d := "before any response"
			if detail != "" {
				d = detail + ", " + d
			}
			c.emit(&record.End{Conn: c.rec, Exchange: int(st.id), Time: t, How: how, Detail: d, ByClient: c.closedByClient, Duration: t.Sub(st.start)})
		}
		return
	}
	e := &record.End{Conn: c.rec, Exchange: int(st.id), Time: t, How: how, Detail: detail, Clean: clean,
		ByClient: c.closedByClient || st.resetByClient,
		Trailers: st.trailers, Frames: st.frames, Bytes: st.bytes, Data: st.dataLen, Duration: t.Sub(st.start)}
	exchange.EndBody(e, st.ev, t)
	if st.keep {
		exchange.EndStatus(e, st.resp.ContentType, st.status)
	}
	if !clean {
		e.Cut = st.cut
	}
	c.emit(e)
	if p := exchange.CutProblem(e); p != nil {
		c.problem(p)
	}
}

// endStreams ends every stream still open, in stream order, as cut by the
// server when cut is not nil (the connection's end, see record.Cut).
func (c *Conn) endStreams(how, detail string, cut *record.Cut, t time.Time) {
	ids := make([]uint32, 0, len(c.streams))
	for id := range c.streams {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		st := c.streams[id]
		st.cut = cut
		c.endStream(st, how, detail, false, t)
	}
}
