package httpconn

import (
	"bufio"
	"bytes"
	"fmt"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kwatch/kwatch/pkg/chunk"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/inflate"
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

// IsWatchRequest reports whether a request target asks for a watch: a
// "watch" query parameter of "true" or "1", or a path with a "/watch/"
// segment (the deprecated watch paths), following the Kubernetes API
// concepts: efficient detection of changes.
func IsWatchRequest(target string) bool {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return false
	}
	switch strings.ToLower(u.Query().Get("watch")) {
	case "true", "1":
		return true
	}
	return strings.Contains(u.Path, "/watch/")
}

func (s *side) startRequest(h []byte, t time.Time) {
	line, hdr, err := parseHeader(h)
	parts := strings.SplitN(line, " ", 3)
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "HTTP/") {
		s.problem("stream", s.hdrStart, "malformed request line", fmt.Sprintf("%q", clip(line)),
			"", false, t)
		s.dead = true
		return
	}
	if err != nil {
		s.problem("stream", s.hdrStart, "malformed header field", headerErrorText(err), "", true, t)
	}
	RedactCredentials(hdr)
	s.c.exchange++
	req := &record.Request{Conn: s.c.rec, Exchange: s.c.exchange, Time: t, Method: parts[0],
		Target: RedactUserinfo(parts[1]), Proto: parts[2], Header: hdr, Watch: IsWatchRequest(parts[1]), Secrets: event.SecretsPath(parts[1])}
	req.StartsWithState, req.InitialState = WatchState(parts[1])
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

func (s *side) startResponse(h []byte, t time.Time) {
	line, hdr, err := parseHeader(h)
	parts := strings.SplitN(line, " ", 3)
	code := 0
	// RFC 9112 §4: status-code = 3DIGIT.
	if len(parts) >= 2 && strings.HasPrefix(parts[0], "HTTP/") && len(parts[1]) == 3 && isDigits(parts[1]) {
		code, _ = strconv.Atoi(parts[1])
	}
	if code < 100 || code > 999 {
		s.problem("stream", s.hdrStart, "malformed status line", fmt.Sprintf("%q", clip(line)), "", false, t)
		s.dead = true
		return
	}
	if err != nil {
		s.problem("stream", s.hdrStart, "malformed header field", headerErrorText(err), "", true, t)
	}
	reason := ""
	if len(parts) == 3 {
		reason = parts[2]
	}
	var req *record.Request
	exchange := 0
	if code >= 200 {
		var unasked bool
		req, exchange, unasked = s.c.answer()
		if unasked && exchange > 1 {
			// Not the first exchange (a capture that starts after the
			// request): every request seen has had its response, so
			// nobody asked for this one (RFC 9112 §9.3: responses answer
			// requests in order).
			s.problem("stream", s.hdrStart, "response without a request",
				fmt.Sprintf("a %d response after every request on the connection was answered", code),
				"a server or proxy that sends a response nobody asked for (response smuggling), or a capture that lost the request; its events are shown, and a live watch does not act on them", false, t)
		}
	}
	RedactCredentials(hdr)
	resp := &record.Response{Conn: s.c.rec, Exchange: exchange, Time: t, Proto: parts[0],
		StatusCode: code, Reason: reason, Header: hdr, Request: req,
		ContentType: hdr.Get("Content-Type")}
	// RFC 9112 §6.3: responses to HEAD, 1xx, 204 and 304 have no body.
	noBody := (req != nil && req.Method == "HEAD") || code < 200 || code == 204 || code == 304
	b := s.newBody(hdr, true, noBody, t)
	b.exchange = exchange
	b.resp = resp
	if !noBody {
		s.bareLFNearFraming(h, b, t)
	}
	resp.Framing = b.framing
	resp.ContentLength = b.length
	if code == 101 && strings.EqualFold(strings.TrimSpace(hdr.Get("Upgrade")), "h2c") && s.c.opt.HTTP2 != nil {
		// RFC 7540 §3.2: the rest is HTTP/2, and stream 1 answers the
		// request that asked for the upgrade.
		req, exchange, _ := s.c.answer()
		resp.Exchange, resp.Request = exchange, req
		s.c.emit(resp)
		s.c.upgradeHTTP2(req, t)
		s.dead = true
		return
	}
	if code == 101 {
		s.c.emit(resp)
		s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "not-http",
			Message: "101 Switching Protocols to " + hdr.Get("Upgrade") + ": the rest of the connection is not HTTP/1.1"})
		s.dead = true
		return
	}
	if code >= 200 && code < 300 {
		f, ok := event.FormatForContentType(resp.ContentType)
		tentative := false
		switch {
		case req != nil && req.Watch && ok:
			resp.Watch = true
		case req == nil && ok && (strings.Contains(resp.ContentType, "stream=watch") || b.framing == "chunked"):
			// The request was not captured: a streaming or chunked
			// body of a Kubernetes media type may be a watch; the first
			// event confirms it.
			resp.Watch = true
			tentative = true
		}
		enc := strings.TrimSpace(strings.Join(hdr.Values("Content-Encoding"), ", "))
		if enc != "" && !strings.EqualFold(enc, "identity") {
			resp.ContentEncoding = enc
		}
		if resp.Watch {
			switch {
			case resp.ContentEncoding != "" && !inflate.Supported(resp.ContentEncoding):
				s.problem("body", 0, "content-encoded watch body",
					fmt.Sprintf("Content-Encoding: %s; chunks are listed, events are not decoded (kwatch inflates gzip and deflate)", enc),
					"", true, t)
				resp.Watch = false
			case b.coded != "":
				detail := fmt.Sprintf("Transfer-Encoding: %s; events are not decoded", strings.Join(hdr.Values("Transfer-Encoding"), ", "))
				if b.framing == "chunked" {
					detail = fmt.Sprintf("Transfer-Encoding: %s; chunks are listed, events are not decoded", strings.Join(hdr.Values("Transfer-Encoding"), ", "))
				}
				s.problem("body", 0, "content-encoded watch body", detail, "", true, t)
				resp.Watch = false
			default:
				resp.Format = f.String()
				b.startEvents(f)
				if tentative {
					b.ev.SetTentative()
				}
				b.ev.SetInitial(req != nil && req.InitialState)
				b.ev.SetSecrets(req != nil && req.Secrets || req == nil && s.c.unqueuedSecrets)
				if resp.ContentEncoding != "" {
					b.startInflate(resp.ContentEncoding)
				}
			}
		}
	} else if code >= 300 {
		b.keepStatus = true
	}
	if b.framing == "none" {
		s.c.emit(resp)
		b.done = true
		b.finish(t)
		return
	}
	s.c.emit(resp)
	s.body = b
}

