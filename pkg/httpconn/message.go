package httpconn

import (
	"bufio"
	"bytes"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// parseHeader splits a header section into its start line and fields with
// net/textproto. Field names are canonicalised, so lookups are
// case-insensitive (RFC 9110 §5.1).
func parseHeader(h []byte) (string, textproto.MIMEHeader, error) {
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(h)))
	line, err := r.ReadLine()
	if err != nil {
		return "", nil, err
	}
	hdr, err := r.ReadMIMEHeader()
	if err != nil && len(hdr) == 0 {
		return line, textproto.MIMEHeader{}, err
	}
	return line, hdr, err
}

func (s *direction) startRequest(h []byte, t time.Time) {
	line, hdr, err := parseHeader(h)
	parts := strings.SplitN(line, " ", 3)
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "HTTP/") {
		s.problem("stream", s.hdrStart, "malformed request line", fmt.Sprintf("%q", phrase.Clip(line, 80)),
			"", false, t)
		s.dead = true
		return
	}
	if err != nil {
		s.problem("stream", s.hdrStart, "malformed header field", exchange.HeaderErrorText(err), "", true, t)
	}
	exchange.RedactCredentials(hdr)
	s.c.exchange++
	req := &record.Request{Conn: s.c.rec, Exchange: s.c.exchange, Time: t, Method: parts[0],
		Target: exchange.RedactUserinfo(parts[1]), Proto: parts[2], Header: hdr, Watch: exchange.IsWatchRequest(parts[1]), Secrets: event.SecretsPath(parts[1]),
		OtherResource: event.OtherResourcePath(parts[1])}
	req.StartsWithState, req.InitialState = exchange.WatchState(parts[1])
	req.Omitted = s.c.opt.Omit != nil && s.c.opt.Omit(req)
	s.c.emit(req)
	s.c.queue(req, s.hdrStart, t)
	// A request body: chunked or Content-Length (RFC 9112 §6.3, items 4-6);
	// without either a request has no body.
	b := s.newBody(hdr, false, false, t)
	b.exchange = req.Exchange
	s.bareLFNearFraming(h, b, t)
	if b.framing != "none" {
		s.body = b
	}
}

func (s *direction) startResponse(h []byte, t time.Time) {
	line, hdr, err := parseHeader(h)
	parts := strings.SplitN(line, " ", 3)
	code := 0
	// RFC 9112 §4: status-code = 3DIGIT.
	if len(parts) >= 2 && strings.HasPrefix(parts[0], "HTTP/") && len(parts[1]) == 3 && isDigits(parts[1]) {
		code, _ = strconv.Atoi(parts[1])
	}
	if code < 100 || code > 999 {
		s.problem("stream", s.hdrStart, "malformed status line", fmt.Sprintf("%q", phrase.Clip(line, 80)), "", false, t)
		s.dead = true
		return
	}
	if err != nil {
		s.problem("stream", s.hdrStart, "malformed header field", exchange.HeaderErrorText(err), "", true, t)
	}
	reason := ""
	if len(parts) == 3 {
		reason = parts[2]
	}
	var req *record.Request
	number := 0
	if code >= 200 {
		var unasked bool
		req, number, unasked = s.c.answer()
		if unasked && number > 1 {
			// Not the first exchange (a capture that starts after the
			// request): every request seen has had its response, so
			// nobody asked for this one (RFC 9112 §9.3: responses answer
			// requests in order).
			s.problem("stream", s.hdrStart, "response without a request",
				fmt.Sprintf("a %d response after every request on the connection was answered", code),
				"a server or proxy that sends a response nobody asked for (response smuggling), or a capture that lost the request; its events are shown, and a live watch does not act on them", false, t)
		}
	}
	exchange.RedactCredentials(hdr)
	resp := &record.Response{Conn: s.c.rec, Exchange: number, Time: t, Proto: parts[0],
		StatusCode: code, Reason: reason, Header: hdr, Request: req,
		ContentType: hdr.Get("Content-Type")}
	// RFC 9112 §6.3: responses to HEAD, 1xx, 204 and 304 have no body.
	noBody := (req != nil && req.Method == "HEAD") || code < 200 || code == 204 || code == 304
	b := s.newBody(hdr, true, noBody, t)
	b.exchange = number
	b.resp = resp
	if !noBody {
		s.bareLFNearFraming(h, b, t)
	}
	resp.Framing = b.framing
	resp.ContentLength = b.length
	if code == 101 && strings.EqualFold(strings.TrimSpace(hdr.Get("Upgrade")), "h2c") && s.c.up != nil {
		// RFC 7540 §3.2: the rest is HTTP/2, and stream 1 answers the
		// request that asked for the upgrade.
		req, number, _ := s.c.answer()
		resp.Exchange, resp.Request = number, req
		s.c.emit(resp)
		s.c.upgradeHTTP2(req, t)
		s.dead = true
		return
	}
	if code == 101 {
		s.c.emit(resp)
		s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "not-http",
			Message: "101 Switching Protocols to " + hdr.Get("Upgrade") + ": the rest of the connection is not HTTP/1.1"})
		// RFC 9110 §7.8: both directions switch after the 101 (a
		// WebSocket's or SPDY's frames, as kubectl exec's): the client's
		// bytes after its request, taken for a header section while
		// the 101 was not seen yet, are not one.
		s.dead = true
		cl := &s.c.client
		cl.dead = true
		cl.dropHeader()
		return
	}
	if code >= 200 && code < 300 {
		s.watchBody(resp, req, b, hdr, t)
	} else if code >= 300 {
		b.keepStatus = true
	}
	if b.framing == "none" {
		b.emitResponse(resp)
		b.done = true
		b.finish(t)
		return
	}
	b.emitResponse(resp)
	s.body = b
}

