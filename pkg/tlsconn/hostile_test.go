package tlsconn

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
)

// records splits a direction's bytes into TLS records: the offset and
// length (header included) of each.
func records(p []byte) (offs, lens []int) {
	for off := 0; off+5 <= len(p); {
		n := 5 + int(binary.BigEndian.Uint16(p[off+3:]))
		offs, lens = append(offs, off), append(lens, n)
		off += n
	}
	return offs, lens
}

// followGap feeds cl whole, then sv with the bytes [from, to) reported
// lost, and returns the records as text.
func followGap(t *testing.T, keys *keylog.Log, cl, sv []byte, from, to int) []string {
	var out []string
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Event:
			out = append(out, fmt.Sprintf("event %s %s", v.Type, v.Name))
		case *record.Problem:
			out = append(out, fmt.Sprintf("problem %s: %s; %s", v.Kind, v.Detail, v.Hint))
		case *record.ConnNote:
			out = append(out, "note "+v.Kind+": "+v.Message)
		}
	})
	c := newConn(&record.Conn{ID: 1}, sink, Options{Keys: keys})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.ClientData(cl, t0)
	c.ServerData(sv[:from], t0)
	c.ServerGap(int64(to-from), t0)
	c.ServerData(sv[to:], t0)
	c.CloseServer(exchange.EndFIN, t0)
	c.CloseClient(exchange.EndFIN, t0)
	return out
}

// TestGaps: bytes lost inside one record cost that record only (its length
// says where the next one starts); bytes lost across record headers are
// found again by the next record that decrypts under one of the next
// sequence numbers. Either way the events after the loss decode, and the
// loss is reported by the HTTP follower.
func TestGaps(t *testing.T) {
	_, ecC := certs(t)
	for _, v := range []struct {
		name string
		max  uint16
	}{{"TLS 1.3", tls.VersionTLS13}, {"TLS 1.2", tls.VersionTLS12}} {
		cl, sv, kl := sessionWrites(t, &tls.Config{MaxVersion: v.max}, &tls.Config{Certificates: []tls.Certificate{ecC}, MaxVersion: v.max}, 12, true)
		keys := keylog.New()
		keys.Add(kl, "keys.log")
		offs, lens := records(sv)
		if len(offs) < 12 {
			t.Fatalf("%s: %d server records", v.name, len(offs))
		}
		// The last records are the events' (one each), the last chunk
		// and the close_notify.
		k := len(offs) - 8 // an event's record
		for _, c := range []struct {
			what     string
			from, to int
			lost     int // events lost
		}{
			{"inside a record", offs[k] + 10, offs[k] + 30, 1},
			{"a record's header", offs[k] + 2, offs[k] + 7, 1},
			{"three records and a header", offs[k] + 20, offs[k+3] + 3, 4},
		} {
			got := followGap(t, keys, cl, sv, c.from, c.to)
			text := strings.Join(got, "\n")
			if n := strings.Count(text, "event ADDED"); n != 12-c.lost {
				t.Errorf("%s, %s: %d events, want %d:\n%s", v.name, c.what, n, 12-c.lost, text)
			}
			if !strings.Contains(text, "problem "+exchange.KindMissing) {
				t.Errorf("%s, %s: the loss is not reported:\n%s", v.name, c.what, text)
			}
			if strings.Contains(text, "does not authenticate") || strings.Contains(text, "TLS record framing lost") {
				t.Errorf("%s, %s: decryption did not recover:\n%s", v.name, c.what, text)
			}
			_ = lens
		}
	}
}

