package tlsconn

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/httpconn"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
)

// trafficSecrets returns the TLS 1.3 application traffic secrets of the
// one connection in key log text kl.
func trafficSecrets(t *testing.T, kl []byte) (client, server []byte) {
	t.Helper()
	for _, l := range strings.Split(string(kl), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		b, err := hex.DecodeString(f[2])
		if err != nil {
			t.Fatal(err)
		}
		switch f[0] {
		case keylog.LabelClientTraffic0:
			client = b
		case keylog.LabelServerTraffic0:
			server = b
		}
	}
	if client == nil || server == nil {
		t.Fatalf("no traffic secrets in %s", kl)
	}
	return client, server
}

// appSeqs returns, for each record of p, its sequence number under the
// application traffic secret, or -1 for records it does not open (the
// clear ones and those under the handshake secret), and the suite that
// opened them.
func appSeqs(t *testing.T, p, secret []byte) ([]int, uint16) {
	t.Helper()
	offs, lens := records(p)
	for id, s := range suites {
		if !s.tls13 {
			continue
		}
		cs, err := newTLS13State(s, secret)
		if err != nil {
			continue
		}
		seqs := make([]int, len(offs))
		found := false
		for i := range offs {
			seqs[i] = -1
			rec := p[offs[i] : offs[i]+lens[i]]
			for seq := uint64(0); seq < 256; seq++ {
				if _, _, err := cs.open(nil, rec[:5], rec[5:], seq); err == nil {
					seqs[i], found = int(seq), true
					break
				}
			}
		}
		if found {
			return seqs, id
		}
	}
	t.Fatal("no TLS 1.3 suite opens the records")
	return nil, 0
}

// TestJoin decrypts a real TLS 1.3 session from the middle on, with only
// what kwatch attach reads from a running process: the suite, each side's
// traffic secret and the sequence number of its next record when read, a
// few records later than the capture starts (the window finds it). The
// watch events from the join on are those of the whole session.
func TestJoin(t *testing.T) {
	_, ecC := certs(t)
	srv := &tls.Config{Certificates: []tls.Certificate{ecC}, MaxVersion: tls.VersionTLS13}
	cl, sv, kl := sessionWrites(t, &tls.Config{MaxVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}, srv, 20, true)
	cSecret, sSecret := trafficSecrets(t, kl)
	svSeqs, suite := appSeqs(t, sv, sSecret)
	clSeqs, _ := appSeqs(t, cl, cSecret)
	whole := keylog.New()
	whole.Add(kl, "keys.log")
	all := follow(t, whole, cl, sv, 0)

	svOffs, _ := records(sv)
	clOffs, _ := records(cl)
	// Join the server's direction at its record of sequence number 12
	// (mid-watch), the client's at its last record (its close_notify).
	cut := -1
	for i, s := range svSeqs {
		if s == 12 {
			cut = i
		}
	}
	if cut < 0 {
		t.Fatalf("no server record of sequence number 12: %v", svSeqs)
	}
	clCut := len(clOffs) - 1
	if clSeqs[clCut] < 0 {
		t.Fatalf("the client's last record is not an application one: %v", clSeqs)
	}
	rec := &record.Conn{ID: 1, Client: netip.MustParseAddrPort("127.0.0.1:50000"), Server: netip.MustParseAddrPort("127.0.0.1:6443")}
	for _, late := range []uint64{0, 3, 40} {
		kl := keylog.New()
		kl.AddJoined(keylog.Joined{Client: rec.Client, Server: rec.Server, Version: tls.VersionTLS13, Suite: suite,
			ClientTraffic: cSecret, ServerTraffic: sSecret,
			ClientSeq: uint64(clSeqs[clCut]) + late, ServerSeq: 12 + late, Source: "the test"})
		sink, out := testutil.RecordLines(t)
		c := newConn(rec, sink, Options{Keys: kl, Joins: true})
		c.opt.InnerJoined = func(alpn string, server bool, first []byte, at time.Time, decrypted func()) exchange.Follower {
			decrypted()
			h := httpconn.New(rec, sink, &exchange.Limits{}, nil)
			h.StartMidStream(at)
			return h
		}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c.ServerData(sv[svOffs[cut]:], t0)
		c.ClientData(cl[clOffs[clCut]:], t0)
		c.CloseServer(exchange.EndFIN, t0)
		c.CloseClient(exchange.EndFIN, t0)
		got := *out
		if n := testutil.Count(got, `"Kind":"tls-decrypted"`); n != 1 || testutil.Count(got, "joined mid-connection") != 1 {
			t.Errorf("read %d late: want one note of the join:\n%s", late, strings.Join(got, "\n"))
		}
		// The events from the join on: the last ones of the whole.
		var want, have []string
		for _, l := range all {
			if strings.HasPrefix(l, "*record.Event") {
				want = append(want, eventID(l))
			}
		}
		for _, l := range got {
			if strings.HasPrefix(l, "*record.Event") {
				have = append(have, eventID(l))
			}
		}
		t.Logf("read %d late: %d of %d events after the join", late, len(have), len(want))
		if late <= seqBelow {
			if len(have) < 5 || !slicesHasSuffix(want, have) {
				t.Errorf("read %d late: events %v, want the last of %v", late, have, want)
			}
		}
	}
}

// eventID is an event record's name and resourceVersion.
func eventID(line string) string {
	i := strings.Index(line, `"Name":"`)
	j := strings.Index(line, `"ResourceVersion":"`)
	if i < 0 || j < 0 {
		return line
	}
	name := line[i+8:]
	rv := line[j+19:]
	return name[:strings.IndexByte(name, '"')] + "@" + rv[:strings.IndexByte(rv, '"')]
}

func slicesHasSuffix(all, tail []string) bool {
	if len(tail) > len(all) {
		return false
	}
	return bytes.Equal([]byte(strings.Join(all[len(all)-len(tail):], ",")), []byte(strings.Join(tail, ",")))
}