// watchBody decides whether the body b of a 2xx response resp (to req, nil
// when not kept; header section hdr) is followed as a watch, and starts its
// events when it is (exchange.WatchOf; RFC 9110 §8.4 content codings,
// RFC 9112 §7 transfer codings).
func (s *direction) watchBody(resp *record.Response, req *record.Request, b *body, hdr textproto.MIMEHeader, t time.Time) {
	// A response whose request was not captured may be a watch when
	// its body streams; the first event confirms it.
	streams := strings.Contains(resp.ContentType, "stream=watch") || b.framing == "chunked"
	f, watch, tentative := exchange.WatchOf(req, resp.ContentType, streams)
	resp.Watch = watch
	if enc := exchange.ContentCoding(hdr.Values("Content-Encoding")); enc != "" {
		resp.ContentEncoding = enc
	}
	if resp.Watch {
		switch {
		case exchange.UnsupportedCoding(resp.ContentEncoding):
			s.problem("body", 0, exchange.KindContentCoded,
				exchange.UnsupportedCodingDetail(resp.ContentEncoding, "chunks"), "", true, t)
			resp.Watch = false
		case b.coded != "":
			detail := fmt.Sprintf("Transfer-Encoding: %s; events are not decoded", strings.Join(hdr.Values("Transfer-Encoding"), ", "))
			if b.framing == "chunked" {
				detail = fmt.Sprintf("Transfer-Encoding: %s; chunks are listed, events are not decoded", strings.Join(hdr.Values("Transfer-Encoding"), ", "))
			}
			s.problem("body", 0, exchange.KindContentCoded, detail, "", true, t)
			resp.Watch = false
		case req != nil && req.Omitted:
			// Left out by the filters: its chunks are followed, its
			// events not framed.
			resp.Format = f.String()
		default:
			resp.Format = f.String()
			b.startEvents(exchange.WatchBody{Format: f, Tentative: tentative, Initial: req != nil && req.InitialState,
				Secrets: req != nil && req.Secrets || req == nil && s.c.unqueuedSecrets, OtherResource: req != nil && req.OtherResource,
				Coding: resp.ContentEncoding})
		}
	}
}

// framing is how a message body is delimited (RFC 9112 §6.3).
type framing struct {
	how    string // "chunked", "content-length", "close" or "none"
	length int64  // the Content-Length
	// coded names the transfer codings other than chunked (e.g. "gzip"):
	// the de-chunked bytes are not the content.
	coded string
	// warns says what is unusual about the framing fields.
	warns []string
}

