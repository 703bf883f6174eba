// Package httpconn follows the bytes of one HTTP/1.1 connection (RFC 9112):
// it parses the requests the client sends and the responses the server sends,
// pairs them into exchanges, frames each body (Content-Length, chunked coding
// or connection close, RFC 9112 §6.3), decodes chunked bodies with pkg/chunk
// and splits watch bodies into watch events with pkg/event. Everything it
// finds becomes a record sent to a record.Sink, in wire order; a record is
// never changed after it was sent (the sink may keep it, or hand it to
// another goroutine).
//
// It is fed from either side of kwatch: reassembled TCP streams from a capture
// (pkg/pcap) or the bytes a live watch reads (pkg/watchclient). Input arrives
// in any split; the parser keeps only bounded state.
package httpconn

import (
	"bytes"
	"fmt"
	"net/textproto"
	"time"

	"github.com/kwatch/kwatch/pkg/chunk"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/tlsrec"
)

// DefaultMaxHeaderBytes bounds a request or response header section, in
// bytes (1 MiB, the default of Go's net/http server).
const DefaultMaxHeaderBytes = 1 << 20

// KindMissing is the Problem kind of bytes a capture lost (ClientGap,
// ServerGap).
const KindMissing = "bytes missing from the capture"

// DefaultMaxPending bounds how many requests may wait for their responses on
// one connection (HTTP/1.1 pipelining).
const DefaultMaxPending = 64

// maxStatusBody bounds the bytes of a non-2xx body kept to show its Status.
const maxStatusBody = 64 << 10

// Options tune a Conn. The zero value means the defaults.
type Options struct {
	// MaxHeaderBytes bounds one header section, in bytes.
	MaxHeaderBytes int
	// MaxEventBytes bounds one watch event, in bytes.
	MaxEventBytes int64
	// MaxEventChunks bounds the chunks listed for one watch event
	// (event.DefaultMaxSpans when 0); an event carried by more chunks
	// still decodes, with a warning saying how many were not listed.
	MaxEventChunks int
	// MaxInflatedBytes bounds what one gzip member (or a deflate body)
	// may inflate to, in bytes (inflate.DefaultMaxMemberBytes when 0): past
	// it the member is reported as a gzip bomb and skipped.
	MaxInflatedBytes int64
	// Chunk bounds the chunked decoder's lines.
	Chunk chunk.Limits
	// MidStream takes a server stream that does not start with a status
	// line as the middle of a chunked JSON watch body (a capture that began
	// while the watch was open) instead of giving up on it.
	MidStream bool
	// Decode tunes event decoding (e.g. showing Secret data).
	Decode event.DecodeOptions
	// Budget, if set, bounds the bytes held by the header sections and
	// watch events in progress (and events waiting for their chunk to end)
	// of every Conn that shares it.
	Budget *event.Budget
	// Locate, if set, is called on every Problem before it is emitted, to
	// add where the bytes came from (capture file and packet number).
	Locate func(*record.Problem)
	// HTTP2, if set, makes the follower of a connection whose client
	// starts with the HTTP/2 connection preface (RFC 9113 §3.4, prior
	// knowledge): every byte of the connection then goes to it. Unset,
	// such a connection gets a note that it is not decoded.
	HTTP2 func(rec *record.Conn, sink record.Sink) Follower
	// HTTP2Frames makes the HTTP/2 follower list every frame in a note
	// (kwatch --frames, the HTTP/2 counterpart of --wire).
	HTTP2Frames bool
	// TLS, if set, makes the follower of a connection that carries TLS
	// records (RFC 8446 §5.1; pkg/tlsconn, which decrypts with a key log):
	// every byte of the connection then goes to it. Unset, such a
	// connection gets a note of what its hellos show.
	TLS func(rec *record.Conn, sink record.Sink) Follower
}

// Follower follows a connection that is not HTTP/1.1 (pkg/h2conn for
// HTTP/2), with the same feeding methods as Conn.
type Follower interface {
	ClientData(p []byte, t time.Time)
	ServerData(p []byte, t time.Time)
	ClientGap(n int64, t time.Time)
	ServerGap(n int64, t time.Time)
	CloseClient(how Ending, t time.Time)
	CloseServer(how Ending, t time.Time)
}

