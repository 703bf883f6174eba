package wire_test

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/h2conn"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// interleave cuts client and server into pieces of n bytes, alternating,
// as a capture's packets come.
func interleave(client, server []byte, n int) []testutil.Piece {
	var out []testutil.Piece
	for len(client) > 0 || len(server) > 0 {
		for _, d := range []struct {
			p      *[]byte
			client bool
		}{{&client, true}, {&server, false}} {
			if k := min(n, len(*d.p)); k > 0 {
				out = append(out, testutil.Piece{Client: d.client, P: (*d.p)[:k]})
				*d.p = (*d.p)[k:]
			}
		}
	}
	return out
}

// sniffJoin feeds pieces to a switchboard as kwatch pcap makes it, in
// writes of at most step bytes, and returns its records as lines and
// whether it took the connection for HTTP/2 joined mid-connection.
func sniffJoin(t *testing.T, pieces []testutil.Piece, step int) ([]string, bool) {
	t.Helper()
	sink, lines := testutil.RecordLines(t)
	joined := false
	budget := event.NewBudget(1 << 20)
	c := wire.New(&record.Conn{ID: 1}, record.SinkFunc(func(r record.Record) {
		if n, ok := r.(*record.ConnNote); ok && n.Kind == "h2-joined" && strings.HasPrefix(n.Message, "HTTP/2, joined") {
			joined = true
		}
		sink.Emit(r)
	}), wire.Options{MidStream: true, Limits: exchange.Limits{Budget: budget}})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	testutil.Feed(pieces, step, t0, c.ClientData, c.ServerData)
	c.CloseClient(exchange.EndFIN, t0)
	c.CloseServer(exchange.EndFIN, t0)
	if h := budget.Held(); h != 0 {
		t.Fatalf("%d bytes still reserved from the budget", h)
	}
	return *lines, joined
}

// holdsFrames reports whether p holds, by x/net/http2's own header reader,
// at least two frame headers in a row that start within MaxJoinSkip bytes
// (or one frame that ends p): what any connection taken for HTTP/2 must
// hold in one direction.
func holdsFrames(p []byte) bool {
	for o := 0; o <= h2conn.MaxJoinSkip && o < len(p); o++ {
		at, n := o, 0
		for at+9 <= len(p) && n < 2 {
			fh, err := http2.ReadFrameHeader(bytes.NewReader(p[at:]))
			if err != nil || fh.Type > http2.FrameContinuation {
				break
			}
			n++
			at += 9 + int(fh.Length)
		}
		if n >= 2 || n == 1 && at == len(p) {
			return true
		}
	}
	return false
}

// FuzzJoin feeds the switchboard both directions of a connection whose
// capture starts anywhere, as kwatch pcap does: it must never panic, hold
// nothing of the budget at the end, decide the same whatever the split,
// and take the connection for HTTP/2 only when a direction holds frame
// headers in a row. Seeds are the recorded h2c connections cut inside a
// frame, HTTP/1.1 text, TLS records and junk.
func FuzzJoin(f *testing.F) {
	for _, name := range []string{"h2c-reset-lo.pcap", "h2c-gzip-lo.pcap"} {
		var dirs [2][]byte
		for _, pc := range testutil.ConnPieces(f, filepath.Join("../../testdata/captures", name)) {
			i := 1
			if pc.Client {
				i = 0
			}
			dirs[i] = append(dirs[i], pc.P...)
		}
		for _, cut := range []int{0, 5, 40, 120} {
			f.Add(dirs[0][min(cut+24, len(dirs[0])):min(cut+600, len(dirs[0]))], dirs[1][cut:min(cut+3000, len(dirs[1]))], int64(cut))
		}
	}
	f.Add([]byte("GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n"), []byte("HTTP/1.1 200 OK\r\n\r\n"), int64(1))
	f.Add([]byte{}, []byte(`e","namespace":"ns"}}}`+"\n\r\n1a\r\n"), int64(2))
	f.Add([]byte{0x17, 3, 3, 0, 5, 1, 2, 3, 4, 5}, []byte{0x17, 3, 3, 0, 2, 1, 2}, int64(3))
	f.Add([]byte{0, 0, 0, 4, 1, 0, 0, 0, 0}, []byte{0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0x40, 0}, int64(4))
	f.Fuzz(func(t *testing.T, client, server []byte, seed int64) {
		pieces := interleave(client, server, 1+int(uint64(seed)%1500))
		whole, joined := sniffJoin(t, pieces, 0)
		step := 1 + int(uint64(seed)%17)
		if got, j := sniffJoin(t, pieces, step); j != joined || strings.Join(got, "\n") != strings.Join(whole, "\n") {
			t.Fatalf("writes of %d bytes differ from whole writes:\n%s\nwhole:\n%s", step, strings.Join(got, "\n"), strings.Join(whole, "\n"))
		}
		if joined && !holdsFrames(client) && !holdsFrames(server) {
			t.Fatalf("taken for HTTP/2 without frame headers in a row:\nclient % x\nserver % x", client, server)
		}
	})
}

// TestJoinNotTaken: random bytes, and HTTP/1.1 watches cut anywhere (a
// capture that starts inside a request or a chunked JSON body), are never
// taken for HTTP/2.
func TestJoinNotTaken(t *testing.T) {
	rnd := rand.New(rand.NewPCG(11, 12))
	for i := range 300 {
		cl := make([]byte, rnd.IntN(3000))
		sv := make([]byte, rnd.IntN(70000))
		for _, p := range [][]byte{cl, sv} {
			for j := range p {
				p[j] = byte(rnd.Uint32())
			}
		}
		if _, joined := sniffJoin(t, interleave(cl, sv, 1+rnd.IntN(1500)), 0); joined {
			t.Fatalf("random connection %d taken for HTTP/2", i)
		}
	}
	for _, name := range []string{"watch-lo.pcap", "watchlist-gzip-lo.pcap", "proto-lo.pcap", "cbor-lo.pcap"} {
		pieces := testutil.ConnPieces(t, filepath.Join("../../testdata/captures", name))
		cl, sv := 0, 0
		for k, pc := range pieces {
			for _, d := range []int{0, 1, 7, len(pc.P) / 2} {
				if pc.Client {
					d = 0
				}
				if _, joined := sniffJoin(t, testutil.CutPieces(pieces, cl, sv+d), 0); joined {
					t.Fatalf("%s cut at packet %d (+%d) taken for HTTP/2", name, k, d)
				}
			}
			if pc.Client {
				cl += len(pc.P)
			} else {
				sv += len(pc.P)
			}
		}
	}
}