// TestNoKeys: a connection whose client random is in no key log is a
// problem naming the random (when there are keys for others), and holds at
// most maxWait bytes a direction while it waits; with no key log at all it
// is a note only. A wrong key fails authentication, said once.
func TestNoKeys(t *testing.T) {
	_, ecC := certs(t)
	cl, sv, kl := session(t, &tls.Config{}, &tls.Config{Certificates: []tls.Certificate{ecC}}, 3)
	other := keylog.New()
	other.Add([]byte("CLIENT_RANDOM "+strings.Repeat("ab", 32)+" "+strings.Repeat("cd", 48)+"\n"), "other.log")
	text := strings.Join(followGap(t, other, cl, sv, len(sv), len(sv)), "\n")
	random := strings.Fields(string(kl))[1]
	if !strings.Contains(text, "problem no TLS key for this connection: client random "+random) || !strings.Contains(text, "note tls: ") {
		t.Errorf("no key:\n%s", text)
	}
	text = strings.Join(followGap(t, keylog.New(), cl, sv, len(sv), len(sv)), "\n")
	if strings.Contains(text, "problem") || !strings.Contains(text, "no key log") {
		t.Errorf("no key log at all:\n%s", text)
	}
	// A key log file given that never appeared is named.
	absent := keylog.New()
	missing := filepath.Join(t.TempDir(), "keys.log")
	_ = absent.AddFile(missing)
	text = strings.Join(followGap(t, absent, cl, sv, len(sv), len(sv)), "\n")
	if !strings.Contains(text, "is in none of the key logs; key log "+missing+" never appeared") {
		t.Errorf("key log that never appeared:\n%s", text)
	}
	// The same secrets' lengths, other values: wrong keys.
	wrong := keylog.New()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(kl)), "\n") {
		f := strings.Fields(l)
		lines = append(lines, f[0]+" "+f[1]+" "+strings.Repeat("0", len(f[2])))
	}
	wrong.Add([]byte(strings.Join(lines, "\n")), "wrong.log")
	text = strings.Join(followGap(t, wrong, cl, sv, len(sv), len(sv)), "\n")
	if n := strings.Count(text, "problem TLS record does not authenticate"); n != 2 || !strings.Contains(text, "not this connection's") {
		t.Errorf("wrong keys: want one failure each way:\n%s", text)
	}

	// Waiting for keys that never come is bounded.
	c := newConn(&record.Conn{ID: 1}, record.SinkFunc(func(record.Record) {}), Options{Keys: other})
	t0 := time.Now()
	c.ClientData(cl, t0)
	c.ServerData(sv, t0)
	junk := bytes.Repeat(append([]byte{23, 3, 3, 0x40, 0}, make([]byte, 0x4000)...), 64) // 1 MiB of records
	c.ServerData(junk, t0)
	if n := len(c.sv.buf); n > maxWait+5+maxCiphertext {
		t.Errorf("holds %d bytes waiting for keys", n)
	}
}

// TestHostileRecords: a record longer than TLS allows, and a capture that
// starts after the handshake, are said in one line each; a handshake
// message too long to keep is skipped.
func TestHostileRecords(t *testing.T) {
	var notes, problems []string
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Problem:
			problems = append(problems, v.Kind+": "+v.Detail)
		case *record.ConnNote:
			notes = append(notes, v.Message)
		}
	})
	t0 := time.Now()
	c := newConn(&record.Conn{ID: 1}, sink, Options{Keys: keylog.New()})
	c.ServerData([]byte{23, 3, 3, 0xff, 0xff}, t0) // 65535 bytes: over 2^14 + 2048
	c.CloseServer(exchange.EndFIN, t0)
	c.CloseClient(exchange.EndFIN, t0)
	if len(problems) != 1 || !strings.HasPrefix(problems[0], "not a TLS record: record header 17 03 03 ff ff") {
		t.Errorf("problems %q", problems)
	}
	notes, problems = nil, nil
	c = newConn(&record.Conn{ID: 1}, sink, Options{Keys: keylog.New()})
	c.ServerData(append([]byte{23, 3, 3, 0, 20}, make([]byte, 20)...), t0)
	c.CloseServer(exchange.EndFIN, t0)
	c.CloseClient(exchange.EndFIN, t0)
	if len(notes) != 1 || !strings.Contains(notes[0], "after the handshake, which the capture missed") || len(problems) != 0 {
		t.Errorf("notes %q problems %q", notes, problems)
	}
	// A ClientHello that claims 16 MiB: skipped as it passes, the rest of
	// the direction still read.
	notes, problems = nil, nil
	c = newConn(&record.Conn{ID: 1}, sink, Options{Keys: keylog.New()})
	msg := append([]byte{1, 0xff, 0xff, 0xff}, make([]byte, 1000)...)
	c.ClientData(append([]byte{22, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...), t0)
	if len(c.cl.hs.body) != 0 {
		t.Errorf("kept %d bytes of an oversized handshake message", len(c.cl.hs.body))
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "handshake message of type 1 is 16777215 bytes long") {
		t.Errorf("problems %q", problems)
	}
}

// TestUnsupportedSuite: a cipher suite kwatch does not decrypt (TLS 1.2
// AES-CBC, which Go still speaks when asked) is named.
func TestUnsupportedSuite(t *testing.T) {
	rsaC, _ := certs(t)
	suite := tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA
	cl, sv, kl := session(t, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}},
		&tls.Config{Certificates: []tls.Certificate{rsaC}, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}}, 2)
	keys := keylog.New()
	keys.Add(kl, "keys.log")
	text := strings.Join(followGap(t, keys, cl, sv, len(sv), len(sv)), "\n")
	if !strings.Contains(text, "problem TLS cipher suite not decrypted: TLS 1.2 negotiated TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA") ||
		strings.Count(text, "problem") != 1 {
		t.Errorf("unsupported suite:\n%s", text)
	}
}

