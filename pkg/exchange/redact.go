package exchange

import (
	"net/textproto"
	"strings"

	"github.com/kwatch/kwatch/pkg/chunk"
)

// CredentialFields are header fields that carry credentials, in requests
// (Authorization, Cookie, the user a front proxy vouches for) and responses
// (Set-Cookie: an authenticating proxy's session); their values never leave
// the decoder.
var CredentialFields = []string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Remote-User", "Impersonate-User"}

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

// KnownScheme reports whether word is an authentication scheme the
// recording's mask keeps too (AuthSchemes), in any letter case: the first
// word of another value may be the credential itself.
func KnownScheme(word string) bool {
	for _, s := range AuthSchemes {
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
		if strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") || NamesCredential(line) != "" {
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
	for _, f := range CredentialFields {
		vs := h[f]
		for i, v := range vs {
			scheme, _, found := strings.Cut(v, " ")
			if found && (f == "Authorization" || f == "Proxy-Authorization") && KnownScheme(scheme) {
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

// AuthSchemes are the authentication scheme words, lower case and with
// their space, kept visible in a redacted Authorization value (RFC 9110
// §11.1, and the schemes Kubernetes clients send).
var AuthSchemes = []string{"bearer ", "basic ", "digest ", "negotiate "}

// HeaderErrorText is err's text for a problem report, unless it quotes a
// line that names a credential field (net/textproto quotes the malformed
// line, "Authorization: Bearer …\x01" or "Authorization Bearer …" without
// its colon): then the line is not shown, so that no token reaches the
// output. It fails closed: the field name anywhere in the text is enough.
func HeaderErrorText(err error) string {
	msg := err.Error()
	if f := NamesCredential(msg); f != "" {
		what, _, _ := strings.Cut(msg, ":")
		return what + ": a line naming " + f + " (not shown: it may hold a credential)"
	}
	return msg
}

// NamesCredential returns the credential field (CredentialFields) whose
// name text holds in any letter case, anywhere, or "".
func NamesCredential(text string) string {
	lower := strings.ToLower(text)
	for _, f := range CredentialFields {
		if strings.Contains(lower, strings.ToLower(f)) {
			return f
		}
	}
	return ""
}

// CredentialField returns the credential field name (CredentialFields), in
// lower case, that name is in any letter case, or "".
func CredentialField(name []byte) string {
	for _, f := range CredentialFields {
		if strings.EqualFold(string(name), f) {
			return strings.ToLower(f)
		}
	}
	return ""
}