// framingOf decides how a message body is delimited (RFC 9112 §6.3).
func framingOf(hdr textproto.MIMEHeader, response bool) framing {
	var f framing
	te := hdr.Values("Transfer-Encoding")
	cl := hdr.Values("Content-Length")
	if len(te) > 0 {
		var codings []string
		chunked := 0
		for _, v := range te {
			for c := range strings.SplitSeq(v, ",") {
				if c = strings.ToLower(strings.TrimSpace(c)); c != "" {
					codings = append(codings, c)
				}
				if c == "chunked" {
					chunked++
				}
			}
		}
		if len(cl) > 0 {
			// RFC 9112 §6.3 item 3: Transfer-Encoding overrides
			// Content-Length, and the pair is a smuggling pattern.
			f.warns = append(f.warns, "both Transfer-Encoding and Content-Length; Transfer-Encoding wins (RFC 9112 §6.3), a request-smuggling pattern")
		}
		if chunked > 1 {
			// RFC 9112 §6.1: chunked must not be applied more than
			// once. The body is decoded once, as proxies that repeat
			// the field send it.
			f.warns = append(f.warns, fmt.Sprintf("Transfer-Encoding lists chunked %d times; decoded once", chunked))
		}
		last := ""
		if len(codings) > 0 {
			last = codings[len(codings)-1]
		}
		if last == "chunked" {
			f.how = "chunked"
			var other []string
			for _, c := range codings {
				if c != "chunked" {
					other = append(other, c)
				}
			}
			f.coded = strings.Join(other, ", ")
			return f
		}
		if response {
			f.how = "close"
			f.coded = strings.Join(codings, ", ")
			f.warns = append(f.warns, "Transfer-Encoding "+f.coded+" without chunked last: body read until close")
			return f
		}
		// RFC 9112 §6.3 item 4: a request whose last coding is not
		// chunked cannot be framed.
		f.how = "none"
		f.warns = append(f.warns, "request Transfer-Encoding "+strings.Join(codings, ", ")+" without chunked last is not decodable")
		return f
	}
	if len(cl) > 0 {
		n, ok := parseContentLength(cl)
		if !ok {
			// RFC 9112 §6.3 item 5: an invalid Content-Length is an
			// unrecoverable framing error; what follows is read as one
			// body until the connection closes.
			f.how = "close"
			f.warns = append(f.warns, fmt.Sprintf("invalid Content-Length %q: body read until close", phrase.Clip(strings.Join(cl, ", "), 80)))
			return f
		}
		if n == 0 {
			f.how = "none"
			return f
		}
		f.how, f.length = "content-length", n
		return f
	}
	if response {
		f.how = "close"
		return f
	}
	f.how = "none"
	return f
}

// KindBareLFFraming is the Problem kind (a warning) of a bare LF, an LF not
// preceded by CR, that ends a Transfer-Encoding or Content-Length field
// line, or the line before one, in a header section. RFC 9112 §2.2 lets a
// recipient take a bare LF as a line ending, and kwatch does (as Go's
// net/textproto does); a parser that does not reads the line after the LF
// as part of the line before it, so one of the two sees a framing field
// (RFC 9112 §6.3) that the other does not, or another value of it, and they
// frame the message differently: the shape of request smuggling and
// response splitting. Bare LFs elsewhere in a header section do not change
// the framing and are not reported.
const KindBareLFFraming = "bare LF next to a framing field"

// framingField returns the name of the field that decides the framing of a
// body (RFC 9112 §6.3) that line, a field line without its line ending,
// holds: "Transfer-Encoding" or "Content-Length", or "" for any other line.
// As in net/textproto, the name must be followed by ":" directly.
func framingField(line []byte) string {
	for _, f := range [...]string{"Transfer-Encoding", "Content-Length"} {
		if len(line) > len(f) && line[len(f)] == ':' && strings.EqualFold(string(line[:len(f)]), f) {
			return f
		}
	}
	return ""
}

