// Package wire is kwatch's switchboard: given one TCP connection's two byte
// streams, it decides from their first bytes what the connection carries —
// TLS records (RFC 8446 §5.1), the HTTP/2 client connection preface (RFC
// 9113 §3.4), HTTP/1.1 (RFC 9112), or none of these — and hands the bytes
// to the follower of that protocol: pkg/tlsconn, pkg/h2conn or
// pkg/httpconn. It takes back what they hand on: an HTTP/1.1 connection
// upgraded to h2c (RFC 7540 §3.2) and TLS's decrypted bytes, which are
// decided again (by ALPN, by the preface, or by their first bytes).
//
// It is the only package that knows every follower; the sources (pkg/pcap,
// pkg/watchclient) build every connection through New. A decision never
// depends on how the first bytes were split: they are held until it can
// no longer change.
package wire

import (
	"bytes"
	"fmt"
	"time"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/h2conn"
	"github.com/kwatch/kwatch/pkg/httpconn"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/tlsconn"
	"github.com/kwatch/kwatch/pkg/tlsrec"
)

// Options tune a Conn and the followers it makes. The zero value follows
// HTTP/1.1 and HTTP/2 with the default limits, and notes TLS connections
// without decrypting them.
type Options struct {
	exchange.Limits
	// MidStream takes a server stream that does not start with a status
	// line as the middle of a chunked JSON watch body (a capture that began
	// while the watch was open) instead of giving up on it, and bytes
	// that are HTTP/2 frames without a connection preface as an HTTP/2
	// connection joined mid-connection (see sniff.go), followed by
	// pkg/h2conn with h2conn.Options.Joined; so are TLS's decrypted bytes
	// that are frames while ALPN was not seen.
	MidStream bool
	// HTTP2Frames makes the HTTP/2 follower list every frame in a note
	// (kwatch --frames, the HTTP/2 counterpart of --wire).
	HTTP2Frames bool
	// Keys, if set, makes a connection that carries TLS records followed
	// by pkg/tlsconn, which decrypts it with these secrets. Unset, such a
	// connection gets a note of what its hellos show in the clear.
	Keys *keylog.Log
	// NoWait is tlsconn.Options.NoWait: no secrets can come later than a
	// connection looks for them.
	NoWait bool
	// Joins is tlsconn.Options.Joins: the state of TLS connections whose
	// handshake was not seen may come into Keys (kwatch attach); their
	// decrypted bytes are decided as a capture that starts mid-way.
	Joins bool
	// KeySource and Missed are tlsconn.Options': where secrets come from
	// when not from a key log, and the note of a TLS connection whose
	// handshake was not seen.
	KeySource, Missed string
	// MaxWaitBytes is tlsconn.Options.MaxWaitBytes (0: 64 KiB).
	MaxWaitBytes int
}

// Board holds what every connection of one source shares: the options, and
// the followers' options made from them once. Make it with NewBoard; its
// Conn method makes the connections. It is not changed after NewBoard, so
// connections on several goroutines may share it.
type Board struct {
	opt Options
	h2  h2conn.Options
	// join: bytes that are HTTP/2 frames without a preface are taken as
	// a connection joined mid-connection (Options.MidStream, also on the
	// decrypted board).
	join bool
	// decrypted is the board of TLS connections' decrypted bytes (no TLS
	// inside TLS, no capture starting mid-response, problems located in
	// the decrypted bytes); nil when TLS is not followed.
	decrypted *Board
	// joined is the board of the decrypted bytes of TLS connections
	// joined mid-way (Options.Joins): as decrypted, but they may start in
	// the middle of a response.
	joined *Board
}

// NewBoard returns the Board of connections followed with opt.
func NewBoard(opt Options) *Board {
	b := &Board{opt: opt, h2: h2Options(opt), join: opt.MidStream}
	if opt.Keys != nil {
		in := opt
		in.Keys, in.MidStream = nil, false
		outer := opt.Locate
		in.Locate = func(p *record.Problem) {
			// Offsets of the decrypted bytes, not of the TCP stream.
			if p.Where != "" {
				p.Where = "decrypted " + p.Where
			}
			if outer != nil {
				outer(p)
			}
		}
		b.decrypted = NewBoard(in)
		// A TLS connection whose handshake was not captured is joined
		// mid-connection too.
		b.decrypted.join = opt.MidStream
		if opt.Joins || opt.MidStream {
			// A connection joined from its process's state (Joins) or
			// with secrets found by trying the key log's (tlsconn's
			// trial.go, under kwatch pcap): its decrypted bytes start
			// anywhere, in a response or between HTTP/2 frames
			// (NewBoard joins with MidStream).
			in.MidStream = true
			b.joined = NewBoard(in)
		}
	}
	return b
}

