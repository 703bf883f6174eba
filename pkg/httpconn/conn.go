// Package httpconn follows the bytes of one HTTP/1.1 connection (RFC 9112):
// it parses the requests the client sends and the responses the server sends,
// pairs them into exchanges, frames each body (Content-Length, chunked coding
// or connection close, RFC 9112 §6.3), decodes chunked bodies with pkg/chunk
// and splits watch bodies into watch events with pkg/event. Everything it
// finds becomes a record sent to a record.Sink, in wire order; a record is
// never changed after it was sent (the sink may keep it, or hand it to
// another goroutine).
//
// It is one of the followers pkg/wire hands a connection to, once the
// connection's first bytes show HTTP/1.1 (or a capture that starts inside
// a response); it knows no other protocol: a 101 to h2c is handed back
// through Options.Upgrade. Input arrives in any split; the parser keeps
// only bounded state.
package httpconn

import (
	"fmt"
	"net/textproto"
	"time"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
)

// DefaultMaxPending bounds how many requests may wait for their responses on
// one connection (HTTP/1.1 pipelining).
const DefaultMaxPending = 64

// Upgrader takes over a connection whose server answered an upgrade to h2c
// with 101 Switching Protocols (RFC 7540 §3.2). Upgrade gets req, the
// request that asked for it (nil when not kept), and returns the follower
// of the rest of the connection, which then gets the bytes of both
// directions that follow the 101 response in the calls made so far; the
// caller feeds it everything after (pkg/wire).
type Upgrader interface {
	Upgrade(req *record.Request, t time.Time) exchange.Follower
}

// Conn is the HTTP/1.1 state of one connection. Create it with New; it
// implements exchange.Follower. Every byte fed to it is taken as HTTP/1.1:
// pkg/wire decides which connections are.
type Conn struct {
	rec  *record.Conn
	sink record.Sink
	opt  *exchange.Limits
	up   Upgrader // nil: a 101 to h2c ends what is decoded
	// client and server are the two directions, held in the Conn (one
	// allocation per connection, not three).
	client, server direction
	pending        []*record.Request
	// unqueued counts requests not kept in pending because it was full;
	// the oldest of them is exchange number unqueuedFirst.
	unqueued      int
	unqueuedFirst int
	// unqueuedSecrets: a request not kept in pending may watch Secrets
	// (record.Request.Secrets); the answers to unkept requests are then
	// all redacted as Secrets (fails closed).
	unqueuedSecrets bool
	exchange        int
	last            time.Time
	// upgraded follows the rest of the connection after a 101 to h2c
	// (Upgrader).
	upgraded exchange.Follower
}

// New returns a Conn that reports records of connection rec to sink, with
// the limits of opt (shared by many connections: it must not change;
// MaxHeaderBytes 0 means exchange.DefaultMaxHeaderBytes). up takes the
// connection over after a 101 to h2c; nil, the rest of such a connection
// is noted as not HTTP/1.1.
func New(rec *record.Conn, sink record.Sink, opt *exchange.Limits, up Upgrader) *Conn {
	c := &Conn{rec: rec, sink: sink, opt: opt, up: up}
	c.client = direction{c: c, isServer: false}
	c.server = direction{c: c, isServer: true}
	return c
}

// ClientData feeds bytes the client sent, seen at time t.
func (c *Conn) ClientData(p []byte, t time.Time) {
	c.last = t
	c.client.process(p, t)
}

// ServerData feeds bytes the server sent, seen at time t.
func (c *Conn) ServerData(p []byte, t time.Time) {
	c.last = t
	c.server.process(p, t)
}

// ClientGap reports n bytes the client sent that were not captured.
func (c *Conn) ClientGap(n int64, t time.Time) { c.client.gap(n, t) }

// ServerGap reports n bytes the server sent that were not captured.
func (c *Conn) ServerGap(n int64, t time.Time) { c.server.gap(n, t) }

// CloseServer ends the server's byte stream, which ends a body read until
// close and shows how a chunked body ended.
func (c *Conn) CloseServer(how exchange.Ending, t time.Time) { c.server.close(how, t) }

// CloseClient ends the client's byte stream.
func (c *Conn) CloseClient(how exchange.Ending, t time.Time) { c.client.close(how, t) }

