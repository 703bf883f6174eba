package tlsconn

import (
	"bytes"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/event"
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

// lateFeed feeds a session's two directions in 1 KiB writes, client
// first, to c, calling at once the server's first atServer bytes are fed
// (at the end for 0), and fails if a direction ever holds more than
// maxWait and a record while it waits.
func lateFeed(t *testing.T, c *Conn, cl, sv []byte, t0 time.Time, atServer int, at func()) {
	t.Helper()
	for _, d := range []struct {
		p    []byte
		feed func([]byte, time.Time)
		h    *direction
	}{{cl, c.ClientData, c.cl}, {sv, c.ServerData, c.sv}} {
		for p := d.p; len(p) > 0; {
			n := min(len(p), 1024)
			d.feed(p[:n], t0)
			p = p[n:]
			if d.h == c.sv && atServer > 0 && len(sv)-len(p) >= atServer && at != nil {
				at()
				at = nil
			}
			if len(d.h.buf) > maxWait+5+maxCiphertext {
				t.Fatalf("%d bytes held waiting for keys", len(d.h.buf))
			}
		}
	}
	if at != nil {
		at()
	}
}

// TestLateKeysHostile: secrets that never come for a connection (others'
// do), that come wrong, or only in part: the connection is given up
// within maxWait a direction and says why, and secrets coming after
// that change nothing.
func TestLateKeysHostile(t *testing.T) {
	_, ecC := certs(t)
	srv := &tls.Config{Certificates: []tls.Certificate{ecC}, MaxVersion: tls.VersionTLS13}
	cl, sv, keys := session(t, &tls.Config{NextProtos: []string{"http/1.1"}}, srv, 2000)
	if len(sv) < 2*maxWait {
		t.Fatalf("the server sent %d bytes, want more than %d", len(sv), 2*maxWait)
	}
	lines := bytes.SplitAfter(bytes.TrimSpace(keys), []byte("\n"))
	other := []byte("CLIENT_TRAFFIC_SECRET_0 " + strings.Repeat("ab", 32) + " " + strings.Repeat("cd", 32) + "\n")
	wrong := func(line []byte) []byte {
		f := bytes.Fields(line)
		s := bytes.Repeat([]byte("0"), len(f[2]))
		return []byte(string(f[0]) + " " + string(f[1]) + " " + string(s) + "\n")
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		before [][]byte // secrets there before the bytes
		after  [][]byte // secrets that come later
		at     int      // after this many of the server's bytes (0: all)
		says   string
	}{
		{"never", [][]byte{other}, lines, 0, "waited for keys"},
		{"wrong", nil, func() (w [][]byte) {
			for _, l := range lines {
				w = append(w, wrong(l))
			}
			return w
		}(), maxWait / 2, "TLS record does not authenticate"},
		{"handshake secrets only", func() (h [][]byte) {
			for _, l := range lines {
				if bytes.Contains(l, []byte("HANDSHAKE")) {
					h = append(h, l)
				}
			}
			return h
		}(), lines, 0, "waited for keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink, out := testutil.RecordLines(t)
			kl := keylog.New()
			for _, l := range tc.before {
				kl.Add(l, "uprobe")
			}
			c := newConn(&record.Conn{ID: 1}, sink, Options{Keys: kl, Budget: event.NewBudget(0)})
			lateFeed(t, c, cl, sv, t0, tc.at, func() {
				for _, l := range tc.after {
					kl.Add(l, "uprobe")
					c.Retry(t0)
				}
			})
			c.CloseServer(exchange.EndFIN, t0)
			c.CloseClient(exchange.EndFIN, t0)
			got := strings.Join(*out, "\n")
			if !strings.Contains(got, tc.says) {
				t.Errorf("records do not say %q:\n%s", tc.says, got)
			}
			if n := testutil.Count(*out, `"Type":"ADDED"`); tc.name != "wrong" && n > 0 {
				t.Errorf("%d events decrypted after the connection was given up", n)
			}
			if c.cl.reserved != 0 || c.sv.reserved != 0 {
				t.Errorf("budget still reserved: %d, %d", c.cl.reserved, c.sv.reserved)
			}
		})
	}
}
