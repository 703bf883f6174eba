package tlsconn

import (
	"bytes"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestLateKeys is what kwatch attach meets: the secrets come from the
// process while its packets flow, each after the bytes that need it. All
// of both directions is fed first, with no secret at all; then the key log
// lines come one by one (the handshake secrets before the traffic ones, as
// crypto/tls logs them), each followed by Retry: the records waited for
// them, and the session decrypts as if the keys had been there all along.
func TestLateKeys(t *testing.T) {
	_, ecC := certs(t)
	srv := &tls.Config{Certificates: []tls.Certificate{ecC}, MaxVersion: tls.VersionTLS13}
	for _, max := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		cl, sv, keys := session(t, &tls.Config{MaxVersion: max, NextProtos: []string{"http/1.1"}}, srv, 5)
		want := follow(t, func() *keylog.Log { k := keylog.New(); k.Add(keys, "keys.log"); return k }(), cl, sv, 0)

		sink, out := testutil.RecordLines(t)
		kl := keylog.New()
		c := newConn(&record.Conn{ID: 1}, sink, Options{Keys: kl})
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c.ClientData(cl, t0)
		c.ServerData(sv, t0)
		if n := testutil.Count(*out, `"Type":"ADDED"`); n != 0 {
			t.Fatalf("%d events decrypted with no keys", n)
		}
		for _, line := range bytes.SplitAfter(keys, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			kl.Add(line, "keys.log")
			c.Retry(t0)
		}
		c.CloseServer(exchange.EndFIN, t0)
		c.CloseClient(exchange.EndFIN, t0)
		if got := strings.Join(*out, "\n"); got != strings.Join(want, "\n") {
			t.Errorf("TLS %x: with keys coming late:\n%s\nwith keys first:\n%s", max, got, strings.Join(want, "\n"))
		}
	}
}
