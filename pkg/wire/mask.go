package wire

import (
	"github.com/kwatch/kwatch/pkg/h2conn"
	"github.com/kwatch/kwatch/pkg/httpconn"
)

// CredentialMask hides the credentials in a client's byte stream that is
// about to be written somewhere else (kwatch stream --record), keeping
// every length so that a recording's TCP sequence numbers stay those of
// the bytes sent. Use one per connection.
type CredentialMask interface {
	// Mask returns p with credentials masked: p itself when there were
	// none, else a copy.
	Mask(p []byte) []byte
	// Broken reports whether the mask lost track of the stream (HTTP/2:
	// of its HPACK header blocks), so that what follows cannot be masked.
	Broken() bool
}

// NewCredentialMask returns the mask of a client's stream: HTTP/2's
// (pkg/h2conn, which reads HPACK) when http2 is set, else HTTP/1.1's
// (pkg/httpconn, header lines).
func NewCredentialMask(http2 bool) CredentialMask {
	if http2 {
		return &h2conn.CredentialMask{}
	}
	return http1Mask{&httpconn.CredentialMask{}}
}

// http1Mask is HTTP/1.1's mask, which never loses track: every line is
// read on its own.
type http1Mask struct{ *httpconn.CredentialMask }

func (http1Mask) Broken() bool { return false }
