package wire_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/h2conn"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// joined is what a run of one connection through the switchboard gave.
type joined struct {
	events   map[int][]*record.Event // by stream
	notes    []*record.ConnNote
	problems []*record.Problem
	reqs     map[int]*record.Request
	resps    map[int]*record.Response
	ends     map[int]*record.End
	http2    bool
}

// runJoined feeds pieces to a switchboard that takes a capture's first
// bytes as it would (kwatch pcap: MidStream), each piece cut into writes
// of at most step bytes, and ends both directions.
func runJoined(t testing.TB, pieces []testutil.Piece, step int) *joined {
	t.Helper()
	j := &joined{events: map[int][]*record.Event{}, reqs: map[int]*record.Request{}, resps: map[int]*record.Response{}, ends: map[int]*record.End{}}
	budget := event.NewBudget(0)
	sink := record.SinkFunc(func(r record.Record) {
		if c, ok := r.(interface{ Connection() *record.Conn }); ok && c.Connection() != nil && c.Connection().HTTP2 {
			j.http2 = true
		}
		switch v := r.(type) {
		case *record.Event:
			j.events[v.Exchange] = append(j.events[v.Exchange], v)
		case *record.ConnNote:
			j.notes = append(j.notes, v)
		case *record.Problem:
			// The harness's server FIN (or the capture's RST_STREAM)
			// cutting a watch is a warning of its own (KindCut), not
			// what these tests look at.
			if v.Kind != record.KindCut {
				j.problems = append(j.problems, v)
			}
		case *record.Request:
			j.reqs[v.Exchange] = v
		case *record.Response:
			j.resps[v.Exchange] = v
		case *record.End:
			j.ends[v.Exchange] = v
		}
	})
	c := wire.New(&record.Conn{ID: 1}, sink, wire.Options{MidStream: true, Limits: exchange.Limits{Budget: budget}})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	testutil.Feed(pieces, step, t0, c.ClientData, c.ServerData)
	c.CloseClient(exchange.EndFIN, t0)
	c.CloseServer(exchange.EndFIN, t0)
	if h := budget.Held(); h != 0 {
		t.Errorf("%d bytes still reserved from the budget", h)
	}
	return j
}

// eventText is what an event is compared by: its type, object and
// resourceVersion, and the DATA frames that carried it (length and offset
// in the server's stream, from off).
func eventText(ev *record.Event, off int) string {
	var fr []string
	for _, f := range ev.Frames {
		fr = append(fr, fmt.Sprintf("%d@%d", f.Length, f.Offset+int64(off)))
	}
	return fmt.Sprintf("%s %s %s/%s rv %s frames %s", ev.Type, ev.Kind, ev.Namespace, ev.Name, ev.ResourceVersion, strings.Join(fr, "+"))
}

// frameLength returns the payload length of the server's frame at off.
func frameLength(pieces []testutil.Piece, off int) int {
	var sv []byte
	for _, pc := range pieces {
		if !pc.Client {
			sv = append(sv, pc.P...)
		}
	}
	return int(sv[off])<<16 | int(sv[off+1])<<8 | int(sv[off+2])
}

// serverFrames returns where each frame of the server's bytes starts.
func serverFrames(pieces []testutil.Piece) []int {
	var sv []byte
	for _, pc := range pieces {
		if !pc.Client {
			sv = append(sv, pc.P...)
		}
	}
	var starts []int
	for at := 0; at+9 <= len(sv); at += 9 + (int(sv[at])<<16 | int(sv[at+1])<<8 | int(sv[at+2])) {
		starts = append(starts, at)
	}
	return starts
}