// StartMidStream takes the server's bytes from now on as the middle of a
// chunked JSON watch body whose start was not captured (tcpdump started
// while a watch was open), and reports true; it changes nothing and
// reports false when the server's stream has already been read from or a
// request waits for its response.
func (c *Conn) StartMidStream(t time.Time) bool {
	if c.server.off != 0 || len(c.pending) != 0 {
		return false
	}
	c.server.startMidStream(t)
	return true
}

// StartMidStreamChunk takes the server's bytes from now on as the middle
// of a chunked watch body whose start was not captured, whose next chunk
// (RFC 9112 §7.1) starts skip bytes on and whose events are of format f,
// inflated with content coding coding ("gzip": kube-apiserver flushes one
// gzip member, RFC 1952 §2.2, per chunk): the skip bytes before, the rest
// of a chunk, are passed over and the body is read from that chunk-size
// line on, its first event confirming it as a watch. It reports false and
// changes nothing when the server's stream has already been read from or a
// request waits for its response.
func (c *Conn) StartMidStreamChunk(t time.Time, skip int, f event.Format, coding string) bool {
	if c.server.off != 0 || len(c.pending) != 0 || skip < 0 {
		return false
	}
	what := "at its first byte"
	if skip > 0 {
		what = fmt.Sprintf("at offset %d, after %d bytes of a chunk that began before the capture (passed over)", skip, skip)
	}
	c.server.inferWatch(t, fmt.Sprintf("the capture starts inside a response (no status line captured): a chunked %s watch body%s, read from the chunk that starts %s", f, codingText(coding), what),
		f, coding, false)
	c.server.skip = int64(skip)
	return true
}

// codingText is ", gzip'd" for content coding "gzip", "" for none.
func codingText(coding string) string {
	if coding == "" {
		return ""
	}
	return ", " + coding + "'d"
}

func (c *Conn) emit(r record.Record) { c.sink.Emit(r) }

// queue adds a request to those waiting for a response. Beyond
// DefaultMaxPending it keeps only a count of them: their responses are
// still given their exchange numbers, in order, without the request.
func (c *Conn) queue(req *record.Request, off int64, t time.Time) {
	if len(c.pending) < DefaultMaxPending && c.unqueued == 0 {
		// What waits for the response is the request line's method,
		// protocol and flags, not its target and header section (up to
		// 1 MiB, emitted with the request): 64 requests waiting on each
		// of 10000 connections must not hold them.
		c.pending = append(c.pending, &record.Request{Conn: req.Conn, Exchange: req.Exchange, Time: req.Time,
			Method: req.Method, Proto: req.Proto, Watch: req.Watch, InitialState: req.InitialState, StartsWithState: req.StartsWithState,
			Secrets: req.Secrets, OtherResource: req.OtherResource, Omitted: req.Omitted})
		return
	}
	if req.Secrets {
		c.unqueuedSecrets = true
	}
	if c.unqueued == 0 {
		c.unqueuedFirst = req.Exchange
		c.client.problem("stream", off, "too many requests waiting for responses",
			fmt.Sprintf("more than %d pipelined requests without a response", DefaultMaxPending),
			"the responses to later requests are matched by order only: a response to HEAD may be misread", true, t)
	}
	c.unqueued++
}

// answer pairs a final response with the oldest request waiting for one
// and returns that request (nil when it was not kept) and the exchange
// number. unasked is true when no request waits at all: the response
// opens an exchange of its own.
func (c *Conn) answer() (req *record.Request, exchange int, unasked bool) {
	if len(c.pending) > 0 {
		req := c.pending[0]
		c.pending[0] = nil
		c.pending = c.pending[1:]
		return req, req.Exchange, false
	}
	if c.unqueued > 0 {
		// Requests were numbered in order while none was answered
		// without one, so the unqueued ones have consecutive numbers.
		c.unqueued--
		c.unqueuedFirst++
		return nil, c.unqueuedFirst - 1, false
	}
	c.exchange++
	return nil, c.exchange, true
}

func (c *Conn) problem(p *record.Problem) {
	c.locate(p)
	c.emit(p)
}

// locate completes a problem with its connection, time and (Options.Locate)
// where its bytes came from.
func (c *Conn) locate(p *record.Problem) {
	p.Conn = c.rec
	if p.Time.IsZero() {
		p.Time = c.last
	}
	if c.opt.Locate != nil {
		c.opt.Locate(p)
	}
}