// bareLFNearFraming reports each bare LF of header section h that ends a
// framing field line or the line before one (KindBareLFFraming), at its
// offset in the direction's stream. The first line, the start-line, is
// never a field line. b is the body the section announced, framed as kwatch
// frames it.
func (s *direction) bareLFNearFraming(h []byte, b *body, t time.Time) {
	// Each line is looked at when the line after it is known: prev is the
	// line before (without its ending), prevLF the offset in h of the
	// bare LF that ended it, or -1 when it ended in CRLF.
	var prev []byte
	prevLF := -1
	prevField := ""
	reported := 0
	for start, n := 0, 0; start < len(h); n++ {
		i := bytes.IndexByte(h[start:], '\n')
		if i < 0 {
			break
		}
		lf := start + i
		line := h[start:lf]
		bare := len(line) == 0 || line[len(line)-1] != '\r'
		if !bare {
			line = line[:len(line)-1]
		}
		field := ""
		if n > 0 {
			field = framingField(line)
		}
		if prevLF >= 0 && (prevField != "" || field != "") {
			reported = s.bareLFOnce(reported, s.hdrStart+int64(prevLF), prev, prevField, line, field, b, t)
		}
		prev, prevField, prevLF = line, field, -1
		if bare {
			prevLF = lf
		}
		start = lf + 1
	}
	if prevLF >= 0 && prevField != "" {
		// The LF that ends the section's last line, which can only be
		// the empty line, has no field line after it.
		s.bareLFOnce(reported, s.hdrStart+int64(prevLF), prev, prevField, nil, "", b, t)
	}
}

// maxBareLFReports bounds the bare-LF-next-to-framing warnings of one
// header section: a section of thousands of such lines gets a few, and one
// that counts the rest.
const maxBareLFReports = 4

// bareLFOnce reports the n+1st bare LF of a header section: the first
// maxBareLFReports each, the next as a note that the others are not listed,
// then none. It returns n+1.
func (s *direction) bareLFOnce(n int, off int64, line []byte, field string, next []byte, nextField string, b *body, t time.Time) int {
	switch {
	case n > maxBareLFReports:
	case n == maxBareLFReports:
		s.c.problem(&record.Problem{Direction: s.name(), Where: "stream", Offset: off, Kind: KindBareLFFraming,
			Detail:  fmt.Sprintf("more than %d in this header section; the others are not listed", maxBareLFReports),
			Warning: true, Time: t, Exchange: b.exchange})
	default:
		s.reportBareLF(off, line, field, next, nextField, b, t)
	}
	return n + 1
}

// reportBareLF reports the bare LF at stream offset off that ends line (a
// framing field line when field is set) and comes before next (likewise,
// nextField).
func (s *direction) reportBareLF(off int64, line []byte, field string, next []byte, nextField string, b *body, t time.Time) {
	var detail, misread string
	switch {
	case field != "" && nextField != "":
		detail = fmt.Sprintf("%q ends in a bare LF, right before %q", phrase.Clip(string(line), 80), phrase.Clip(string(next), 80))
		misread = "the " + nextField + " line as part of the " + field + " field"
	case field != "":
		detail = fmt.Sprintf("%q ends in a bare LF", phrase.Clip(string(line), 80))
		misread = "the line after it as part of the " + field + " field"
	default:
		detail = fmt.Sprintf("the line before %q ends in a bare LF", phrase.Clip(string(next), 80))
		misread = "the " + nextField + " line as part of the line before it"
	}
	hint := "RFC 9112 §2.2 lets a recipient take a bare LF as a line ending, and kwatch does (" + b.framingText() +
		"); a parser that does not reads " + misread +
		", so it frames this message differently: a request-smuggling (response-splitting) shape"
	s.c.problem(&record.Problem{Direction: s.name(), Where: "stream", Offset: off, Kind: KindBareLFFraming,
		Detail: detail, Hint: hint, Warning: true, Time: t, Exchange: b.exchange})
}

// parseContentLength parses the Content-Length field values: 1*DIGIT that
// fit in 63 bits (RFC 9110 §8.6), the same value however often it is
// repeated ("42, 42" or two fields), which a recipient may accept.
func parseContentLength(values []string) (int64, bool) {
	n := int64(-1)
	for _, v := range values {
		for e := range strings.SplitSeq(v, ",") {
			e = strings.TrimSpace(e)
			if e == "" || !isDigits(e) {
				return 0, false
			}
			m, err := strconv.ParseInt(e, 10, 64)
			if err != nil || n >= 0 && m != n {
				return 0, false
			}
			n = m
		}
	}
	return n, n >= 0
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