// h2Joined are the HTTP/2 follower's options for a connection joined
// mid-connection.
func (b *Board) h2Joined() h2conn.Options {
	o := b.h2
	o.Joined = true
	return o
}

// h2Options are the HTTP/2 follower's options for opt.
func h2Options(opt Options) h2conn.Options {
	events := opt.Events()
	events.Carriers = "DATA frames"
	return h2conn.Options{Events: events, Locate: opt.Locate, Omit: opt.Omit,
		MaxHeaderListBytes: opt.MaxHeaderBytes, ListFrames: opt.HTTP2Frames}
}

// Conn is one TCP connection as the switchboard follows it. Create it with
// Board.Conn (or New); it implements exchange.Follower: feed it both
// directions' bytes in any split, their gaps and their ends.
type Conn struct {
	rec  *record.Conn
	sink record.Sink
	b    *Board
	// http follows the directions decided to be HTTP/1.1, made when the
	// first is.
	http *httpconn.Conn
	// other follows the whole connection once it was handed over (TLS,
	// HTTP/2 by preface or by upgrade): every later call goes to it.
	other          exchange.Follower
	client, server direction
	tlsNoted       bool // the connection's one TLS note was emitted
	joined         bool // other is an HTTP/2 follower joined mid-connection
	// held logs, with Board.join, the order in which both directions'
	// held bytes came, and when: a connection joined mid-connection gets
	// them in that order (replay).
	held []heldBytes
}

// state is what a direction's bytes are known to be.
type state uint8

const (
	// sniffing: the first bytes are held until what they carry is
	// decided (decided).
	sniffing state = iota
	// toHTTP: the direction is HTTP/1.1 and its bytes go to Conn.http.
	toHTTP
	// opaque: the direction carries something not decoded (a note said
	// what); only a TLS hello in the clear is still read, for that note.
	opaque
)

// direction is one direction of the connection, before hand-over.
type direction struct {
	state  state
	server bool
	seen   bool // the first bytes were decided on
	closed bool
	held   []byte // first bytes held while sniffing
	// reserved is what of held is reserved from the budget; n counts the
	// bytes the direction sent; scan looks for HTTP/2 frames in held
	// (Board.join).
	reserved int64
	n        int64
	scan     h2conn.FrameScan
	// ended holds the end of a direction whose bytes wait for the other
	// direction to decide (deferClose).
	ended *ending
	// text counts the first bytes known to be text without a CRLF
	// (textEnd).
	text int
	// gzipFrom is where gzipChunkAt goes on from; gzipFormat and
	// gzipCoding are what the chunk it found carries.
	gzipFrom   int
	gzipFormat event.Format
	gzipCoding string
	// tls reads what an opaque TLS direction shows in the clear (its
	// hello), for the connection's note.
	tls *tlsrec.Sniffer
}

func (d *direction) name() string {
	if d.server {
		return "server"
	}
	return "client"
}

// Conn returns a Conn that reports the records of connection rec to sink.
func (b *Board) Conn(rec *record.Conn, sink record.Sink) *Conn {
	c := &Conn{rec: rec, sink: sink, b: b}
	c.server.server = true
	return c
}

// New returns a Conn of its own board: for one connection (a test, a
// single tap); a source of many connections makes one Board.
func New(rec *record.Conn, sink record.Sink, opt Options) *Conn {
	return NewBoard(opt).Conn(rec, sink)
}

// httpConn returns the connection's HTTP/1.1 follower, made at the first
// call (making it emits nothing).
func (c *Conn) httpConn() *httpconn.Conn {
	if c.http == nil {
		c.http = httpconn.New(c.rec, c.sink, &c.b.opt.Limits, (*upgrader)(c))
	}
	return c.http
}

// Record returns the connection's identity.
func (c *Conn) Record() *record.Conn { return c.rec }

// ClientData feeds bytes the client sent, seen at time t.
func (c *Conn) ClientData(p []byte, t time.Time) {
	if c.other != nil {
		c.other.ClientData(p, t)
		return
	}
	c.data(&c.client, p, t)
}

// ServerData feeds bytes the server sent, seen at time t.
func (c *Conn) ServerData(p []byte, t time.Time) {
	if c.other != nil {
		c.other.ServerData(p, t)
		return
	}
	c.data(&c.server, p, t)
}

