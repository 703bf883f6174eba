package tlsconn

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/keylog"
)

// FuzzConn feeds the TLS follower both directions of a connection, whole
// and in writes of 1 to 17 bytes, with a key log: it must never panic, and
// what it decodes must not depend on how the bytes were split. Seeds are
// real crypto/tls sessions (TLS 1.3 and 1.2) with their key logs.
func FuzzConn(f *testing.F) {
	rsaC, ecC := certs(f)
	for _, c := range []struct {
		max  uint16
		cert tls.Certificate
	}{{tls.VersionTLS13, ecC}, {tls.VersionTLS12, rsaC}} {
		cl, sv, kl := sessionWrites(f, &tls.Config{MaxVersion: c.max, NextProtos: []string{"http/1.1"}},
			&tls.Config{Certificates: []tls.Certificate{c.cert}, MaxVersion: c.max}, 3, true)
		f.Add(cl, sv, kl, int64(3))
	}
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0}, []byte{23, 3, 3, 0, 17}, []byte("CLIENT_RANDOM 00 00\n"), int64(1))
	f.Fuzz(func(t *testing.T, client, server, keyLog []byte, seed int64) {
		keys := keylog.New()
		keys.Add(keyLog, "fuzz.log")
		whole := follow(t, keys, client, server, 0)
		step := 1 + int(uint64(seed)%17)
		if got := follow(t, keys, client, server, step); strings.Join(got, "\n") != strings.Join(whole, "\n") {
			t.Fatalf("writes of %d bytes differ from whole writes:\n%s\nwhole:\n%s", step, strings.Join(got, "\n"), strings.Join(whole, "\n"))
		}
	})
}