// Conn is the HTTP/1.1 state of one connection. Create it with New.
type Conn struct {
	rec     *record.Conn
	sink    record.Sink
	opt     Options
	client  *side
	server  *side
	pending []*record.Request
	// unqueued counts requests not kept in pending because it was full;
	// the oldest of them is exchange number unqueuedFirst.
	unqueued      int
	unqueuedFirst int
	// unqueuedSecrets: a request not kept in pending may watch Secrets
	// (record.Request.Secrets); the answers to unkept requests are then
	// all redacted as Secrets (fails closed).
	unqueuedSecrets bool
	exchange        int
	tlsNoted        bool // the connection's TLS note was emitted: one per connection
	last            time.Time
	// other follows the connection instead once it turned out to be
	// HTTP/2 (Options.HTTP2).
	other Follower
}

// New returns a Conn that reports records of connection rec to sink.
func New(rec *record.Conn, sink record.Sink, opt Options) *Conn {
	if opt.MaxHeaderBytes <= 0 {
		opt.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	c := &Conn{rec: rec, sink: sink, opt: opt}
	c.client = &side{c: c, isServer: false}
	c.server = &side{c: c, isServer: true}
	return c
}

// Record returns the connection's identity.
func (c *Conn) Record() *record.Conn { return c.rec }

// ClientData feeds bytes the client sent, seen at time t.
func (c *Conn) ClientData(p []byte, t time.Time) {
	c.last = t
	if c.other != nil {
		c.other.ClientData(p, t)
		return
	}
	c.client.feed(p, t)
}

// ServerData feeds bytes the server sent, seen at time t.
func (c *Conn) ServerData(p []byte, t time.Time) {
	c.last = t
	if c.other != nil {
		c.other.ServerData(p, t)
		return
	}
	c.server.feed(p, t)
}

// ClientGap reports n bytes the client sent that were not captured.
func (c *Conn) ClientGap(n int64, t time.Time) {
	if c.other != nil {
		c.other.ClientGap(n, t)
		return
	}
	c.client.gap(n, t)
}

// ServerGap reports n bytes the server sent that were not captured.
func (c *Conn) ServerGap(n int64, t time.Time) {
	if c.other != nil {
		c.other.ServerGap(n, t)
		return
	}
	c.server.gap(n, t)
}

// Ending says why a side's byte stream ended.
type Ending int

// How a connection's byte stream can end.
const (
	// EndFIN: the sender closed its side (TCP FIN), or a live read hit EOF.
	EndFIN Ending = iota
	// EndRST: the connection was reset.
	EndRST
	// EndCapture: the capture ended with the stream open.
	EndCapture
	// EndLocal: kwatch itself closed a live connection (Ctrl-C, or a
	// watch it stopped).
	EndLocal
	// EndDropped: kwatch stopped following a connection of a capture
	// that held more connections at once than it tracks. The body ends
	// "not decoded further", with that reason as its detail.
	EndDropped
	// EndClient: the client closed its side (TCP FIN) before the server
	// ended the response: the client gave the exchange up (a watch
	// stopped, curl killed). Like EndLocal, the body ends "closed by the
	// client"; EndLocal is the same close seen from inside kwatch.
	EndClient
)

// CloseServer ends the server's byte stream, which ends a body read until
// close and shows how a chunked body ended.
func (c *Conn) CloseServer(how Ending, t time.Time) {
	if c.other != nil {
		c.other.CloseServer(how, t)
		return
	}
	c.server.close(how, t)
}

// CloseClient ends the client's byte stream.
func (c *Conn) CloseClient(how Ending, t time.Time) {
	if c.other != nil {
		c.other.CloseClient(how, t)
		return
	}
	c.client.close(how, t)
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
			Secrets: req.Secrets})
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

// side is one direction of the connection: a sequence of HTTP messages.
type side struct {
	c        *Conn
	isServer bool
	off      int64 // stream offset of the next byte
	dead     bool  // not HTTP, or an unrecoverable error: ignore the rest
	seen     bool  // the first bytes were sniffed
	sniffBuf []byte
	closed   bool
	hdr      []byte
	hdrHeld  int64 // bytes of hdr reserved from Options.Budget
	hdrStart int64
	body     *body // current message body, nil while reading a header
	// tls reads what this direction shows in the clear when it carries
	// TLS (its hello), for the connection's note.
	tls *tlsrec.Sniffer
}

func (s *side) name() string {
	if s.isServer {
		return "server"
	}
	return "client"
}

func (s *side) problem(where string, off int64, kind, detail, hint string, warning bool, t time.Time) {
	s.c.problem(&record.Problem{Direction: s.name(), Where: where, Offset: off, Kind: kind,
		Detail: detail, Hint: hint, Warning: warning, Time: t, Exchange: s.c.exchange})
}

// sniffMax is how many first bytes are enough for sniff in every case: a
// method of up to 21 characters and its space (methodPrefix).
const sniffMax = 22

