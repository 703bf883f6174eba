// Package health judges how healthy the watches kwatch saw were: whether
// resourceVersions only moved forward, how often bookmarks came, how long the
// stream went quiet, how long the first event took, why watches restarted
// (kwatch stream's, and those pkg/rewatch links in a capture) and how many
// objects their re-lists sent again unchanged, and how the bytes split between chunk framing and data. It is a
// record.Sink that passes every record on and, before the final summary,
// emits one record.Health per watch and one for the whole run.
//
// resourceVersions are opaque strings to clients (Kubernetes API concepts:
// resource versions); they are compared as integers only when both parse as
// such, which is what etcd-backed servers send.
package health

import (
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
)

// maxWatches bounds how many watches are tracked at once.
const maxWatches = 4096

// maxBookmarks bounds the bookmark times kept per watch for the median.
const maxBookmarks = 4096

type key struct{ conn, exchange int }

// watchState is what is tracked of one watch exchange.
type watchState struct {
	h         *record.Health
	requested time.Time
	lastEvent time.Time
	lastRV    int64
	lastRVOK  bool
	lastSeq   int
	bookmarks []time.Time
	lastChunk int  // index of the last chunk counted in the histogram
	chunkSeen bool // a chunk was counted
	// initial is true while the watch sends its initial state: ADDED events
	// for the objects that exist, in key order, not resourceVersion order
	// (a watch without resourceVersion, with resourceVersion=0, or with
	// sendInitialEvents=true).
	initial  bool
	firstSet bool
	ended    time.Time // when its End came (zero before)
}

// Tracker is the health record.Sink. Create it with New.
type Tracker struct {
	next    record.Sink
	watches map[key]*watchState
	order   []key
	// byConn lists the watches of each connection (keys of watches), so
	// that a note of a connection looks at its own watches alone.
	byConn  map[int][]key
	overall record.Health
}

// New returns a Tracker that passes records on to next.
func New(next record.Sink) *Tracker {
	return &Tracker{next: next, watches: map[key]*watchState{}, byConn: map[int][]key{},
		overall: record.Health{Scope: "all", Events: map[string]int{}}}
}

// Flush flushes the next sink (record.Flusher).
func (t *Tracker) Flush() { record.Flush(t.next) }

// Emit observes r, passes it on, and before a Summary emits the health
// records.
func (t *Tracker) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.Request:
		if v.Watch {
			w := t.state(v.Conn, v.Exchange)
			w.requested = v.Time
			w.initial = v.InitialState || v.StartsWithState
		}
	case *record.Response:
		if v.StatusCode >= 300 || (v.StatusCode > 0 && v.StatusCode < 200) {
			// Asked for, but answered with an error status: no watch
			// stream to judge (kwatch stream's summary does not count it
			// as opened either).
			t.drop(key{v.Conn.Key(), v.Exchange})
			break
		}
		if v.Watch {
			w := t.state(v.Conn, v.Exchange)
			if w.requested.IsZero() {
				w.requested = v.Time
			}
		}
	case *record.Event:
		t.event(v)
	case *record.ConnNote:
		if (v.Kind == "tcp" || v.Kind == "h2") && v.Stall > 0 {
			t.stall(v)
		}
	case *record.End:
		if w, ok := t.watches[key{v.Conn.Key(), v.Exchange}]; ok {
			w.ended = v.Time
		}
		if w, ok := t.watches[key{v.Conn.Key(), v.Exchange}]; ok && v.Watch {
			w.h.FramingBytes += v.Bytes - v.Data - v.Lost
			w.h.DataBytes += v.Data
			w.h.InflatedBytes += v.Inflated
			if v.Inflated > 0 || v.Members > 0 {
				w.h.CompressedBytes += v.Data
			}
			w.h.Ends = append(w.h.Ends, v.How)
			if v.Cut != nil && !v.Request {
				w.h.Cut = v.Cut
			}
		}
	case *record.WatchStart:
		// The first watch, after the first LIST or as a watch-list, is no
		// restart; a watch-list after 410 Gone is a re-list (counted by
		// the loop) and a restart.
		if v.Why != record.WhyInitial && v.Why != record.WhyAfterList {
			t.overall.Restarts++
			t.overall.RestartReasons = appendCount(t.overall.RestartReasons, v.Reason)
			if v.WatchList {
				t.overall.Relists++ // the current state again, without a LIST
			}
		}
	case *record.Restart:
		// A capture's watch that followed an earlier one of its client
		// (pkg/rewatch): counted as kwatch stream counts its own.
		if w, ok := t.watches[key{v.Conn.Key(), v.Exchange}]; ok {
			w.h.Began = v
		}
		t.overall.Restarts++
		t.overall.RestartReasons = appendCount(t.overall.RestartReasons, v.Reason())
		if v.Why == record.WhyRelist {
			t.overall.Relists++
		}
	case *record.Relist:
		if v.Conn != nil {
			resent := v.Sent - v.NAppeared
			if w, ok := t.watches[key{v.Conn.Key(), v.Exchange}]; ok {
				w.h.Resent += resent
				w.h.ResentUnchanged += v.Unchanged
			}
			t.overall.Resent += resent
			t.overall.ResentUnchanged += v.Unchanged
		}
	case *record.List:
		// Every LIST after the first is a re-list, whatever started it
		// (the first may follow a refused watch-list).
		if v.Why != record.WhyInitial {
			t.overall.Relists++
		}
	case *record.Summary:
		t.flush(v.Time)
	}
	t.next.Emit(r)
}

