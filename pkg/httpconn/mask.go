package httpconn

import (
	"bytes"

	"github.com/kwatch/kwatch/pkg/exchange"
)

// CredentialMask hides credentials in a client's byte stream that is about
// to be written somewhere else (kwatch stream --record): in each header
// line whose field name is one of the credential fields (Authorization,
// Proxy-Authorization, Cookie, X-Remote-User, Impersonate-User, matched in
// any letter case, RFC 9110 §5.1), every byte of the value is replaced
// with '*', after the scheme word of Authorization and Proxy-Authorization
// ("Bearer"). Lengths do not change, so a recording's TCP sequence numbers
// stay those of the bytes sent. It keeps its state across calls, so a line
// split over several writes is masked too. The zero value is ready; use
// one per connection.
type CredentialMask struct {
	state  maskState
	name   []byte // field name so far, lower case, at most maxFieldName bytes
	scheme []byte // scheme word so far, lower case
}

type maskState uint8

const (
	maskName   maskState = iota // reading a field name at the start of a line
	maskSkip                    // the rest of the line is kept
	maskScheme                  // an Authorization value: spaces, then its scheme word
	maskLead                    // spaces before the credential itself
	maskValue                   // the credential: masked to the end of the line
)

// maxFieldName bounds the name bytes kept: no credential field is longer.
const maxFieldName = 32

// Mask returns p with credentials masked: p itself when there were none
// in it, else a copy (p is what goes on the wire and is not changed).
func (m *CredentialMask) Mask(p []byte) []byte {
	out := p
	for i, b := range p {
		if b == '\n' {
			m.state, m.name, m.scheme = maskName, m.name[:0], m.scheme[:0]
			continue
		}
		switch m.state {
		case maskName:
			switch {
			case b == ':':
				m.state = maskSkip
				if f := exchange.CredentialField(m.name); f != "" {
					m.state = maskLead
					if f == "authorization" || f == "proxy-authorization" {
						m.state = maskScheme
					}
				}
			case len(m.name) >= maxFieldName || b == ' ' || b == '\r':
				m.state = maskSkip
			default:
				m.name = append(m.name, lower(b))
			}
			continue
		case maskSkip:
			continue
		case maskScheme:
			if (b == ' ' || b == '\t') && len(m.scheme) == 0 {
				continue // spaces before the scheme word
			}
			m.scheme = append(m.scheme, lower(b))
			if isSchemePrefix(m.scheme) {
				if b == ' ' {
					m.state = maskLead
				}
				continue
			}
			m.state = maskValue
		case maskLead:
			if b == ' ' || b == '\t' {
				continue
			}
			m.state = maskValue
		}
		// maskValue
		if b == '\r' {
			continue
		}
		if len(out) > 0 && &out[0] == &p[0] {
			out = bytes.Clone(p)
		}
		out[i] = '*'
	}
	return out
}

// isSchemePrefix reports whether s is the start of a kept scheme word and
// its space.
func isSchemePrefix(s []byte) bool {
	for _, a := range exchange.AuthSchemes {
		if len(s) <= len(a) && string(s) == a[:len(s)] {
			return true
		}
	}
	return false
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}