// direction is one direction of the connection: a sequence of HTTP messages.
type direction struct {
	c        *Conn
	isServer bool
	off      int64 // stream offset of the next byte
	// skip is how many of the next bytes are passed over (the rest of a
	// chunk that began before the capture: StartMidStreamChunk).
	skip     int64
	dead     bool // an unrecoverable error: ignore the rest
	closed   bool
	hdr      []byte
	hdrHeld  int64 // bytes of hdr reserved from Options.Budget
	hdrStart int64
	body     *body // current message body, nil while reading a header
}

func (s *direction) name() string {
	if s.isServer {
		return "server"
	}
	return "client"
}

func (s *direction) problem(where string, off int64, kind, detail, hint string, warning bool, t time.Time) {
	s.c.problem(&record.Problem{Direction: s.name(), Where: where, Offset: off, Kind: kind,
		Detail: detail, Hint: hint, Warning: warning, Time: t, Exchange: s.c.exchange})
}

// process consumes bytes of HTTP messages.
func (s *direction) process(p []byte, t time.Time) {
	if k := min(s.skip, int64(len(p))); k > 0 {
		s.skip -= k
		s.off += k
		p = p[k:]
	}
	for len(p) > 0 && !s.dead && !s.closed {
		if s.body != nil {
			n := s.body.write(p, t)
			s.off += int64(n)
			p = p[n:]
			if s.body.done {
				s.body.finish(t)
				s.body = nil
			}
			continue
		}
		n := s.readHeader(p, t)
		s.off += int64(n)
		p = p[n:]
		if s.c.upgraded != nil && len(p) > 0 {
			// The connection turned into HTTP/2 (Upgrade: h2c): the
			// rest of these bytes are its.
			if s.isServer {
				s.c.upgraded.ServerData(p, t)
			} else {
				s.c.upgraded.ClientData(p, t)
			}
			return
		}
	}
}

// upgradeHTTP2 hands the rest of the connection to the HTTP/2 follower
// after a 101 Switching Protocols to h2c.
func (c *Conn) upgradeHTTP2(req *record.Request, t time.Time) {
	c.upgraded = c.up.Upgrade(req, t)
}

// startMidStream takes the server's first bytes, which are not a status
// line, as the middle of a chunked JSON watch body whose start was not
// captured (tcpdump started while a watch was open): the chunk decoder and
// the event framer look for the next chunk-size line and the next event, as
// after lost bytes, and the body is confirmed as a watch by its first event.
func (s *direction) startMidStream(t time.Time) {
	s.inferWatch(t, "the capture starts inside a response (no status line captured): looking for chunk framing and watch events",
		event.FormatJSON, "", true)
}

// inferWatch starts the chunked watch body of a response whose status line
// and header section were not captured, its events of format f inflated
// with content coding coding: a mid-stream note saying note, the inferred
// response, and the body, confirmed as a watch by its first event; resync:
// the chunk decoder and the event framer look for the next chunk-size line
// and the next event, as after lost bytes.
func (s *direction) inferWatch(t time.Time, note string, f event.Format, coding string, resync bool) {
	s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "mid-stream", Message: note})
	s.c.exchange++
	hdr := textproto.MIMEHeader{"Transfer-Encoding": {"chunked"}, "Content-Type": {exchange.MediaType(f)}}
	if coding != "" {
		hdr.Set("Content-Encoding", coding)
	}
	resp := &record.Response{Conn: s.c.rec, Exchange: s.c.exchange, Time: t, Proto: "HTTP/1.1", StatusCode: 200,
		Reason: "(status line not captured)", Header: hdr, Framing: "chunked", ContentType: exchange.MediaType(f),
		ContentEncoding: coding, Watch: true, Format: f.String(), Inferred: true}
	b := s.newBody(hdr, true, false, t)
	b.exchange, b.resp = resp.Exchange, resp
	b.startEvents(exchange.WatchBody{Format: f, Tentative: true, Coding: coding})
	if resync {
		b.dec.Resync()
		b.ev.Resync()
	}
	b.emitResponse(resp)
	s.body = b
}

