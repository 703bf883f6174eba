package httpconn_test

import (
	"encoding/json"
	"fmt"
	"github.com/kwatch/kwatch/internal/testutil"
	"math/rand"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/chunk"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// t0 is the time every fuzzed byte arrives at: a record's time depends on
// which piece completed it, so the comparison of whole and split feeding
// keeps one time for all of them.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var testConn = &record.Conn{ID: 1,
	Client: netip.MustParseAddrPort("10.0.0.1:40000"), Server: netip.MustParseAddrPort("10.0.0.2:8001")}

// fuzzOptions returns the Options a fuzz input runs with: the defaults, or
// (mode bit 0) limits small enough for the fuzzer to reach them.
func fuzzOptions(mode uint8) wire.Options {
	opt := wire.Options{}
	if mode&1 != 0 {
		opt.MaxHeaderBytes = 128
		opt.MaxEventBytes = 64
		opt.MaxEventChunks = 3
		opt.Chunk = chunk.Limits{MaxLineBytes: 16, MaxTrailerBytes: 48}
	}
	opt.Decode.ShowSecrets = mode&2 != 0
	return opt
}

// ending returns how the fuzzed streams end (mode bits 2-3).
func ending(mode uint8) exchange.Ending { return exchange.Ending(mode >> 2 & 3) }

// render writes a record as one line of text: its type and its fields as
// JSON (pointers followed), so that two runs can be compared line by line.
func render(r record.Record) string {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Sprintf("%T %+v (json: %v)", r, r, err)
	}
	return fmt.Sprintf("%T %s", r, b)
}

// recorder collects records as text and checks what must hold of every
// record, however broken the input.
type recorder struct {
	t         *testing.T
	lines     []string
	maxChunks int // Options.MaxEventChunks, 0 for the default
}

func (rc *recorder) Emit(r record.Record) {
	rc.lines = append(rc.lines, render(r))
	switch v := r.(type) {
	case *record.Problem:
		if v.Kind == "" || v.Conn != testConn {
			rc.t.Errorf("problem without kind or connection: %s", render(r))
		}
	case *record.Event:
		// An event's chunks carried all of its bytes (unless more
		// chunks carried it than are listed).
		if len(v.Chunks) > 0 && (rc.maxChunks == 0 || len(v.Chunks) < rc.maxChunks) {
			var n int64
			for _, c := range v.Chunks {
				n += c.Bytes
			}
			if n != v.Length {
				rc.t.Errorf("event of %d bytes, but its chunks carried %d: %s", v.Length, n, render(r))
			}
		}
	}
}

// feed hands p to f in pieces chosen by next.
func feed(p []byte, next func(rest int) int, f func([]byte, time.Time)) {
	for len(p) > 0 {
		k := next(len(p))
		f(p[:k], t0)
		p = p[k:]
	}
}

func whole(rest int) int { return rest }

// randomSplits cuts at random places, often into small pieces,
// reproducibly for a seed.
func randomSplits(rng *rand.Rand) func(int) int {
	return func(rest int) int {
		if rng.Intn(2) == 0 {
			return 1 + rng.Intn(min(rest, 8))
		}
		return 1 + rng.Intn(rest)
	}
}

// runConn feeds the client's bytes and then the server's, each in pieces
// chosen by next, then ends both streams.
func runConn(t *testing.T, client, server []byte, mode uint8, next func(int) int) []string {
	opt := fuzzOptions(mode)
	rc := &recorder{t: t, maxChunks: opt.MaxEventChunks}
	c := wire.New(testConn, rc, opt)
	feed(client, next, c.ClientData)
	feed(server, next, c.ServerData)
	c.CloseClient(ending(mode), t0)
	c.CloseServer(ending(mode), t0)
	return rc.lines
}

// runGaps interleaves the two directions piece by piece and loses bytes at
// random places, as a capture does; only the checks on each record apply.
func runGaps(t *testing.T, client, server []byte, mode uint8, rng *rand.Rand) {
	opt := fuzzOptions(mode)
	rc := &recorder{t: t, maxChunks: opt.MaxEventChunks}
	c := wire.New(testConn, rc, opt)
	next := randomSplits(rng)
	for len(client) > 0 || len(server) > 0 {
		p, data, gap := &client, c.ClientData, c.ClientGap
		if len(client) == 0 || len(server) > 0 && rng.Intn(2) == 0 {
			p, data, gap = &server, c.ServerData, c.ServerGap
		}
		k := next(len(*p))
		switch rng.Intn(8) {
		case 0: // the piece was lost
			gap(int64(k), t0)
		case 1: // a huge loss, then the piece
			gap(1<<40+int64(rng.Intn(1000)), t0)
			data((*p)[:k], t0)
		default:
			data((*p)[:k], t0)
		}
		*p = (*p)[k:]
	}
	c.CloseServer(ending(mode), t0)
	c.CloseClient(ending(mode), t0)
}

// FuzzConn decodes arbitrary client and server bytes. Fed whole or in
// pieces chosen by seed, the records must be the same; with bytes lost at
// random places (ClientGap, ServerGap) it must still not panic. mode picks
// small limits, Secret display and how the streams end.
//
// The seed corpus is testdata/fuzz/FuzzConn (see connSeeds).
func FuzzConn(f *testing.F) {
	f.Fuzz(func(t *testing.T, client, server []byte, seed int64, mode uint8) {
		w := runConn(t, client, server, mode, whole)
		s := runConn(t, client, server, mode, randomSplits(rand.New(rand.NewSource(seed))))
		if d := diffLines(w, s); d != "" {
			t.Fatalf("split input: records differ from whole input at %s", d)
		}
		runGaps(t, client, server, mode, rand.New(rand.NewSource(seed)))
	})
}

// diffLines describes the first line where got differs from want, or "".
func diffLines(want, got []string) string {
	i, w, g, ok := testutil.FirstDiff(want, got)
	if !ok {
		return ""
	}
	return fmt.Sprintf("record %d:\n  whole: %s\n  split: %s\nwhole:\n\t%s", i, w, g, strings.Join(want, "\n\t"))
}
