package tlsconn

import (
	"bytes"
	"time"

	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/h2conn"
	"github.com/kwatch/kwatch/pkg/httpconn"
	"github.com/kwatch/kwatch/pkg/record"
)

// newConn is New with an Options.Inner that follows the decrypted bytes as
// pkg/wire does (these tests cannot import it: it imports tlsconn): HTTP/2
// when ALPN chose h2 or the client's first bytes are the preface, else
// HTTP/1.1, problems located in the decrypted bytes.
func newConn(rec *record.Conn, sink record.Sink, opt Options) *Conn {
	locate := func(p *record.Problem) {
		if p.Where != "" {
			p.Where = "decrypted " + p.Where
		}
	}
	opt.Inner = func(alpn string, server bool, first []byte, t time.Time, decrypted func()) exchange.Follower {
		h2 := alpn == "h2" || !server && bytes.HasPrefix(first, []byte("PRI * HTTP/2"))
		if !h2 {
			decrypted()
			return httpconn.New(rec, sink, &exchange.Limits{Budget: opt.Budget, Locate: locate}, nil)
		}
		rec.HTTP2 = true
		decrypted()
		sink.Emit(&record.ConnNote{Conn: rec, Time: t, Kind: "h2", Message: "HTTP/2"})
		return h2conn.New(rec, sink, h2conn.Options{Locate: locate})
	}
	return New(rec, sink, opt)
}