// ClientRecord is ClientData for p, one whole TLS record's plaintext
// (exchange.RecordFollower): a connection joined mid-connection is found
// to be HTTP/2, and where its frames start, by the records too
// (h2conn.FrameScan.RecordEnd), and the follower it is handed to is told
// of them.
func (c *Conn) ClientRecord(p []byte, t time.Time) {
	if c.other != nil {
		exchange.FeedRecord(c.other, false, p, t)
		return
	}
	c.record(&c.client, len(p))
	c.data(&c.client, p, t)
}

// ServerRecord is ClientRecord for the server's records.
func (c *Conn) ServerRecord(p []byte, t time.Time) {
	if c.other != nil {
		exchange.FeedRecord(c.other, true, p, t)
		return
	}
	c.record(&c.server, len(p))
	c.data(&c.server, p, t)
}

// record tells a direction whose first bytes are undecided that its next
// n bytes are one record.
func (c *Conn) record(d *direction, n int) {
	if c.b.join && d.state == sniffing && !d.seen && !d.closed {
		d.scan.RecordEnd(len(d.held) + n)
	}
}

// ClientGap reports n bytes the client sent that were not captured.
func (c *Conn) ClientGap(n int64, t time.Time) {
	if c.other != nil {
		c.other.ClientGap(n, t)
		return
	}
	c.gap(&c.client, n, t)
}

// ServerGap reports n bytes the server sent that were not captured.
func (c *Conn) ServerGap(n int64, t time.Time) {
	if c.other != nil {
		c.other.ServerGap(n, t)
		return
	}
	c.gap(&c.server, n, t)
}

// CloseClient ends the client's byte stream.
func (c *Conn) CloseClient(how exchange.Ending, t time.Time) {
	if c.other != nil {
		c.other.CloseClient(how, t)
		return
	}
	c.close(&c.client, how, t)
}

// CloseServer ends the server's byte stream.
func (c *Conn) CloseServer(how exchange.Ending, t time.Time) {
	if c.other != nil {
		c.other.CloseServer(how, t)
		return
	}
	c.close(&c.server, how, t)
}

// RetryKeys goes on with a TLS connection's records that wait for keys, at
// time t (tlsconn.Conn.Retry); it does nothing for other connections. A
// source whose key store grows while packets flow (kwatch attach) calls
// it on its connections when new secrets came.
func (c *Conn) RetryKeys(t time.Time) {
	if tc, ok := c.other.(*tlsconn.Conn); ok {
		tc.Retry(t)
	}
}

func (c *Conn) emit(r record.Record) { c.sink.Emit(r) }

func (c *Conn) note(t time.Time, kind, msg string) {
	c.emit(&record.ConnNote{Conn: c.rec, Time: t, Kind: kind, Message: msg})
}

func (c *Conn) data(d *direction, p []byte, t time.Time) {
	d.n += int64(len(p))
	switch d.state {
	case toHTTP:
		c.toHTTP(d, p, t)
		return
	case opaque:
		if d.tls != nil && !d.tls.Done() {
			d.tls.Write(p)
			c.noteTLS(t, false)
		}
		return
	}
	if d.closed || len(p) == 0 {
		return
	}
	// The first bytes may come one at a time (a live read, a small TCP
	// segment): hold them until the decision cannot change, so that it
	// does not depend on how the bytes were split.
	if len(d.held) > 0 || !c.decided(d, p) {
		d.held = append(d.held, p...)
		c.logHeld(d, len(p), t)
		if !c.reserve(d) {
			c.flush(d, t) // no room to hold more: decide on what is held
			return
		}
		if !c.decided(d, d.held) {
			return
		}
		p, d.held = d.held, nil
	}
	c.sniff(d, p, t, false)
	c.release(d)
}

// heldFree is how many held first bytes need no room in the budget. Bytes
// that may be HTTP/2 frames are held up to h2conn.ScanBytes, so a capture
// of many connections that are not HTTP would hold up to that much each.
const heldFree = 4 << 10

// reserve takes room in the budget for what d holds beyond heldFree; it
// reports false when there is none.
func (c *Conn) reserve(d *direction) bool {
	need := int64(len(d.held)-heldFree) - d.reserved
	if need <= 0 {
		return true
	}
	if !c.b.opt.Budget.Reserve(need) {
		return false
	}
	d.reserved += need
	return true
}

// release gives back what d reserved for its held bytes.
func (c *Conn) release(d *direction) {
	c.b.opt.Budget.Release(d.reserved)
	d.reserved = 0
}

// flush decides on the first bytes held so far, when no more will come
// before a gap or the end of the stream.
func (c *Conn) flush(d *direction, t time.Time) {
	if len(d.held) == 0 {
		return
	}
	p := d.held
	d.held = nil
	c.sniff(d, p, t, true)
	c.release(d)
}

