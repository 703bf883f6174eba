package health

import (
	"fmt"
	"testing"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
)

// collectHealth returns a Tracker and the health records it emits.
func collectHealth() (*Tracker, *[]*record.Health) {
	var recs []*record.Health
	return New(record.SinkFunc(func(r record.Record) {
		if h, ok := r.(*record.Health); ok {
			recs = append(recs, h)
		}
	})), &recs
}

func TestHealth(t *testing.T) {
	tr, recs := collectHealth()
	c := &record.Conn{ID: 1}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tr.Emit(&record.Request{Conn: c, Exchange: 1, Time: at(0), Watch: true, Target: "/api/v1/configmaps?watch=1&resourceVersion=9"})
	tr.Emit(&record.Response{Conn: c, Exchange: 1, Time: at(1), Watch: true})
	for i, ev := range []struct {
		typ, rv string
		ms      int
		chunk   int
		size    int64
	}{
		{"ADDED", "10", 5, 0, 500},
		{"MODIFIED", "11", 10, 0, 500},   // shares chunk 0
		{"BOOKMARK", "11", 1010, 1, 100}, // a bookmark may repeat the last RV
		{"MODIFIED", "11", 1020, 2, 2000},
		{"BOOKMARK", "12", 2010, 3, 100},
		{"DELETED", "9", 2020, 4, 40000},
		{"BOOKMARK", "13", 5010, 5, 100},
	} {
		tr.Emit(&record.Event{Conn: c, Exchange: 1, Seq: i + 1, Time: at(ev.ms), Type: ev.typ, ResourceVersion: ev.rv,
			Chunks: []record.Chunk{{Index: ev.chunk, Size: ev.size}}})
	}
	tr.Emit(&record.End{Conn: c, Exchange: 1, Time: at(6000), How: "last-chunk", Watch: true, Bytes: 43500, Data: 43300})
	tr.Emit(&record.Summary{Time: at(6001)})
	got := *recs
	if len(got) != 2 {
		t.Fatalf("%d health records, want the watch's and the run's", len(got))
	}
	h := got[0]
	var fs []string
	for _, f := range h.Findings {
		fs = append(fs, fmt.Sprintf("%d %s %s", f.Seq, f.Kind, f.Detail))
	}
	findings := fmt.Sprint(fs)
	if findings != "[4 resourceVersion repeated 11 6 resourceVersion went backwards 12 then 9]" {
		t.Errorf("findings %s", findings)
	}
	if h.FirstEvent != 5*time.Millisecond || h.MaxGap != 2990*time.Millisecond || h.MaxGapAfter != 6 {
		t.Errorf("first event %s, max gap %s after %d", h.FirstEvent, h.MaxGap, h.MaxGapAfter)
	}
	if b := h.Bookmarks; b.Count != 3 || b.Min != 1000*time.Millisecond || b.Median != 3000*time.Millisecond || b.Max != 3000*time.Millisecond {
		t.Errorf("bookmarks %+v", b)
	}
	if h.ChunkSizes != [5]int{4, 1, 0, 0, 1} {
		t.Errorf("chunk histogram %v (chunk 0 is shared by two events and counts once)", h.ChunkSizes)
	}
	if h.FramingBytes != 200 || h.DataBytes != 43300 || fmt.Sprint(h.Ends) != "[last-chunk]" {
		t.Errorf("bytes %d/%d, ends %v", h.FramingBytes, h.DataBytes, h.Ends)
	}
	if all := got[1]; all.Scope != "all" || all.Watches != 1 || len(all.Findings) != 2 || all.Events["BOOKMARK"] != 3 {
		t.Errorf("overall %+v", all)
	}
}

// TestHealthInitialState: a watch without resourceVersion first sends the
// existing objects as ADDED events in key order; that is no finding, but a
// step back after them is.
func TestHealthInitialState(t *testing.T) {
	var got []*record.Health
	tr := New(record.SinkFunc(func(r record.Record) {
		if h, ok := r.(*record.Health); ok && h.Scope == "watch" {
			got = append(got, h)
		}
	}))
	c := &record.Conn{ID: 1}
	tr.Emit(&record.Request{Conn: c, Exchange: 1, Watch: true, Target: "/api/v1/namespaces/x/configmaps?watch=1", InitialState: true})
	for i, ev := range [][2]string{{"ADDED", "210"}, {"ADDED", "209"}, {"ADDED", "208"}, {"MODIFIED", "211"}, {"MODIFIED", "205"}} {
		tr.Emit(&record.Event{Conn: c, Exchange: 1, Seq: i + 1, Type: ev[0], ResourceVersion: ev[1]})
	}
	tr.Emit(&record.Summary{})
	if len(got) != 1 || len(got[0].Findings) != 1 || got[0].Findings[0].Seq != 5 {
		t.Errorf("findings %+v, want only event 5 (211 then 205)", got[0].Findings)
	}
}

