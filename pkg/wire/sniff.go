package wire

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/h2conn"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/tlsrec"
)

// noteTLS emits the connection's one note about TLS it does not decrypt,
// once its directions have shown what they can in the clear: the
// ServerHello (version, cipher suite) with the ClientHello's server name
// and ALPN, or that the capture starts after the handshake; or, when a
// direction ends (ending), whatever is known by then.
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

// chunkedText reports whether a server's first bytes b look like the
// middle of a chunked body of text (JSON): text up to their first CRLF and
// for the textAfterCRLF bytes from it, or text throughout when they hold
// no CRLF. Only the bytes up to there are looked at, so the verdict does
// not depend on how many came after them.
func chunkedText(b []byte) bool {
	for i, c := range b {
		switch {
		case c == '\r' && i+1 < len(b) && b[i+1] == '\n':
			return isText(head(b[i:], textAfterCRLF))
		case !isText(b[i : i+1]):
			return false
		}
	}
	return true
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

// joinVerdict is what sniffing with Board.join makes of a direction's
// first bytes.
type joinVerdict uint8

const (
	// joinClassic: not HTTP/2 frames, or bytes the rules without joining
	// decide on (a TLS record, the preface, an HTTP/1.1 message, text of
	// a chunked body): those rules say what they are.
	joinClassic joinVerdict = iota
	// joinMore: not decided yet; the bytes are held.
	joinMore
	// joinFound: HTTP/2 frames, from the offset returned: the connection
	// was joined mid-connection.
	joinFound
	// joinChunk: the server's bytes are the middle of a chunked HTTP/1.1
	// body whose chunks are gzip members (gzipChunkAt), the next chunk
	// starting at the offset returned.
	joinChunk
)

// joinVerdict decides whether b, the first bytes of direction d (end: all
// of them until a gap or the end), are HTTP/2 frames of a connection
// joined mid-connection: h2conn.FrameScan finds a chain of plausible
// frame headers (RFC 9113 §4.1) from the first byte or from a later one,
// the bytes before being the rest of a frame. What the rules without
// joining recognise comes first: a TLS record, the client preface, a
// status line or a request method; HTTP/1.1 text is never a frame header
// (h2conn.PlausibleHeader). A server's text (a capture that starts inside
// a chunked JSON body, or inside a DATA frame of JSON) is held until a
// CRLF says HTTP/1.1 chunked coding or a byte that is not text says
// neither (JSON has no raw CR; the first byte of a frame's header is 0
// for any frame under 64 KiB). A
// server's SETTINGS frame while the client has shown nothing is held
// until it does: a server sends its SETTINGS first, so the client's
// preface may follow.
func (c *Conn) joinVerdict(d *direction, b []byte, end bool) (joinVerdict, int) {
	switch {
	case len(b) == 0:
		return joinMore, 0
	case b[0] >= 0x14 && b[0] <= 0x17 && (len(b) < 2 || b[1] == 0x03): // a TLS record's start
		return joinClassic, 0
	case looksLike(b, h2Preface):
		return joinClassic, 0
	}
	if d.server {
		if looksLike(b, "HTTP/") {
			return joinClassic, 0
		}
	} else if ok, sure := methodPrefix(b); ok || !sure {
		return joinClassic, 0
	}
	full := len(b) >= h2conn.ScanBytes
	chunkMore := false // a gzip'd chunk may yet start within the window
	if d.server && c.b.opt.MidStream {
		switch at, v := d.gzipChunkAt(b, end || full); v {
		case joinChunk:
			return joinChunk, at
		case joinMore:
			chunkMore = true
		}
		if isText(b[:1]) {
			switch i := d.textEnd(b); {
			case i < 0 && !end && !full:
				return joinMore, 0 // text so far
			case i < 0:
				return joinClassic, 0 // only text
			case b[i] == '\r':
				// A CRLF: chunked coding of JSON when text follows it
				// too (chunkedText); a chunk-size line before a gzip
				// member (binary) when not.
				if len(b)-i < textAfterCRLF && !end && !full {
					return joinMore, 0
				}
				if chunkedText(b) {
					return joinClassic, 0
				}
			}
		}
	}
	if d.server && !c.client.seen && !end && !full && len(b) >= 4 && b[3] == 0x4 && h2conn.PlausibleHeader(b) {
		return joinMore, 0 // SETTINGS: the client's preface may follow
	}
	switch at, v := d.scan.Scan(b, end); v {
	case h2conn.ScanFound:
		return joinFound, at
	case h2conn.ScanMore:
		return joinMore, 0
	}
	if chunkMore {
		return joinMore, 0
	}
	return joinClassic, 0
}

// textAfterCRLF is how many bytes from the first CRLF of a server's first
// bytes tell a chunked JSON body (text) from a chunked gzip'd one (a gzip
// member's header is binary from its first byte): 16.
const textAfterCRLF = 16

// minGzipMember is the size of the smallest gzip member (RFC 1952 §2.3:
// a 10-byte header, an empty deflate block, the 8-byte trailer): 20 bytes.
const minGzipMember = 20

// gzipChunkAt looks in b, a server's first bytes captured in the middle of
// a chunked body (RFC 9112 §7.1), for the first chunk whose data is a gzip
// member (1f 8b 08) that starts a watch event (exchange.StartOfBody):
// kube-apiserver writes one member per flush, each a chunk of its own. A
// chunk-size line (hex digits and CRLF, at least minGzipMember) counts
// where it follows a CRLF (the end of the chunk before) or starts b, and
// once the chunk's data have come with the CRLF that ends them. The first
// such line in b is the one: while a line's chunk has not all come, a
// later one is not taken (it may lie inside that chunk's data, where a
// stored deflate block holds any bytes), so the verdict does not depend
// on how the bytes were split; nor is a chunk that ends past the first
// h2conn.ScanBytes, the most that is held. It returns the offset of the
// chunk-size line and joinChunk; joinMore while none is found and more
// bytes may show one (done: no more come); joinClassic else.
//
// d.gzipFrom is where the call before left off (b grows from call to
// call): every line before it was refused for good, so each is looked at,
// and its member inflated, once, however the bytes were split. The chunk
// found's events' format and content coding are kept in d.gzipFormat
// and d.gzipCoding.
func (d *direction) gzipChunkAt(b []byte, done bool) (int, joinVerdict) {
	from := &d.gzipFrom
	magic := []byte{0x1f, 0x8b, 0x08}
	b = b[:min(len(b), h2conn.ScanBytes)]
	for *from < len(b) {
		i := bytes.Index(b[*from:], magic)
		if i < 0 {
			// A magic may straddle the end of b.
			*from = max(*from, len(b)-len(magic)+1)
			break
		}
		i += *from
		// b[i-2:i] is the chunk-size line's CRLF; the digits before.
		if i < 3 || b[i-2] != '\r' || b[i-1] != '\n' {
			*from = i + 1
			continue
		}
		j := i - 2
		for j > 0 && j > i-2-16 && isHex(b[j-1]) {
			j--
		}
		if j == i-2 || j > 0 && (j < 2 || b[j-2] != '\r' || b[j-1] != '\n') {
			*from = i + 1
			continue
		}
		size, err := strconv.ParseUint(string(b[j:i-2]), 16, 64)
		if err != nil || size < minGzipMember || uint64(i)+size+2 > h2conn.ScanBytes {
			*from = i + 1
			continue
		}
		end := uint64(i) + size
		if end+2 > uint64(len(b)) {
			if done {
				*from = i + 1
				continue
			}
			*from = i
			return 0, joinMore // this chunk first: the verdict waits for its end
		}
		*from = i + 1
		if b[end] != '\r' || b[end+1] != '\n' {
			continue // not a chunk
		}
		f, coding, ok := exchange.StartOfBody(b[i:end])
		if !ok {
			continue
		}
		*from = i // the same verdict if asked again
		d.gzipFormat, d.gzipCoding = f, coding
		return j, joinChunk
	}
	if done {
		return 0, joinClassic
	}
	return 0, joinMore
}

// isHex reports whether c is a hexadecimal digit (RFC 9112 §7.1's chunk-size).
func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// textEnd returns the index of the first CRLF's CR in b, the direction's
// first bytes, or of their first byte that is not text (isText),
// whichever comes first; -1 when there is neither (a CR at the very end
// may start a CRLF: -1). It goes on from where the call before stopped
// (d.text): b grows from call to call.
func (d *direction) textEnd(b []byte) int {
	for i := d.text; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '\r' && i+1 < len(b) && b[i+1] == '\n':
			return i
		case c == '\r' && i+1 == len(b):
			d.text = i
			return -1
		case !isText(b[i : i+1]):
			return i
		}
	}
	d.text = len(b)
	return -1
}