// Current returns the health of the watch of exchange on connection c so
// far, as judged from the records passed on until now (its events,
// findings, cut, TCP zero windows and flow-control stalls; Bookmarks and
// Time are set only when it is emitted); nil for a watch not tracked. The
// record is the Tracker's own: a sink after it (the live table) reads it
// from its Emit, before the next record, and does not change it.
func (t *Tracker) Current(c *record.Conn, exchange int) *record.Health {
	if w, ok := t.watches[key{c.Key(), exchange}]; ok {
		return w.h
	}
	return nil
}

func (t *Tracker) state(c *record.Conn, exchange int) *watchState {
	k := key{c.Key(), exchange}
	if w, ok := t.watches[k]; ok {
		return w
	}
	if len(t.watches) >= maxWatches {
		return &watchState{h: &record.Health{Events: map[string]int{}}}
	}
	w := &watchState{h: &record.Health{Scope: "watch", Conn: c, Exchange: exchange, Events: map[string]int{}}}
	t.watches[k] = w
	t.order = append(t.order, k)
	t.byConn[k.conn] = append(t.byConn[k.conn], k)
	return w
}

// drop forgets the watch of key k.
func (t *Tracker) drop(k key) {
	if _, ok := t.watches[k]; !ok {
		return
	}
	delete(t.watches, k)
	t.order = slices.DeleteFunc(t.order, func(o key) bool { return o == k })
	if ks := slices.DeleteFunc(t.byConn[k.conn], func(o key) bool { return o == k }); len(ks) > 0 {
		t.byConn[k.conn] = ks
	} else {
		delete(t.byConn, k.conn)
	}
}