// TestHealthRelists: the overall health counts re-lists as the loop does:
// a LIST after the first, or a watch-list that gets the current state again
// (after 410 Gone); not the LIST that follows a refused watch-list.
func TestHealthRelists(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		recs     []record.Record
		relists  int
		restarts int
	}{
		{"watch-list after 410", []record.Record{
			&record.WatchStart{Time: t0, Reason: "initial (watch-list)", Why: record.WhyInitial, WatchList: true},
			&record.WatchStart{Time: t0, Reason: "re-list after 410 Gone (watch-list)", Why: record.WhyRelist, WatchList: true},
		}, 1, 1},
		{"watch-list refused", []record.Record{
			&record.WatchStart{Time: t0, Reason: "initial (watch-list)", Why: record.WhyInitial, WatchList: true},
			&record.List{Time: t0, Reason: "initial (watch-list refused)", Why: record.WhyInitial},
			&record.WatchStart{Time: t0, Reason: "after LIST", Why: record.WhyAfterList},
		}, 0, 0},
		{"LIST after 410", []record.Record{
			&record.List{Time: t0, Reason: "initial", Why: record.WhyInitial},
			&record.WatchStart{Time: t0, Reason: "after LIST", Why: record.WhyAfterList},
			&record.List{Time: t0, Reason: "re-list after 410 Gone", Why: record.WhyRelist},
			&record.WatchStart{Time: t0, Reason: "after LIST", Why: record.WhyAfterList},
		}, 1, 0},
	} {
		var overall *record.Health
		tr := New(record.SinkFunc(func(r record.Record) {
			if h, ok := r.(*record.Health); ok && h.Conn == nil {
				overall = h
			}
		}))
		for _, r := range append(tc.recs, &record.Summary{Time: t0}) {
			tr.Emit(r)
		}
		if overall == nil || overall.Relists != tc.relists || overall.Restarts != tc.restarts {
			t.Errorf("%s: overall health %+v, want %d re-lists and %d restarts", tc.name, overall, tc.relists, tc.restarts)
		}
	}
}

// TestHealthOverallBookmarks: the overall bookmark intervals are those of
// each watch, pooled (they were printed as 0s).
func TestHealthOverallBookmarks(t *testing.T) {
	var overall *record.Health
	tr := New(record.SinkFunc(func(r record.Record) {
		if h, ok := r.(*record.Health); ok && h.Scope == "all" {
			overall = h
		}
	}))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &record.Conn{ID: 1}
	for ex, secs := range map[int][]int{1: {0, 2, 5}, 3: {10, 11}} {
		tr.Emit(&record.Request{Conn: c, Exchange: ex, Watch: true, Target: "/api/v1/configmaps?watch=1&resourceVersion=5"})
		for i, s := range secs {
			tr.Emit(&record.Event{Conn: c, Exchange: ex, Seq: i + 1, Type: "BOOKMARK", ResourceVersion: fmt.Sprint(10 + i), Time: t0.Add(time.Duration(s) * time.Second)})
		}
	}
	tr.Emit(&record.Summary{Time: t0})
	if overall == nil || overall.Bookmarks.Count != 5 || overall.Bookmarks.Min != time.Second || overall.Bookmarks.Median != 2*time.Second || overall.Bookmarks.Max != 3*time.Second {
		t.Fatalf("overall bookmarks %+v, want 5, intervals 1s, 2s, 3s", overall.Bookmarks)
	}
}

// TestFindingsBounded: a watch whose every event repeats its
// resourceVersion lists the first MaxFindings findings and counts the rest,
// in its own record and in the overall one.
func TestFindingsBounded(t *testing.T) {
	tr, recs := collectHealth()
	c := &record.Conn{ID: 1}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tr.Emit(&record.Request{Conn: c, Exchange: 1, Time: t0, Watch: true})
	const n = 5000
	for i := range n {
		tr.Emit(&record.Event{Conn: c, Exchange: 1, Seq: i + 1, Time: t0, Type: "MODIFIED", ResourceVersion: "100"})
	}
	tr.Emit(&record.Summary{Time: t0})
	got := *recs
	if len(got) != 2 {
		t.Fatalf("%d health records", len(got))
	}
	for _, h := range got {
		if len(h.Findings) != MaxFindings || h.FindingsNotListed != n-1-MaxFindings {
			t.Errorf("%s: %d findings listed, %d not, want %d and %d", h.Scope, len(h.Findings), h.FindingsNotListed, MaxFindings, n-1-MaxFindings)
		}
	}
}