// join hands the connection to pkg/h2conn as one joined mid-connection:
// direction d's first bytes p are HTTP/2 frames from offset at. The
// connection's record is copied with HTTP2 set, so that no record already
// emitted (the capture's "no-syn" note) changes.
func (c *Conn) join(d *direction, p []byte, at int, t time.Time) {
	rec := *c.rec
	rec.HTTP2 = true
	c.rec = &rec
	h2 := h2conn.New(c.rec, c.sink, c.b.h2Joined())
	h2.JoinAt(d.server, at)
	c.other, c.joined = h2, true
	how := "from its first byte"
	if at > 0 {
		how = fmt.Sprintf("from offset %d, after the rest of a frame", at)
	}
	first := t // the note comes before the bytes it is about
	if len(c.held) > 0 && c.held[0].t.Before(t) {
		first = c.held[0].t
	}
	c.note(first, "h2-joined", fmt.Sprintf("HTTP/2, joined mid-connection: the %s's first bytes are HTTP/2 frames (%s); no connection preface captured", d.name(), how))
	o := &c.server
	if d.server {
		o = &c.client
	}
	if o.seen && o.state != sniffing && o.n > 0 {
		// Decided before as something else (not HTTP, or HTTP/1.1):
		// the follower starts after its bytes so far, as after lost
		// bytes.
		if o.server {
			c.other.ServerGap(o.n, t)
		} else {
			c.other.ClientGap(o.n, t)
		}
	}
	c.replay(d, p, t)
}