// sniffHead is how many first bytes the note about a direction that is not
// HTTP shows.
const sniffHead = 8

// h2Preface is the start of the HTTP/2 connection preface (RFC 9113 §3.4).
const h2Preface = "PRI * HTTP/2"

// sniffDecided reports whether sniff's verdict on the first bytes b can no
// longer change when more bytes come, so that the verdict (and the bytes the
// note shows) does not depend on how the first bytes were split.
func (s *side) sniffDecided(b []byte) bool {
	switch {
	case len(b) >= sniffMax:
		return true
	case len(b) < 3 && b[0] >= 0x14 && b[0] <= 0x17 && (len(b) < 2 || b[1] == 0x03):
		return false // may be a TLS record header
	case tlsrec.IsRecord(b):
		return true
	case bytes.HasPrefix(b, []byte(h2Preface)):
		return true
	case bytes.HasPrefix([]byte(h2Preface), b):
		return false
	}
	if s.isServer {
		if looksLike(b, "HTTP/") {
			return len(b) >= len("HTTP/")
		}
		if s.c.opt.HTTP2 != nil && !s.c.client.seen && len(b) >= 4 && b[3] == 0x4 {
			// May be an HTTP/2 server's SETTINGS, ahead of the client's
			// preface in the capture: hold it (up to 64 KiB) until the
			// client shows.
			return len(b) >= 64<<10
		}
	} else if ok, sure := methodPrefix(b); ok || !sure {
		return sure
	}
	// Not HTTP: decided once the bytes the note shows have come.
	return len(b) >= sniffHead
}

func (s *side) feed(p []byte, t time.Time) {
	if s.tls != nil && !s.tls.Done() {
		s.tls.Write(p)
		s.c.noteTLS(t, false)
		return
	}
	if !s.seen && !s.dead && !s.closed && len(p) > 0 {
		// The first bytes may come one at a time (a live read, a small
		// TCP segment): hold them until sniff can decide, so that the
		// decision does not depend on how the bytes were split.
		if len(s.sniffBuf) > 0 || !s.sniffDecided(p) {
			s.sniffBuf = append(s.sniffBuf, p...)
			if !s.sniffDecided(s.sniffBuf) {
				return
			}
			p, s.sniffBuf = s.sniffBuf, nil
		}
		s.seen = true
		if !s.sniff(p, t) {
			s.dead = true
			return
		}
	}
	s.process(p, t)
}

// flushSniff decides on the first bytes held so far, when no more will
// come before a gap or the end of the stream.
func (s *side) flushSniff(t time.Time) {
	if len(s.sniffBuf) == 0 {
		return
	}
	p := s.sniffBuf
	s.sniffBuf = nil
	s.seen = true
	if !s.sniff(p, t) {
		s.dead = true
		return
	}
	s.process(p, t)
}

// process consumes bytes of HTTP messages.
func (s *side) process(p []byte, t time.Time) {
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
		if s.c.other != nil && len(p) > 0 {
			// The connection turned into HTTP/2 (Upgrade: h2c): the
			// rest of these bytes are its.
			s.forward(p, t)
			return
		}
	}
}

// sniff decides from the first bytes of a direction whether it carries
// HTTP/1.1, and otherwise says what it carries.
func (s *side) sniff(p []byte, t time.Time) bool {
	if tlsrec.IsRecord(p) && s.c.opt.TLS != nil {
		s.c.startTLS(s, p, t)
		return false
	}
	if tlsrec.IsRecord(p) {
		s.tls = &tlsrec.Sniffer{}
		s.tls.Write(p)
		s.c.noteTLS(t, false)
		return false
	}
	if bytes.HasPrefix(p, []byte(h2Preface)) {
		if s.c.opt.HTTP2 != nil && !s.isServer {
			s.c.startHTTP2(p, t)
			return false
		}
		s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "http2",
			Message: "HTTP/2 (prior knowledge preface): not decoded; kwatch decodes HTTP/1.1"})
		return false
	}
	if s.isServer {
		if looksLike(p, "HTTP/") {
			return true
		}
		if s.c.opt.MidStream && s.off == 0 && len(s.c.pending) == 0 && isText(head(p, sniffHead*8)) {
			s.startMidStream(t)
			return true
		}
	} else if ok, _ := methodPrefix(p); ok {
		// A method cut short by the end of the stream counts as one.
		return true
	}
	s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "not-http",
		Message: fmt.Sprintf("%s bytes do not start an HTTP/1.1 message (first bytes % x); the capture may start in the middle of the connection",
			s.name(), head(p, sniffHead))})
	return false
}