// TestJoinCaptures cuts the recorded HTTP/2 watches (h2c, curl against a
// Go server: JSON with events in one and in many DATA frames, gzip'd with
// a member per flush, two streams with a reset) where a capture that
// began later would: at each packet, and inside the server's first packet
// then (after its first byte, inside its first frame header, after it).
// Each cut is decoded as an HTTP/2 connection joined mid-connection, and
// every event from the first that starts a DATA frame after the join is
// the same as in the whole connection, with the same DATA frames; a cut
// inside a frame is said with its offset.
func TestJoinCaptures(t *testing.T) {
	for _, name := range []string{"h2c-watch-lo.pcap", "h2c-gzip-lo.pcap", "h2c-reset-lo.pcap"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pieces := testutil.ConnPieces(t, filepath.Join("../../testdata/captures", name))
			whole := runJoined(t, pieces, 0)
			if !whole.http2 || len(whole.events) == 0 {
				t.Fatalf("the whole connection: http2 %v, events %v", whole.http2, whole.events)
			}
			starts := serverFrames(pieces)
			cl, sv := 0, 0
			cuts := 0
			for k, pc := range pieces {
				deltas := []int{0}
				if !pc.Client && len(pc.P) > 10 {
					deltas = append(deltas, 1, 5, 9, len(pc.P)/2)
				}
				for _, d := range deltas {
					if k == 0 && d == 0 {
						continue // the whole connection
					}
					checkCut(t, pieces, whole, starts, cl, sv+d, k < 8)
					cuts++
				}
				if pc.Client {
					cl += len(pc.P)
				} else {
					sv += len(pc.P)
				}
			}
			t.Logf("%d cuts", cuts)
		})
	}
}

