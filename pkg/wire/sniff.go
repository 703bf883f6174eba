package wire

import (
	"bytes"
	"fmt"
	"time"

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