// WatchState reports what a watch request's target gets first.
// startsWithState: the current state as ADDED events, with or without a
// bookmark saying where they end (sendInitialEvents=true, or no
// resourceVersion or "0"; semantics for watch: "Get State and Start at Most
// Recent" / "Any"). initialState: the state ended by an initial-events-end
// bookmark, so its events can be marked: sendInitialEvents=true (a
// watch-list, Kubernetes API concepts: streaming lists), or
// allowWatchBookmarks=true with no resourceVersion or "0" (the 1.37 API
// server then ends them with the bookmark too). A watch from no
// resourceVersion without bookmarks starts with the state, but nothing on
// the wire says where it ends.
func WatchState(target string) (startsWithState, initialState bool) {
	u, err := url.Parse(target)
	if err != nil {
		return false, false
	}
	q := u.Query()
	rv := q.Get("resourceVersion")
	sent := q.Get("sendInitialEvents") == "true"
	fromNow := rv == "" || rv == "0"
	return sent || fromNow, sent || (q.Get("allowWatchBookmarks") == "true" && fromNow)
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
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
			f.warns = append(f.warns, fmt.Sprintf("invalid Content-Length %q: body read until close", clip(strings.Join(cl, ", "))))
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
func (s *side) bareLFNearFraming(h []byte, b *body, t time.Time) {
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
func (s *side) bareLFOnce(n int, off int64, line []byte, field string, next []byte, nextField string, b *body, t time.Time) int {
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
func (s *side) reportBareLF(off int64, line []byte, field string, next []byte, nextField string, b *body, t time.Time) {
	var detail, misread string
	switch {
	case field != "" && nextField != "":
		detail = fmt.Sprintf("%q ends in a bare LF, right before %q", clip(string(line)), clip(string(next)))
		misread = "the " + nextField + " line as part of the " + field + " field"
	case field != "":
		detail = fmt.Sprintf("%q ends in a bare LF", clip(string(line)))
		misread = "the line after it as part of the " + field + " field"
	default:
		detail = fmt.Sprintf("the line before %q ends in a bare LF", clip(string(next)))
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

// credentialFields are header fields that carry credentials, in requests
// (Authorization, Cookie, the user a front proxy vouches for) and responses
// (Set-Cookie: an authenticating proxy's session); their values never leave
// the decoder.
var credentialFields = []string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Remote-User", "Impersonate-User"}

// RedactUserinfo returns an absolute-form request target (RFC 9112 §3.2.2)
// with the user name and password of its authority, which a client must
// not send (RFC 9110 §4.2.4) but a broken one may, replaced by REDACTED;
// other targets as they are.
func RedactUserinfo(target string) string {
	_, rest, ok := strings.Cut(target, "://")
	if !ok {
		return target
	}
	authority, _, _ := strings.Cut(rest, "/")
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return target
	}
	start := len(target) - len(rest)
	return target[:start] + "REDACTED" + target[start+at:]
}

// knownScheme reports whether word is an authentication scheme the
// recording's mask keeps too (authSchemes), in any letter case: the first
// word of another value may be the credential itself.
func knownScheme(word string) bool {
	for _, s := range authSchemes {
		if strings.EqualFold(word+" ", s) {
			return true
		}
	}
	return false
}

// RedactTrailerLine returns a trailer field line ("Name: value", RFC 9112
// §7.1.2; an HTTP/2 trailer as kwatch writes it) with its value redacted as
// RedactCredentials would in a header section; other lines as they are.
//
// A line that is not a field line (a continuation of the one before, by
// obsolete line folding; a name that is no token) is redacted whole when it
// starts with whitespace or names a credential field anywhere: what it
// holds cannot be told apart from a credential's value.
func RedactTrailerLine(line string) string {
	if !chunk.ValidFieldLine([]byte(line)) {
		if strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") || namesCredential(line) != "" {
			return "REDACTED (not a field line; it may hold a credential)"
		}
		return line
	}
	name, value, ok := strings.Cut(line, ":")
	if !ok {
		return line
	}
	h := textproto.MIMEHeader{textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)): {strings.TrimSpace(value)}}
	RedactCredentials(h)
	for _, vs := range h {
		if vs[0] != strings.TrimSpace(value) {
			return name + ": " + vs[0]
		}
	}
	return line
}

// bearerProtocol starts the WebSocket subprotocol that carries a bearer
// token to kube-apiserver (base64url-encoded after it), for clients that
// cannot set Authorization on a WebSocket, such as browsers.
const bearerProtocol = "base64url.bearer.authorization.k8s.io."

// RedactCredentials replaces the values of credential header fields of a
// request or a response with "REDACTED" (keeping the scheme word of
// Authorization when it is a known one: Bearer, Basic, Digest, Negotiate),
// and the token of a bearer WebSocket subprotocol in Sec-WebSocket-Protocol
// (its other protocols kept).
func RedactCredentials(h textproto.MIMEHeader) {
	for _, f := range credentialFields {
		vs := h[f]
		for i, v := range vs {
			scheme, _, found := strings.Cut(v, " ")
			if found && (f == "Authorization" || f == "Proxy-Authorization") && knownScheme(scheme) {
				vs[i] = scheme + " REDACTED"
			} else {
				vs[i] = "REDACTED"
			}
		}
	}
	vs := h["Sec-Websocket-Protocol"]
	for i, v := range vs {
		protos := strings.Split(v, ",")
		for j, p := range protos {
			if t := strings.TrimSpace(p); len(t) >= len(bearerProtocol) && strings.EqualFold(t[:len(bearerProtocol)], bearerProtocol) {
				protos[j] = strings.Replace(p, t, t[:len(bearerProtocol)]+"REDACTED", 1)
			}
		}
		vs[i] = strings.Join(protos, ",")
	}
}