func (c *Conn) gap(d *direction, n int64, t time.Time) {
	c.flush(d, t)
	if c.other != nil {
		// Handed over by the bytes just decided on: the gap is not its,
		// but for a connection joined mid-connection, whose follower
		// must not read the bytes after it as the frames they follow.
		if c.joined {
			if d.server {
				c.other.ServerGap(n, t)
			} else {
				c.other.ClientGap(n, t)
			}
		}
		return
	}
	switch d.state {
	case opaque:
		if d.tls != nil && !d.tls.Done() && n > 0 {
			d.tls.Gap()
			c.noteTLS(t, false)
		}
		return
	case sniffing:
		// Bytes lost before any came: HTTP/1.1 says what was lost, and
		// that the direction cannot be followed after it.
		d.state = toHTTP
	}
	if d.server {
		c.httpConn().ServerGap(n, t)
	} else {
		c.httpConn().ClientGap(n, t)
	}
}

func (c *Conn) close(d *direction, how exchange.Ending, t time.Time) {
	if d.closed || c.deferClose(d, how, t) {
		return
	}
	c.flush(d, t)
	d.closed = true
	if c.other != nil {
		// Handed over by the bytes just decided on. A connection joined
		// mid-connection is told the direction ended: its first frame
		// may be found only now.
		if c.joined {
			c.closeOther(d, how, t)
		}
		return
	}
	switch d.state {
	case opaque:
		if d.tls != nil {
			c.noteTLS(t, true)
		}
	case toHTTP:
		if d.server {
			c.httpConn().CloseServer(how, t)
		} else {
			c.httpConn().CloseClient(how, t)
		}
	}
}

// toHTTP feeds bytes of an HTTP/1.1 direction to its follower.
func (c *Conn) toHTTP(d *direction, p []byte, t time.Time) {
	if d.server {
		c.httpConn().ServerData(p, t)
	} else {
		c.httpConn().ClientData(p, t)
	}
}

// sniffMax is how many first bytes are enough for sniff in every case: a
// method of up to 21 characters and its space (methodPrefix).
const sniffMax = 22

// sniffHead is how many first bytes the note about a direction that is not
// HTTP shows.
const sniffHead = 8

// h2Preface is the start of the HTTP/2 connection preface (RFC 9113 §3.4).
const h2Preface = "PRI * HTTP/2"

