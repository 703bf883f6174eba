package exchange

import (
	"fmt"
	"net/textproto"
	"testing"
)

// TestRedactCredentials: what a request or response shows of its header
// fields holds no credential: Authorization keeps its scheme word, a
// response's Set-Cookie (an authenticating proxy's session) and the bearer
// token a WebSocket client sends as a subprotocol are redacted, the other
// subprotocols and fields kept (found by a hostile-input trial).
func TestRedactCredentials(t *testing.T) {
	h := textproto.MIMEHeader{
		"Authorization":          {"Bearer 0a8de18a", "SUPERSECRETRAWTOKEN extra"},
		"Set-Cookie":             {"session=SETCOOKIEsecret; HttpOnly"},
		"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.VE9LRU4yc2VjcmV0, v5.channel.k8s.io", "v4.channel.k8s.io"},
		"Content-Type":           {"application/json"},
	}
	RedactCredentials(h)
	want := textproto.MIMEHeader{
		"Authorization":          {"Bearer REDACTED", "REDACTED"},
		"Set-Cookie":             {"REDACTED"},
		"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.REDACTED, v5.channel.k8s.io", "v4.channel.k8s.io"},
		"Content-Type":           {"application/json"},
	}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Errorf("got  %v\nwant %v", h, want)
	}
	// Trailers too (a chunked body's trailer section, HTTP/2 trailers).
	for line, want := range map[string]string{"set-cookie: s=1": "set-cookie: REDACTED", "Authorization: Bearer x": "Authorization: Bearer REDACTED",
		"X-Checksum: abc": "X-Checksum: abc", "no colon": "no colon",
		// Not field lines (found by a hostile-input trial): a folded
		// continuation, a name with a space or a semicolon.
		" SUPERSECRETFOLD":                        "REDACTED (not a field line; it may hold a credential)",
		"Set-Cookie : SUPERSECRETSPACE":           "REDACTED (not a field line; it may hold a credential)",
		"Authorization Bearer SUPERSECRETNOCOLON": "REDACTED (not a field line; it may hold a credential)",
		"Cookie; SUPERSECRETSEMI":                 "REDACTED (not a field line; it may hold a credential)"} {
		if got := RedactTrailerLine(line); got != want {
			t.Errorf("RedactTrailerLine(%q) = %q, want %q", line, got, want)
		}
	}
}

// TestRedactUserinfo: an absolute-form target's user name and password are
// not shown; other targets are kept.
func TestRedactUserinfo(t *testing.T) {
	for target, want := range map[string]string{
		"http://admin:hunter2@10.0.0.1:8001/api/v1/configmaps?watch=1": "http://REDACTED@10.0.0.1:8001/api/v1/configmaps?watch=1",
		"http://10.0.0.1:8001/api/v1/configmaps?fieldSelector=a%40b":   "http://10.0.0.1:8001/api/v1/configmaps?fieldSelector=a%40b",
		"/api/v1/namespaces/a@b/configmaps":                            "/api/v1/namespaces/a@b/configmaps",
	} {
		if got := RedactUserinfo(target); got != want {
			t.Errorf("RedactUserinfo(%q) = %q, want %q", target, got, want)
		}
	}
}