func (t *Tracker) event(e *record.Event) {
	w := t.state(e.Conn, e.Exchange)
	h := w.h
	h.Events[e.Type]++
	t.overall.Events[e.Type]++
	if e.Initial {
		h.InitialEvents++
		t.overall.InitialEvents++
	}
	if e.InitialEventsEnd && !w.requested.IsZero() && h.InitialEnd == 0 {
		h.InitialEnd = e.Time.Sub(w.requested)
	}
	if !w.requested.IsZero() && !w.firstSet && e.Type != "BOOKMARK" {
		h.FirstEvent = e.Time.Sub(w.requested)
		w.firstSet = true
	}
	if !w.lastEvent.IsZero() {
		if gap := e.Time.Sub(w.lastEvent); gap > h.MaxGap {
			h.MaxGap = gap
			h.MaxGapAfter = w.lastSeq
		}
	}
	w.lastEvent, w.lastSeq = e.Time, e.Seq
	for _, c := range e.Chunks {
		// A chunk shared by several events is counted once.
		if c.Index > w.lastChunk || !w.chunkSeen {
			h.ChunkSizes[record.ChunkBucket(c.Size)]++
			w.lastChunk, w.chunkSeen = c.Index, true
		}
	}
	if e.Type == "BOOKMARK" {
		if len(w.bookmarks) < maxBookmarks {
			w.bookmarks = append(w.bookmarks, e.Time)
		}
	}
	if e.Type == "ERROR" {
		return
	}
	rv, err := strconv.ParseInt(e.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	if w.initial {
		// The initial state ends with the first event that is not an
		// ADDED, or the bookmark that says so; until then only the
		// highest resourceVersion counts.
		if e.Type == "ADDED" {
			if !w.lastRVOK || rv > w.lastRV {
				w.lastRV, w.lastRVOK = rv, true
			}
			return
		}
		w.initial = false
		if e.Type == "BOOKMARK" && e.InitialEventsEnd {
			w.lastRV, w.lastRVOK = max(w.lastRV, rv), true
			return
		}
	}
	if w.lastRVOK {
		switch {
		case rv < w.lastRV:
			addFinding(h, record.Finding{Conn: e.Conn, Seq: e.Seq, Kind: "resourceVersion went backwards",
				Detail: strconv.FormatInt(w.lastRV, 10) + " then " + e.ResourceVersion})
		case rv == w.lastRV && e.Type != "BOOKMARK":
			addFinding(h, record.Finding{Conn: e.Conn, Seq: e.Seq, Kind: "resourceVersion repeated",
				Detail: e.ResourceVersion})
		}
	}
	w.lastRV, w.lastRVOK = rv, true
}

// stall counts a TCP zero window or an HTTP/2 flow-control stall (a
// ConnNote's Stall, said when it ended) for the watches that were open on
// its connection when it began (of a stream's window: that stream's watch,
// whose exchange is the stream), and in all.
func (t *Tracker) stall(n *record.ConnNote) {
	add := func(h *record.Health) {
		if n.Kind == "tcp" {
			h.ZeroWindows++
			h.ZeroWindow += n.Stall
		} else {
			h.FlowStalls++
			h.FlowStall += n.Stall
		}
	}
	add(&t.overall)
	began := n.Time.Add(-n.Stall)
	for _, k := range t.byConn[n.Conn.Key()] {
		w := t.watches[k]
		if n.Stream != 0 && k.exchange != int(n.Stream) {
			continue
		}
		if w.ended.IsZero() || w.ended.After(began) {
			add(w.h)
		}
	}
}

// MaxFindings is how many findings a health record lists; the others are
// counted (a watch whose every event repeats its resourceVersion would
// otherwise hold one per event).
const MaxFindings = 100

func addFinding(h *record.Health, f record.Finding) {
	if len(h.Findings) >= MaxFindings {
		h.FindingsNotListed++
		return
	}
	h.Findings = append(h.Findings, f)
}

func appendCount(m map[string]int, reason string) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[reason]++
	return m
}

// flush emits the health of every watch and of the whole run.
func (t *Tracker) flush(now time.Time) {
	all := &t.overall
	all.Time = now
	var gaps []time.Duration // every watch's bookmark intervals
	for _, k := range t.order {
		w := t.watches[k]
		w.h.Time = now
		w.h.Bookmarks = intervals(w.bookmarks)
		for i := 1; i < len(w.bookmarks); i++ {
			gaps = append(gaps, w.bookmarks[i].Sub(w.bookmarks[i-1]))
		}
		all.Watches++
		all.FramingBytes += w.h.FramingBytes
		all.DataBytes += w.h.DataBytes
		all.InflatedBytes += w.h.InflatedBytes
		all.CompressedBytes += w.h.CompressedBytes
		for i, n := range w.h.ChunkSizes {
			all.ChunkSizes[i] += n
		}
		if w.h.MaxGap > all.MaxGap {
			all.MaxGap = w.h.MaxGap
		}
		all.Bookmarks.Count += w.h.Bookmarks.Count
		if w.h.Cut != nil {
			all.Cuts++
		}
		for _, f := range w.h.Findings {
			addFinding(all, f)
		}
		all.FindingsNotListed += w.h.FindingsNotListed
		t.next.Emit(w.h)
	}
	// The overall intervals are those between bookmarks of one watch,
	// pooled: a watch that restarts starts counting again.
	if len(gaps) > 0 {
		sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
		all.Bookmarks.Min, all.Bookmarks.Median, all.Bookmarks.Max = gaps[0], gaps[len(gaps)/2], gaps[len(gaps)-1]
		all.Bookmarks.Measured = len(gaps)
	}
	t.next.Emit(all)
}

// intervals returns the bookmark intervals' minimum, median and maximum.
func intervals(ts []time.Time) record.Intervals {
	if len(ts) < 2 {
		return record.Intervals{Count: len(ts)}
	}
	d := make([]time.Duration, 0, len(ts)-1)
	for i := 1; i < len(ts); i++ {
		d = append(d, ts[i].Sub(ts[i-1]))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return record.Intervals{Count: len(ts), Min: d[0], Median: d[len(d)/2], Max: d[len(d)-1], Measured: len(d)}
}