// readHeader accumulates a header section; it returns the bytes of p
// consumed. When the section is complete it starts the message.
func (s *direction) readHeader(p []byte, t time.Time) int {
	if len(s.hdr) == 0 {
		s.hdrStart = s.off
		// RFC 9112 §2.2: a recipient should ignore at least one empty
		// line before a request-line.
		i := 0
		for i < len(p) && (p[i] == '\r' || p[i] == '\n') {
			i++
		}
		if i > 0 {
			return i
		}
	}
	from := len(s.hdr) - 3
	if from < 0 {
		from = 0
	}
	// A section may hold MaxHeaderBytes bytes, its empty line included.
	// Keep at most one byte more, which is enough to tell that it is too
	// long: whether it is does not depend on how the bytes were split,
	// and a section that never ends costs no more than the bound.
	maxHeader := s.c.opt.MaxHeaderBytes
	if maxHeader <= 0 {
		maxHeader = exchange.DefaultMaxHeaderBytes
	}
	if room := maxHeader + 1 - len(s.hdr); len(p) > room {
		p = p[:room]
	}
	s.hdr = append(s.hdr, p...)
	end := headerEnd(s.hdr, from)
	if end < 0 && len(s.hdr) <= maxHeader {
		// Bytes kept until the section's end comes count against the
		// budget shared with the other connections.
		if !s.c.opt.Budget.Reserve(int64(len(p))) {
			s.problem("stream", s.hdrStart, event.KindBudget,
				fmt.Sprintf("with %d bytes of this header section, the connections' buffers would hold more than %d bytes",
					len(s.hdr), s.c.opt.Budget.Max()),
				"raise --max-buffered-bytes-total, or lower --max-connections", false, t)
			s.dropHeader()
			s.dead = true
			return len(p)
		}
		s.hdrHeld += int64(len(p))
		return len(p)
	}
	if end < 0 || end > maxHeader {
		s.problem("stream", s.hdrStart, "header section too large",
			fmt.Sprintf("no empty line within its first %d bytes", maxHeader),
			"raise --max-header-bytes if this is real traffic", false, t)
		s.dead = true
		s.dropHeader()
		return len(p)
	}
	used := end - (len(s.hdr) - len(p))
	h := s.hdr[:end]
	s.dropHeader()
	if cap(h) <= 4<<10 {
		// Keep a small buffer for the next section; not a large one,
		// for the life of the connection (parsing below copies what it
		// keeps, and h is not written to again before it is parsed).
		s.hdr = h[:0]
	}
	if s.isServer {
		s.startResponse(h, t)
	} else {
		s.startRequest(h, t)
	}
	return used
}

// dropHeader forgets the header section being read and releases its bytes
// from the budget.
func (s *direction) dropHeader() {
	s.c.opt.Budget.Release(s.hdrHeld)
	s.hdrHeld = 0
	s.hdr = nil
}

// headerEnd returns the length of the header section in b (through the
// empty line), searching from index from, or -1.
func headerEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

func (s *direction) gap(n int64, t time.Time) {
	if s.dead || n <= 0 {
		s.off += n
		return
	}
	s.problem("stream", s.off, exchange.KindMissing,
		fmt.Sprintf("%d bytes missing at offset %d", n, s.off),
		"capture with a larger buffer (tcpdump -B 65536 --immediate-mode)", false, t)
	if s.body != nil {
		if s.body.gap(n, t) {
			s.off += n
			return
		}
		s.body.finish(t)
		s.body = nil
	}
	s.off += n
	// Lost bytes in a header section or across messages: HTTP framing of
	// this direction cannot be trusted any more.
	s.dropHeader()
	s.dead = true
	s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "not-http",
		Message: fmt.Sprintf("%s stream: HTTP framing lost after missing bytes; the rest of this direction is not decoded", s.name())})
}

func (s *direction) close(how exchange.Ending, t time.Time) {
	if s.closed {
		return
	}
	s.closed = true
	if s.body != nil {
		s.body.closeWith(how, t)
		s.body = nil
	} else if len(s.hdr) > 0 && !s.dead {
		s.problem("stream", s.hdrStart, "header section cut short",
			fmt.Sprintf("%d bytes of a header section, then the stream ended", len(s.hdr)), "", false, t)
	}
	s.dropHeader()
}