// TestZeroWindow: a TCP zero window (said when it ends) counts for the
// watches open on its connection when it began: the watch it stalled, also
// when its end came first; not a watch that ended before it began, nor one
// on another connection.
func TestZeroWindow(t *testing.T) {
	tr, recs := collectHealth()
	c1, c2 := &record.Conn{ID: 1}, &record.Conn{ID: 2}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	watch := func(c *record.Conn, ex, ms int) {
		tr.Emit(&record.Request{Conn: c, Exchange: ex, Time: at(ms), Watch: true})
		tr.Emit(&record.Response{Conn: c, Exchange: ex, Time: at(ms), Watch: true})
	}
	end := func(c *record.Conn, ex, ms int) {
		tr.Emit(&record.End{Conn: c, Exchange: ex, Time: at(ms), Watch: true})
	}
	stall := func(c *record.Conn, ms, d int) {
		tr.Emit(&record.ConnNote{Conn: c, Time: at(ms), Kind: "tcp", Stall: time.Duration(d) * time.Millisecond})
	}
	watch(c1, 1, 0)
	end(c1, 1, 100) // ended before the stall below began
	watch(c1, 2, 200)
	watch(c2, 1, 200)
	stall(c1, 1500, 1000) // 500 ms to 1500 ms: watch 2 of c1
	end(c1, 2, 3000)
	stall(c1, 3000, 500) // said at the end, after watch 2's End: still its
	tr.Emit(&record.Summary{Time: at(4000)})
	var got []string
	for _, h := range *recs {
		got = append(got, fmt.Sprintf("%s %d %v", h.Scope, h.ZeroWindows, h.ZeroWindow))
	}
	if fmt.Sprint(got) != "[watch 0 0s watch 2 1.5s watch 0 0s all 2 1.5s]" {
		t.Errorf("health %v", got)
	}
}

// TestFlowStall: an HTTP/2 flow-control stall of one stream's window counts
// for that stream's watch alone; one of the connection's window for every
// watch open on it.
func TestFlowStall(t *testing.T) {
	tr, recs := collectHealth()
	c := &record.Conn{ID: 1, HTTP2: true}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, s := range []int{1, 3} {
		tr.Emit(&record.Request{Conn: c, Exchange: s, Time: at(0), Watch: true})
		tr.Emit(&record.Response{Conn: c, Exchange: s, Time: at(0), Watch: true})
	}
	tr.Emit(&record.ConnNote{Conn: c, Time: at(2000), Kind: "h2", Stall: time.Second, Stream: 3})
	tr.Emit(&record.ConnNote{Conn: c, Time: at(3000), Kind: "h2", Stall: 500 * time.Millisecond})
	tr.Emit(&record.Summary{Time: at(4000)})
	var got []string
	for _, h := range *recs {
		got = append(got, fmt.Sprintf("%s %d %d %v", h.Scope, h.Exchange, h.FlowStalls, h.FlowStall))
	}
	if fmt.Sprint(got) != "[watch 1 1 500ms watch 3 2 1.5s all 0 2 1.5s]" {
		t.Errorf("health %v", got)
	}
}

// BenchmarkStallManyWatches measures counting one TCP zero window on a
// connection while 4096 watches (the most tracked) are open on others.
func BenchmarkStallManyWatches(b *testing.B) {
	tr, _ := collectHealth()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxWatches {
		c := &record.Conn{ID: i + 1}
		tr.Emit(&record.Request{Conn: c, Exchange: 1, Time: t0, Watch: true})
	}
	note := &record.ConnNote{Conn: &record.Conn{ID: 1}, Time: t0.Add(time.Second), Kind: "tcp", Stall: time.Millisecond}
	for i := 0; i < b.N; i++ {
		tr.Emit(note)
	}
}

// TestCurrent: a sink after the Tracker reads a watch's health so far, as
// the Tracker judged it up to the record at hand.
func TestCurrent(t *testing.T) {
	c := &record.Conn{ID: 1}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var tr *Tracker
	var seen []string
	tr = New(record.SinkFunc(func(r record.Record) {
		if e, ok := r.(*record.Event); ok {
			h := tr.Current(e.Conn, e.Exchange)
			seen = append(seen, fmt.Sprintf("%d events, %d findings", eventCount(h), len(h.Findings)))
		}
	}))
	if tr.Current(c, 1) != nil {
		t.Error("a watch not seen has a health")
	}
	tr.Emit(&record.Request{Conn: c, Exchange: 1, Time: t0, Watch: true})
	for i, rv := range []string{"10", "9"} {
		tr.Emit(&record.Event{Conn: c, Exchange: 1, Seq: i + 1, Time: t0, Type: "MODIFIED", ResourceVersion: rv})
	}
	if got := fmt.Sprint(seen); got != "[1 events, 0 findings 2 events, 1 findings]" {
		t.Errorf("seen %s", got)
	}
}

func eventCount(h *record.Health) int {
	n := 0
	for _, c := range h.Events {
		n += c
	}
	return n
}
