package wire_test

import (
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// junkRecords is n TLS 1.3 application_data records of size bytes each,
// of random bytes: what a connection whose keys are in no key log sends.
func junkRecords(n, size int) []byte {
	var out []byte
	for range n {
		out = append(out, 0x17, 3, 3, byte(size>>8), byte(size))
		b := make([]byte, size)
		rand.Read(b)
		out = append(out, b...)
	}
	return out
}

// runShared feeds each connection's pieces, one connection after the
// other, to switchboards that share one key log (as kwatch pcap's
// connections of one capture do); it returns the events and notes of
// the last.
func runShared(t *testing.T, kl *keylog.Log, conns [][]testutil.Piece) *joined {
	t.Helper()
	var j *joined
	budget := event.NewBudget(0)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, pieces := range conns {
		j = &joined{events: map[int][]*record.Event{}}
		jj := j
		sink := record.SinkFunc(func(r record.Record) {
			switch v := r.(type) {
			case *record.Event:
				jj.events[v.Exchange] = append(jj.events[v.Exchange], v)
			case *record.ConnNote:
				jj.notes = append(jj.notes, v)
			case *record.Problem:
				jj.problems = append(jj.problems, v)
			}
		})
		c := wire.New(&record.Conn{ID: i + 1}, sink, wire.Options{MidStream: true, Keys: kl, NoWait: true, Limits: exchange.Limits{Budget: budget}})
		testutil.Feed(pieces, 0, t0, c.ClientData, c.ServerData)
		c.CloseClient(exchange.EndFIN, t0)
		c.CloseServer(exchange.EndFIN, t0)
	}
	if h := budget.Held(); h != 0 {
		t.Errorf("%d bytes still reserved from the budget", h)
	}
	return j
}

// TestTrialBudgetShared: connections of the capture whose keys are in no
// key log (kubelet's, kubectl's on port 6443) come before the one whose
// secrets the key log holds; trying theirs must not spend what the keyed
// one needs.
func TestTrialBudgetShared(t *testing.T) {
	pieces := testutil.ConnPieces(t, "../../testdata/captures/tls13-h2-lo.pcap")
	keys, err := os.ReadFile("../../testdata/captures/tls13-h2.keys.log")
	if err != nil {
		t.Fatal(err)
	}
	real := testutil.CutPieces(pieces, 1831, 1941)
	for _, tc := range []struct {
		name         string
		others, junk int
	}{
		{"9 other key log connections, 3 unkeyed connections", 9, 3},
		{"63 other key log connections, 1 unkeyed connection", 63, 1},
		{"3 other key log connections, 40 unkeyed connections", 3, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log strings.Builder
			for i := range tc.others {
				fmt.Fprintf(&log, "CLIENT_TRAFFIC_SECRET_0 %064x %s\n", i+1, strings.Repeat("ab", 32))
				fmt.Fprintf(&log, "SERVER_TRAFFIC_SECRET_0 %064x %s\n", i+1, strings.Repeat("cd", 32))
			}
			log.Write(keys) // the real connection's, the most recent
			kl := keylog.New()
			kl.Add([]byte(log.String()), "keys.log")
			var conns [][]testutil.Piece
			for range tc.junk {
				conns = append(conns, []testutil.Piece{
					{Client: true, P: junkRecords(10, 64)},
					{Client: false, P: junkRecords(10, 64)},
				})
			}
			conns = append(conns, real)
			start := time.Now()
			got := runShared(t, kl, conns)
			t.Logf("%v", time.Since(start))
			if len(got.events) == 0 {
				t.Errorf("the keyed connection is not decrypted: %v", noteText(got.notes))
			}
		})
	}
}

// TestTrialManyConnsBigLog: a key log of many connections, and many
// mid-stream TLS connections whose keys it does not hold: time stays
// bounded once the capture's budget of openings is spent.
func TestTrialManyConnsBigLog(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	var log strings.Builder
	for i := range 100000 {
		fmt.Fprintf(&log, "CLIENT_TRAFFIC_SECRET_0 %064x %s\n", i+1, strings.Repeat("ab", 32))
		fmt.Fprintf(&log, "SERVER_TRAFFIC_SECRET_0 %064x %s\n", i+1, strings.Repeat("cd", 32))
	}
	kl := keylog.New()
	kl.Add([]byte(log.String()), "keys.log")
	for _, size := range []int{64, 2000} {
		var conns [][]testutil.Piece
		for range 2000 {
			conns = append(conns, []testutil.Piece{
				{Client: true, P: junkRecords(2, size)},
				{Client: false, P: junkRecords(2, size)},
			})
		}
		start := time.Now()
		got := runShared(t, kl, conns)
		d := time.Since(start)
		t.Logf("%d connections of %d-byte records: %v", len(conns), size, d)
		// Before: 6.5 s (the key log scanned for each connection).
		if d > 20*time.Second {
			t.Errorf("%d connections took %v", len(conns), d)
		}
		if size == 64 && !slices.ContainsFunc(got.notes, func(n *record.ConnNote) bool { return strings.Contains(n.Message, "budget for trying key log secrets") }) {
			t.Errorf("the last connection: %v", noteText(got.notes))
		}
	}
}