// heldBytes is n bytes a direction sent at t that were held.
type heldBytes struct {
	server bool
	n      int
	t      time.Time
}

// maxHeldLog bounds Conn.held; bytes held past it are handed over after
// those logged, at the time of the decision.
const maxHeldLog = 1024

// logHeld logs n bytes of d held at t (with Board.join).
func (c *Conn) logHeld(d *direction, n int, t time.Time) {
	if !c.b.join {
		return
	}
	if k := len(c.held); k > 0 && c.held[k-1].server == d.server && c.held[k-1].t.Equal(t) {
		c.held[k-1].n += n
		return
	}
	if len(c.held) < maxHeldLog {
		c.held = append(c.held, heldBytes{d.server, n, t})
	}
}

// replay hands the follower of a connection joined mid-connection the
// first bytes of both directions in the order they came, each at the
// time it came: direction d's p (what it held, then bytes not held), and
// the other direction's held bytes, unless it was decided before.
// Requests then come before their responses, as on the wire.
func (c *Conn) replay(d *direction, p []byte, t time.Time) {
	o := c.peer(d)
	var oh []byte
	if !o.seen {
		oh = o.held
		o.held, o.seen, o.state = nil, true, opaque
	}
	var dn, on int // bytes of p and oh handed over
	for _, h := range c.held {
		switch {
		case h.server == d.server:
			k := min(h.n, len(p)-dn)
			c.forward(d, p[dn:dn+k], h.t)
			dn += k
		case oh != nil:
			k := min(h.n, len(oh)-on)
			c.forward(o, oh[on:on+k], h.t)
			on += k
		}
	}
	c.held = nil
	if dn < len(p) {
		c.forward(d, p[dn:], t)
	}
	if on < len(oh) {
		c.forward(o, oh[on:], t)
	}
	c.release(o)
}

// ending is how and when a direction ended.
type ending struct {
	how exchange.Ending
	t   time.Time
}

// peer returns the other direction of d.
func (c *Conn) peer(d *direction) *direction {
	if d.server {
		return &c.client
	}
	return &c.server
}

// deferClose holds back the end of direction d, with its first bytes,
// when they are not HTTP/2 frames by themselves but the other direction
// is still deciding: if the other turns out to be HTTP/2 joined
// mid-connection, d's bytes are the follower's to decode, knowing that
// (a client joined mid-connection may have sent no more than a SETTINGS
// ACK and one HEADERS). settle ends it once the other has decided.
func (c *Conn) deferClose(d *direction, how exchange.Ending, t time.Time) bool {
	o := c.peer(d)
	if !c.b.join || c.other != nil || d.state != sniffing || d.seen || len(d.held) == 0 ||
		o.state != sniffing || o.seen || o.closed || len(o.held) == 0 {
		return false
	}
	if v, _ := c.joinVerdict(d, d.held, true); v == joinFound {
		return false
	}
	d.closed = true
	d.ended = &ending{how, t}
	return true
}

// settle ends direction d if its end was held back (deferClose), now that
// the other direction has decided.
func (c *Conn) settle(d *direction) {
	e := d.ended
	if e == nil {
		return
	}
	d.ended = nil
	if c.other != nil && d.seen {
		c.closeOther(d, e.how, e.t) // its bytes were handed over with the other's
		return
	}
	d.closed = false
	c.close(d, e.how, e.t)
}

// closeOther tells the follower that took the connection over that
// direction d ended.
func (c *Conn) closeOther(d *direction, how exchange.Ending, t time.Time) {
	if d.server {
		c.other.CloseServer(how, t)
	} else {
		c.other.CloseClient(how, t)
	}
}