// startHTTP2 hands the connection to the HTTP/2 follower: the client's
// first bytes p (starting with the preface) and whatever the server sent
// that is held unsniffed.
func (c *Conn) startHTTP2(p []byte, t time.Time) {
	// Marked before anything about the connection is emitted: records
	// never change once emitted. (A connection upgraded from HTTP/1.1 has
	// emitted records already and keeps the mark off.)
	c.rec.HTTP2 = true
	c.other = c.opt.HTTP2(c.rec, c.sink)
	c.emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "h2", Message: "HTTP/2 (the client's connection preface)"})
	c.handOver(c.client, p, t)
}

// startTLS hands the connection to the TLS follower: side s's first bytes p
// (a TLS record) and whatever the other side sent that is held unsniffed.
func (c *Conn) startTLS(s *side, p []byte, t time.Time) {
	c.other = c.opt.TLS(c.rec, c.sink)
	c.handOver(s, p, t)
}

// handOver gives the follower that took the connection over (c.other)
// side s's first bytes p, then what the other side sent that is held
// unsniffed.
func (c *Conn) handOver(s *side, p []byte, t time.Time) {
	s.forward(p, t)
	o := c.server
	if s.isServer {
		o = c.client
	}
	if held := o.sniffBuf; len(held) > 0 && !o.seen {
		o.sniffBuf, o.seen, o.dead = nil, true, true
		o.forward(held, t)
	}
}

// forward hands bytes of side s to the follower that took the connection
// over.
func (s *side) forward(p []byte, t time.Time) {
	if s.isServer {
		s.c.other.ServerData(p, t)
	} else {
		s.c.other.ClientData(p, t)
	}
}

// Upgrader is implemented by a Follower that can take over a connection
// after HTTP/1.1's Upgrade (pkg/h2conn, RFC 7540 §3.2): req, the request
// that asked for it, is answered on stream 1.
type Upgrader interface {
	Upgraded(req *record.Request, t time.Time)
}

// upgradeHTTP2 hands the rest of the connection to the HTTP/2 follower
// after a 101 Switching Protocols to h2c.
func (c *Conn) upgradeHTTP2(req *record.Request, t time.Time) {
	c.other = c.opt.HTTP2(c.rec, c.sink)
	c.emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "h2", Message: "101 Switching Protocols to h2c: the rest of the connection is HTTP/2; stream 1 answers the upgrade request"})
	if u, ok := c.other.(Upgrader); ok && req != nil {
		u.Upgraded(req, t)
	}
}

// noteTLS emits the connection's one note about TLS once its directions
// have shown what they can in the clear: the ServerHello (version, cipher
// suite) with the ClientHello's server name and ALPN, or that the capture
// starts after the handshake; or, when a direction ends (ending), whatever
// is known by then.
func (c *Conn) noteTLS(t time.Time, ending bool) {
	if c.tlsNoted {
		return
	}
	cl, sv := c.client.tls, c.server.tls
	done := func(s *tlsrec.Sniffer) bool { return s != nil && s.Done() }
	switch {
	case done(sv), done(cl) && cl.MidStream, ending:
	default:
		return
	}
	c.tlsNoted = true
	var what string
	switch {
	case done(sv) && sv.Hello != nil:
		h := *sv.Hello
		if done(cl) && cl.Hello != nil {
			h.ServerName = cl.Hello.ServerName
			if len(h.ALPN) == 0 && len(cl.Hello.ALPN) > 0 {
				// TLS 1.3 sends the server's choice encrypted.
				what = ", ALPN offered " + tlsrec.ALPNText(cl.Hello.ALPN)
			}
		}
		what = h.String() + what
		if cl != nil && cl.Err != nil {
			what += " (the ClientHello could not be read: " + cl.Err.Error() + ")"
		}
	case done(sv) && sv.MidStream, done(cl) && cl.MidStream:
		s := sv
		if !done(s) || !s.MidStream {
			s = cl
		}
		what = fmt.Sprintf("TLS records (version %d.%d) after the handshake, which the capture missed",
			s.FirstVersion>>8, s.FirstVersion&0xff)
	case done(sv) && sv.Err != nil:
		what = "TLS handshake whose ServerHello could not be read (" + sv.Err.Error() + ")"
		if done(cl) && cl.Hello != nil {
			what += ", after a ClientHello (" + cl.Hello.String() + ")"
		}
	case done(cl) && cl.Hello != nil:
		what = "TLS ClientHello (" + cl.Hello.String() + ") without a ServerHello in the capture"
	default:
		what = "TLS handshake, cut short before a hello was complete"
		for _, s := range []*tlsrec.Sniffer{sv, cl} {
			if s != nil && s.Err != nil {
				what = "TLS handshake that could not be read (" + s.Err.Error() + ")"
				break
			}
		}
	}
	c.emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: "tls", Message: what + ": encrypted, not decoded"})
}

