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

	"github.com/kwatch/kwatch/pkg/event"
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
		s.problem("stream", s.hdrStart, "malformed header field", err.Error(), "", true, t)
	}
	redactCredentials(hdr)
	s.c.exchange++
	req := &record.Request{Conn: s.c.rec, Exchange: s.c.exchange, Time: t, Method: parts[0],
		Target: parts[1], Proto: parts[2], Header: hdr, Watch: IsWatchRequest(parts[1])}
	if len(s.c.pending) >= DefaultMaxPending {
		s.c.pending = s.c.pending[1:]
	}
	s.c.pending = append(s.c.pending, req)
	s.c.emit(req)
	// A request body: chunked or Content-Length (RFC 9112 §6.3, items 4-6);
	// without either a request has no body.
	b := s.newBody(hdr, false, t)
	b.exchange = req.Exchange
	if b.framing != "none" {
		s.body = b
	}
}

func (s *side) startResponse(h []byte, t time.Time) {
	line, hdr, err := parseHeader(h)
	parts := strings.SplitN(line, " ", 3)
	code := 0
	if len(parts) >= 2 && strings.HasPrefix(parts[0], "HTTP/") {
		code, _ = strconv.Atoi(parts[1])
	}
	if code < 100 || code > 999 {
		s.problem("stream", s.hdrStart, "malformed status line", fmt.Sprintf("%q", clip(line)), "", false, t)
		s.dead = true
		return
	}
	if err != nil {
		s.problem("stream", s.hdrStart, "malformed header field", err.Error(), "", true, t)
	}
	reason := ""
	if len(parts) == 3 {
		reason = parts[2]
	}
	var req *record.Request
	if code >= 200 && len(s.c.pending) > 0 {
		req = s.c.pending[0]
		s.c.pending = s.c.pending[1:]
	}
	exchange := 0
	if req != nil {
		exchange = req.Exchange
	} else if code >= 200 {
		s.c.exchange++
		exchange = s.c.exchange
	}
	resp := &record.Response{Conn: s.c.rec, Exchange: exchange, Time: t, Proto: parts[0],
		StatusCode: code, Reason: reason, Header: hdr, Request: req,
		ContentType: hdr.Get("Content-Type")}
	b := s.newBody(hdr, true, t)
	b.exchange = exchange
	b.resp = resp
	// RFC 9112 §6.3: responses to HEAD, 1xx, 204 and 304 have no body.
	if (req != nil && req.Method == "HEAD") || code < 200 || code == 204 || code == 304 {
		b.framing = "none"
	}
	resp.Framing = b.framing
	resp.ContentLength = b.length
	if code == 101 {
		s.c.emit(resp)
		s.c.emit(&record.ConnNote{Conn: s.c.rec, Time: t, Kind: "not-http",
			Message: "101 Switching Protocols to " + hdr.Get("Upgrade") + ": the rest of the connection is not HTTP/1.1"})
		s.dead = true
		return
	}
	if code >= 200 && code < 300 {
		f, ok := event.FormatForContentType(resp.ContentType)
		switch {
		case req != nil && req.Watch && ok:
			resp.Watch = true
		case req == nil && ok && (strings.Contains(resp.ContentType, "stream=watch") || b.framing == "chunked"):
			// The request was not captured: a streaming or chunked
			// body of a Kubernetes media type may be a watch; the first
			// event confirms it.
			resp.Watch = true
			b.tentative = true
		}
		if resp.Watch {
			if enc := hdr.Get("Content-Encoding"); enc != "" && enc != "identity" {
				s.problem("body", 0, "content-encoded watch body",
					fmt.Sprintf("Content-Encoding: %s; chunks are listed, events are not decoded", enc),
					"", true, t)
				resp.Watch = false
			} else {
				resp.Format = f.String()
				b.startEvents(f)
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

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// framingOf decides how a message body is delimited (RFC 9112 §6.3).
func framingOf(hdr textproto.MIMEHeader, response bool) (string, int64, string) {
	if te := hdr.Values("Transfer-Encoding"); len(te) > 0 {
		codings := strings.Split(strings.Join(te, ","), ",")
		last := strings.ToLower(strings.TrimSpace(codings[len(codings)-1]))
		if last == "chunked" {
			return "chunked", 0, ""
		}
		if response {
			return "close", 0, "Transfer-Encoding " + last + " without chunked: body read until close"
		}
		return "none", 0, "request Transfer-Encoding " + last + " without chunked is not decodable"
	}
	if cl := hdr.Values("Content-Length"); len(cl) > 0 {
		n, err := strconv.ParseInt(strings.TrimSpace(cl[0]), 10, 64)
		if err != nil || n < 0 {
			return "close", 0, fmt.Sprintf("invalid Content-Length %q", cl[0])
		}
		for _, v := range cl[1:] {
			if strings.TrimSpace(v) != strings.TrimSpace(cl[0]) {
				return "content-length", n, "conflicting Content-Length values"
			}
		}
		if n == 0 {
			return "none", 0, ""
		}
		return "content-length", n, ""
	}
	if response {
		return "close", 0, ""
	}
	return "none", 0, ""
}

// credentialFields are request header fields that carry credentials; their
// values never leave the decoder.
var credentialFields = []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Remote-User", "Impersonate-User"}

// redactCredentials replaces the values of credential header fields with
// "REDACTED" (keeping the scheme word of Authorization, e.g. "Bearer").
func redactCredentials(h textproto.MIMEHeader) {
	for _, f := range credentialFields {
		vs := h[f]
		for i, v := range vs {
			scheme, _, found := strings.Cut(v, " ")
			if found && (f == "Authorization" || f == "Proxy-Authorization") {
				vs[i] = scheme + " REDACTED"
			} else {
				vs[i] = "REDACTED"
			}
		}
	}
}