// TestHelloRetryRequest: a server that wants another key share answers
// the first ClientHello with a HelloRetryRequest and a compatibility
// ChangeCipherSpec; the client sends a second ClientHello in the clear.
// The connection still decrypts.
func TestHelloRetryRequest(t *testing.T) {
	_, ecC := certs(t)
	cl, sv, kl := session(t, &tls.Config{CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256}},
		&tls.Config{Certificates: []tls.Certificate{ecC}, CurvePreferences: []tls.CurveID{tls.CurveP256}}, 3)
	keys := keylog.New()
	keys.Add(kl, "keys.log")
	for _, step := range []int{0, 5} {
		text := strings.Join(follow(t, keys, cl, sv, step), "\n")
		if n := strings.Count(text, `"Type":"ADDED"`); n != 3 || strings.Contains(text, "*record.Problem") {
			t.Errorf("writes of %d: %d events:\n%s", step, n, text)
		}
	}
}

// TestHandshakeGap: bytes lost inside the server's encrypted handshake
// (its first protected record) cost no application data: the sequence
// numbers stay right although the keys were not known yet, the end of the
// handshake is found by the first record under the application keys, and
// the loss is a warning, not bytes missing from the HTTP response.
func TestHandshakeGap(t *testing.T) {
	_, ecC := certs(t)
	cl, sv, kl := sessionWrites(t, &tls.Config{}, &tls.Config{Certificates: []tls.Certificate{ecC}}, 5, true)
	keys := keylog.New()
	keys.Add(kl, "keys.log")
	offs, _ := records(sv)
	// Records: ServerHello, CCS, the encrypted handshake …
	var k int
	for i, o := range offs {
		if sv[o] == typeApplicationData {
			k = i
			break
		}
	}
	text := strings.Join(followGap(t, keys, cl, sv, offs[k]+10, offs[k]+20), "\n")
	if n := strings.Count(text, "event ADDED"); n != 5 {
		t.Errorf("%d events, want 5:\n%s", n, text)
	}
	if !strings.Contains(text, "problem bytes lost in the TLS handshake") || strings.Contains(text, exchange.KindMissing) ||
		strings.Contains(text, "does not authenticate") {
		t.Errorf("the handshake's loss:\n%s", text)
	}
}

// TestResyncBounded: after a gap that took the framing, bytes full of
// plausible record headers that never decrypt cost a bounded number of
// trial decryptions, and the direction is given up with a problem.
func TestResyncBounded(t *testing.T) {
	_, ecC := certs(t)
	cl, sv, kl := sessionWrites(t, &tls.Config{}, &tls.Config{Certificates: []tls.Certificate{ecC}}, 3, true)
	keys := keylog.New()
	keys.Add(kl, "keys.log")
	offs, _ := records(sv)
	cut := offs[len(offs)-3] + 2 // inside a header: the framing is lost
	junk := bytes.Repeat([]byte{23, 3, 3, 0, 17}, 256<<10/5)
	var problems []string
	c := newConn(&record.Conn{ID: 1}, record.SinkFunc(func(r record.Record) {
		if p, ok := r.(*record.Problem); ok {
			problems = append(problems, p.Kind)
		}
	}), Options{Keys: keys})
	t0 := time.Now()
	c.ClientData(cl, t0)
	c.ServerData(sv[:cut], t0)
	c.ServerGap(100000, t0)
	c.ServerData(junk, t0)
	if c.sv.resyncTotal > maxResyncTries || c.sv.phase != phaseDead {
		t.Errorf("%d trial decryptions, in phase %v", c.sv.resyncTotal, c.sv.phase)
	}
	if strings.Join(problems, "|") != "TLS record framing lost" {
		t.Errorf("problems %q", problems)
	}
}

// TestKeepReusesStore: a direction's held bytes live in one store that is
// appended to in place, moved to its front, or grown, never losing a byte.
func TestKeepReusesStore(t *testing.T) {
	h := &direction{}
	caller := []byte("abcdef")
	h.keep(caller[4:], nil) // the caller's tail: copied into a new store
	if string(h.buf) != "ef" || len(h.store) != 32<<10 || &h.buf[0] != &h.store[0] {
		t.Fatalf("buf %q, store %d bytes", h.buf, len(h.store))
	}
	caller[4] = 'X'
	if string(h.buf) != "ef" {
		t.Fatal("buf aliases the caller's bytes")
	}
	store := &h.store[0]
	h.keep(h.buf, []byte("gh")) // room after buf: appended in place
	h.buf = h.buf[3:]           // as pump drops a record: "h" left
	h.keep(h.buf, make([]byte, 32<<10-1))
	if h.buf[0] != 'h' || len(h.buf) != 32<<10 || &h.store[0] != store || &h.buf[0] != store {
		t.Fatalf("want the tail moved to the store's front: buf[0] %q, %d bytes, same store %v", h.buf[0], len(h.buf), &h.store[0] == store)
	}
	h.keep(h.buf, []byte("i")) // more than the store: grown to twice
	if len(h.buf) != 32<<10+1 || h.buf[0] != 'h' || h.buf[len(h.buf)-1] != 'i' || len(h.store) != 2*(32<<10+1) {
		t.Fatalf("grown store: %d bytes held, %d in store", len(h.buf), len(h.store))
	}
}