// startMidStream takes the server's first bytes, which are not a status
// line, as the middle of a chunked JSON watch body whose start was not
// captured (tcpdump started while a watch was open): the chunk decoder and
// the event framer look for the next chunk-size line and the next event, as
// after lost bytes, and the body is confirmed as a watch by its first event.
func (s *side) startMidStream(t time.Time) {
	s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "mid-stream",
		Message: "the capture starts inside a response (no status line captured): looking for chunk framing and watch events"})
	s.c.exchange++
	hdr := textproto.MIMEHeader{"Transfer-Encoding": {"chunked"}, "Content-Type": {"application/json"}}
	resp := &record.Response{Conn: s.c.rec, Exchange: s.c.exchange, Time: t, Proto: "HTTP/1.1", StatusCode: 200,
		Reason: "(status line not captured)", Header: hdr, Framing: "chunked", ContentType: "application/json",
		Watch: true, Format: event.FormatJSON.String()}
	b := s.newBody(hdr, true, false, t)
	b.exchange, b.resp = resp.Exchange, resp
	b.startEvents(event.FormatJSON)
	b.ev.SetTentative()
	b.dec.Resync()
	b.ev.Resync()
	s.c.emit(resp)
	s.body = b
}

// isText reports whether p looks like text (a JSON watch body in the
// middle): no control bytes but tab, CR and LF.
func isText(p []byte) bool {
	for _, c := range p {
		if c < 0x20 && c != '\t' && c != '\r' && c != '\n' || c == 0x7f {
			return false
		}
	}
	return true
}

func head(p []byte, n int) []byte {
	if len(p) > n {
		return p[:n]
	}
	return p
}

// looksLike reports whether p starts with prefix (or with a part of it when
// p is shorter).
func looksLike(p []byte, prefix string) bool {
	if len(p) < len(prefix) {
		return bytes.HasPrefix([]byte(prefix), p)
	}
	return bytes.HasPrefix(p, []byte(prefix))
}

// methodPrefix reports whether p starts with a request method (a token of
// upper-case letters, "-" or "_", at most 21 long) and its space. sure is
// false when p ends before that is known; ok is then true.
func methodPrefix(p []byte) (ok, sure bool) {
	for i, b := range p {
		if b == ' ' {
			return i > 0, true
		}
		if !(b >= 'A' && b <= 'Z' || b == '-' || b == '_') || i > 20 {
			return false, true
		}
	}
	return len(p) > 0, false
}

// readHeader accumulates a header section; it returns the bytes of p
// consumed. When the section is complete it starts the message.
func (s *side) readHeader(p []byte, t time.Time) int {
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
	if room := s.c.opt.MaxHeaderBytes + 1 - len(s.hdr); len(p) > room {
		p = p[:room]
	}
	s.hdr = append(s.hdr, p...)
	end := headerEnd(s.hdr, from)
	if end < 0 && len(s.hdr) <= s.c.opt.MaxHeaderBytes {
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
	if end < 0 || end > s.c.opt.MaxHeaderBytes {
		s.problem("stream", s.hdrStart, "header section too large",
			fmt.Sprintf("no empty line within its first %d bytes", s.c.opt.MaxHeaderBytes),
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
func (s *side) dropHeader() {
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

func (s *side) gap(n int64, t time.Time) {
	s.flushSniff(t)
	if s.tls != nil && !s.tls.Done() && n > 0 {
		s.tls.Gap()
		s.c.noteTLS(t, false)
	}
	if s.dead || n <= 0 {
		s.off += n
		return
	}
	s.problem("stream", s.off, KindMissing,
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

func (s *side) close(how Ending, t time.Time) {
	if s.closed {
		return
	}
	s.flushSniff(t)
	s.closed = true
	if s.tls != nil {
		s.c.noteTLS(t, true)
	}
	if s.body != nil {
		s.body.closeWith(how, t)
		s.body = nil
	} else if len(s.hdr) > 0 && !s.dead {
		s.problem("stream", s.hdrStart, "header section cut short",
			fmt.Sprintf("%d bytes of a header section, then the stream ended", len(s.hdr)), "", false, t)
	}
	s.dropHeader()
}