// decided reports whether sniff's verdict on the first bytes b of d can no
// longer change when more bytes come, so that the verdict (and the bytes
// the note shows) does not depend on how the first bytes were split.
func (c *Conn) decided(d *direction, b []byte) bool {
	if c.b.join {
		switch v, _ := c.joinVerdict(d, b, false); v {
		case joinMore:
			return false
		case joinFound, joinChunk:
			return true
		}
	}
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
	if d.server {
		if looksLike(b, "HTTP/") {
			return len(b) >= len("HTTP/")
		}
		if !c.client.seen && len(b) >= 4 && b[3] == 0x4 {
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

// sniff decides from the first bytes p of direction d what the connection
// carries, and hands them on; end: no more bytes come before a gap or the
// end of the stream. The other direction's end, if it waited for this
// decision, follows.
func (c *Conn) sniff(d *direction, p []byte, t time.Time, end bool) {
	c.decide(d, p, t, end)
	c.settle(c.peer(d))
	if c.client.seen && c.server.seen {
		c.held = nil // nothing held is to be handed over any more
	}
}

func (c *Conn) decide(d *direction, p []byte, t time.Time, end bool) {
	d.seen = true
	if c.b.join {
		switch v, at := c.joinVerdict(d, p, end); v {
		case joinFound:
			c.join(d, p, at, t)
			return
		case joinChunk:
			if c.httpConn().StartMidStreamChunk(t, at, d.gzipFormat, d.gzipCoding) {
				d.state = toHTTP
				c.toHTTP(d, p, t)
				return
			}
		}
	}
	switch {
	case tlsrec.IsRecord(p) && c.b.opt.Keys != nil:
		o := &c.b.opt
		to := tlsconn.Options{Keys: o.Keys, NoWait: o.NoWait, Joins: o.Joins, KeySource: o.KeySource, Missed: o.Missed, MaxWaitBytes: o.MaxWaitBytes,
			Budget: o.Budget, Locate: o.Locate, Inner: c.decrypted}
		if c.b.joined != nil {
			to.InnerJoined = c.decryptedJoined
		}
		c.other = tlsconn.New(c.rec, c.sink, to)
		c.handOver(d, p, t)
		return
	case tlsrec.IsRecord(p):
		d.state = opaque
		d.tls = &tlsrec.Sniffer{}
		d.tls.Write(p)
		c.noteTLS(t, false)
		return
	case bytes.HasPrefix(p, []byte(h2Preface)) && !d.server:
		// Marked before anything about the connection is emitted:
		// records never change once emitted. (A connection upgraded from
		// HTTP/1.1 has emitted records already and keeps the mark off.)
		c.rec.HTTP2 = true
		c.other = h2conn.New(c.rec, c.sink, c.b.h2)
		c.note(t, "h2", "HTTP/2 (the client's connection preface)")
		c.handOver(d, p, t)
		return
	case bytes.HasPrefix(p, []byte(h2Preface)):
		d.state = opaque
		c.note(t, "http2", "HTTP/2 (prior knowledge preface): not decoded; kwatch decodes HTTP/1.1")
		return
	case d.server && looksLike(p, "HTTP/"),
		d.server && c.b.opt.MidStream && chunkedText(p) && c.httpConn().StartMidStream(t),
		!d.server && isMethod(p):
		d.state = toHTTP
		c.toHTTP(d, p, t)
		return
	}
	d.state = opaque
	c.note(t, "not-http", fmt.Sprintf("%s bytes do not start an HTTP/1.1 message (first bytes % x); the capture may start in the middle of the connection",
		d.name(), head(p, sniffHead)))
}

// isMethod reports whether p starts with a request method and its space,
// or is a method cut short by the end of the stream (which counts as one).
func isMethod(p []byte) bool {
	ok, _ := methodPrefix(p)
	return ok
}

// handOver gives the follower that took the connection over (c.other)
// direction d's first bytes p, then what the other direction sent that is
// held undecided.
func (c *Conn) handOver(d *direction, p []byte, t time.Time) {
	c.forward(d, p, t)
	o := &c.server
	if d.server {
		o = &c.client
	}
	if held := o.held; len(held) > 0 && !o.seen {
		o.held, o.seen, o.state = nil, true, opaque
		c.forward(o, held, t)
		c.release(o)
	}
}

// forward hands bytes of direction d to the follower that took the
// connection over.
func (c *Conn) forward(d *direction, p []byte, t time.Time) {
	if d.server {
		c.other.ServerData(p, t)
	} else {
		c.other.ClientData(p, t)
	}
}

// upgrader is a Conn as the httpconn.Upgrader of its HTTP/1.1 follower.
type upgrader Conn

// Upgrade is httpconn.Upgrader's: after a 101 Switching Protocols to h2c,
// the rest of the connection is HTTP/2, and stream 1 answers req.
func (u *upgrader) Upgrade(req *record.Request, t time.Time) exchange.Follower {
	c := (*Conn)(u)
	h2 := h2conn.New(c.rec, c.sink, c.b.h2)
	c.other = h2
	c.note(t, "h2", "101 Switching Protocols to h2c: the rest of the connection is HTTP/2; stream 1 answers the upgrade request")
	if req != nil {
		h2.Upgraded(req, t)
	}
	return h2
}

// decrypted is tlsconn.Options.Inner: the follower of a TLS connection's
// decrypted bytes. HTTP/2 when ALPN chose h2, or when the client's first
// decrypted bytes are the connection preface (ALPN stayed encrypted: TLS
// 1.3 without the handshake secrets); else a switchboard of its own that
// decides from the bytes, as for a connection in the clear (Board's
// decrypted board).
func (c *Conn) decrypted(alpn string, server bool, first []byte, t time.Time, noted func()) exchange.Follower {
	return c.decryptedOn(c.b.decrypted, alpn, server, first, t, noted)
}

// decryptedJoined is tlsconn.Options.InnerJoined: decrypted, for a
// connection joined mid-way (its bytes decided as a capture that starts in
// the middle).
func (c *Conn) decryptedJoined(alpn string, server bool, first []byte, t time.Time, noted func()) exchange.Follower {
	return c.decryptedOn(c.b.joined, alpn, server, first, t, noted)
}

// decryptedOn is decrypted with the board in.
func (c *Conn) decryptedOn(in *Board, alpn string, server bool, first []byte, t time.Time, noted func()) exchange.Follower {
	preface := !server && bytes.HasPrefix(first, []byte(h2Preface))
	if alpn != "h2" && !preface {
		noted()
		return in.Conn(c.rec, c.sink)
	}
	c.rec.HTTP2 = true
	noted()
	h2 := h2conn.New(c.rec, c.sink, in.h2)
	how := "ALPN h2"
	if alpn != "h2" {
		how = "the client's connection preface"
	}
	c.note(t, "h2", "HTTP/2 ("+how+")")
	return h2
}