// checkCut decodes pieces from the client's byte cl and the server's byte
// sv on, and compares it with the whole connection.
func checkCut(t *testing.T, pieces []testutil.Piece, whole *joined, starts []int, cl, sv int, oneByOne bool) {
	t.Helper()
	cut := testutil.CutPieces(pieces, cl, sv)
	got := runJoined(t, cut, 0)
	what := fmt.Sprintf("cut at client %d, server %d", cl, sv)
	// Where the server's frames start after the cut: at the cut, or
	// where the warning of bytes skipped says, a frame's start; the
	// frames passed over between are ones that start no chain (empty).
	boundary := -1
	if i := slices.IndexFunc(starts, func(s int) bool { return s >= sv }); i >= 0 {
		boundary = starts[i]
	}
	skips := 0
	for _, n := range got.notes {
		var dir string
		var k int
		if n.Kind != "h2-joined" || !strings.Contains(n.Message, " are the rest of a frame that began before the join") {
			continue
		}
		if _, err := fmt.Sscanf(n.Message, "the %s first %d byte", &dir, &k); err != nil {
			t.Errorf("%s: note %q does not say how many bytes", what, n.Message)
			continue
		}
		if dir != "server's" {
			continue
		}
		skips++
		for _, s := range starts {
			if s >= boundary && s < sv+k && frameLength(pieces, s) > 0 {
				t.Errorf("%s: frames start at %d, after a frame that counts at %d", what, sv+k, s)
			}
		}
		if !slices.Contains(starts, sv+k) {
			t.Errorf("%s: frames start at %d, which starts none", what, sv+k)
		}
		boundary = sv + k
	}
	for _, p := range got.problems {
		switch {
		case p.Kind == h2conn.KindJoinNoFrames:
			// Too few frames left after the cut to prove anything.
			boundary = -1
		default:
			t.Errorf("%s: problem %s: %s", what, p.Kind, p.Detail)
		}
	}
	what += fmt.Sprintf(" (frames from %d)", boundary)
	var want, have []string
	for stream, evs := range whole.events {
		if boundary < 0 {
			break
		}
		i := slices.IndexFunc(evs, func(ev *record.Event) bool {
			return ev.Frames[0].Offset >= int64(boundary) && ev.Frames[0].Ordinal == 1
		})
		if i < 0 {
			continue
		}
		for _, ev := range evs[i:] {
			want = append(want, fmt.Sprintf("s%d %s", stream, eventText(ev, 0)))
		}
	}
	for stream, evs := range got.events {
		for _, ev := range evs {
			have = append(have, fmt.Sprintf("s%d %s", stream, eventText(ev, sv)))
		}
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		t.Fatalf("%s: events\n%s\nwant\n%s", what, strings.Join(have, "\n"), strings.Join(want, "\n"))
	}
	if len(want) > 0 && !got.http2 {
		t.Errorf("%s: the connection is not marked HTTP/2", what)
	}
	// The notes say it was joined; a cut inside a frame is said.
	if len(want) > 0 && !slices.ContainsFunc(got.notes, func(n *record.ConnNote) bool { return n.Kind == "h2-joined" }) {
		t.Errorf("%s: no h2-joined note", what)
	}
	if inside := !slices.Contains(starts, sv); len(want) > 0 && inside && skips != 1 {
		t.Errorf("%s: %d notes of bytes skipped", what, skips)
	}
	// Every stream seen without its request is named from its events.
	for stream, evs := range got.events {
		if got.reqs[stream] != nil {
			continue
		}
		named := slices.ContainsFunc(got.notes, func(n *record.ConnNote) bool {
			return n.Stream == uint32(stream) && n.Resource != nil && *n.Resource == record.Resource{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default"}
		})
		hasObject := slices.ContainsFunc(evs, func(ev *record.Event) bool { return ev.Type != "BOOKMARK" })
		if named != hasObject {
			t.Errorf("%s: stream %d named %v, with objects %v", what, stream, named, hasObject)
		}
		// Inferred, unless its HEADERS came after the join.
		if r, w := got.resps[stream], whole.resps[stream]; r == nil || !r.Watch || !r.Inferred && (r.StatusCode != w.StatusCode || r.ContentType != w.ContentType) {
			t.Errorf("%s: stream %d: response %+v, want a watch", what, stream, r)
		}
	}
	if oneByOne {
		byByte := runJoined(t, cut, 1)
		var b []string
		for stream, evs := range byByte.events {
			for _, ev := range evs {
				b = append(b, fmt.Sprintf("s%d %s", stream, eventText(ev, sv)))
			}
		}
		slices.Sort(b)
		if !slices.Equal(b, have) || len(byByte.notes) != len(got.notes) || len(byByte.problems) != len(got.problems) {
			t.Errorf("%s: fed a byte at a time: events\n%s\nwhole\n%s", what, strings.Join(b, "\n"), strings.Join(have, "\n"))
		}
	}
}

// TestJoinRecords: a connection joined mid-connection whose bytes come in
// TLS records (a joined TLS connection's plaintext, as pkg/tlsconn hands
// it on): the server's one record of one DATA frame that starts a watch
// event is decided on, and its event decoded, when that record has come.
func TestJoinRecords(t *testing.T) {
	var events []*record.Event
	var problems []*record.Problem
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Event:
			events = append(events, v)
		case *record.Problem:
			problems = append(problems, v)
		}
	})
	c := wire.New(&record.Conn{ID: 1}, sink, wire.Options{MidStream: true})
	body := `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"one","namespace":"default","resourceVersion":"7"}}}` + "\n"
	frame := append([]byte{0, 0, byte(len(body)), 0, 0, 0, 0, 0, 1}, body...)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var f exchange.Follower = c
	exchange.FeedRecord(f, true, frame, t0)
	if len(events) != 1 || events[0].Name != "one" || len(problems) != 0 {
		t.Fatalf("after the server's one record: %d events, problems %v", len(events), problems)
	}
	// The client's WINDOW_UPDATE, a record too.
	exchange.FeedRecord(f, false, []byte{0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0}, t0)
	c.CloseClient(exchange.EndCapture, t0)
	c.CloseServer(exchange.EndCapture, t0)
	if len(events) != 1 || len(problems) != 0 {
		t.Errorf("at the end: %d events, problems %v", len(events), problems)
	}
}
