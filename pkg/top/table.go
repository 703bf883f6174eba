// Package top is kwatch's live table of watches (--top): one row per watch
// (its client as pkg/who names it, its resource, namespace and selectors,
// its events and bytes, how long since its last event, its restarts and
// re-lists as pkg/rewatch links them, its TCP zero windows and HTTP/2
// flow-control stalls and findings as pkg/health judges them), refreshed
// every second on a terminal and sorted by a key the reader presses, or
// written as a plain table every interval on a pipe.
//
// A Table is a record.Sink placed after pkg/health, beside the printer and
// the report, and fed by the same records: its Emit takes a lock for the
// time of a few field updates and never writes anything, so that the
// goroutine decoding the capture never waits on the terminal; the screen
// (Show) takes a copy of the rows once a second on a goroutine of its own.
// The terminal side is Bubble Tea (charm.land/bubbletea/v2), its table
// drawn by Lip Gloss (charm.land/lipgloss/v2/table).
package top

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/who"
)

// DefaultMaxRows is Options.MaxRows's default: as many watches as
// pkg/health follows.
const DefaultMaxRows = 4096

// MaxProblems bounds the problems (and warnings) a Table holds back: the
// lines of the run are not printed while the table is shown, so the first
// MaxProblems problem records are passed on at the run's end instead (after
// OnEnd), where what the summary counts can be read; those past them are
// passed on as they come.
const MaxProblems = 200

// maxText bounds the text a row keeps of its client, resource and
// selectors (bytes).
const maxText = 256

// NamespaceNotSeen is Row.Namespace of a watch whose request was not seen
// and whose objects have a namespace: the namespace watched is not known.
const NamespaceNotSeen = "(not seen)"

// Judge is what the table reads of a watch's health: pkg/health's Tracker,
// placed before it in the chain of sinks (Current is called from Emit).
type Judge interface {
	Current(c *record.Conn, exchange int) *record.Health
}

// Options shape a Table.
type Options struct {
	// MaxRows bounds the rows kept; past it the oldest ended watch's row
	// makes room, and when none has ended a new watch is only counted
	// (Snapshot.NotShown). 0: DefaultMaxRows.
	MaxRows int
	// OnEnd is called once, as the first record of the run's end (a
	// health record or the summary) comes, after the sinks after the
	// table have been flushed and before that record is passed on: the
	// output from then on is the run's end, which --top prints once the
	// table is gone (Gate.Hold).
	OnEnd func()
}

// key names a watch: its connection and exchange (an HTTP/2 stream).
type key struct{ conn, exchange int }

// row is what the table keeps of a watch and of the watches that followed
// it (rewatch's Restart records move a row to the watch that follows).
type row struct {
	id    int // order of first appearance, for a stable order
	key   key
	conn  *record.Conn
	label string
	who   string
	scope record.Scope
	// requested: the watch's request was seen (scope is what it asks).
	requested bool
	// resource is what the events' objects name when the request was
	// not seen (record.Resource.Watched: "ConfigMap", "Table rows
	// (resource not seen)"); named once an event other than a bookmark
	// or an ERROR named it, and clusterScoped when that event's object
	// has no namespace: the namespace watched is otherwise not known.
	resource      string
	named         bool
	clusterScoped bool
	events        int
	bytes         int64
	last          time.Time
	// lastCarrier is the index of the last chunk or DATA frame counted
	// in bytes (one carrying several events is counted once).
	lastCarrier int
	carrierSeen bool
	restarts    int
	relists     int
	errors      int // ERROR events
	gone        bool
	ended       bool
	endedAt     time.Time
	cut         string
	// health of the current watch, from the Judge.
	h struct{ findings, zero, flow int }
	// prior is the health of the watches before, added up as the row
	// moved on.
	prior struct{ findings, zero, flow int }
}

// Table is the live table's record.Sink. Create it with New.
type Table struct {
	next  record.Sink
	opt   Options
	judge Judge
	book  *who.Book

	mu       sync.Mutex
	rows     map[key]*row
	nextID   int
	notShown int
	ending   bool
	notices  []string
	noticed  int // notices in all, kept or not
	// problems are the first MaxProblems problem records, held back until
	// the run's end; problemsMore counts those past them.
	problems     []*record.Problem
	problemsMore int
}

// New returns a Table that passes every record on to next.
func New(next record.Sink, opt Options) *Table {
	if opt.MaxRows <= 0 {
		opt.MaxRows = DefaultMaxRows
	}
	return &Table{next: next, opt: opt, book: who.NewBook(), rows: map[key]*row{}}
}

// SetHealth gives the table the health tracker before it, whose judgment
// of each watch it shows.
func (t *Table) SetHealth(j Judge) { t.judge = j }

// Flush flushes the next sink (record.Flusher).
func (t *Table) Flush() { record.Flush(t.next) }

// Emit updates the rows r is about, and passes r on (a problem record,
// one of the first MaxProblems, at the run's end).
func (t *Table) Emit(r record.Record) {
	held := false
	switch v := r.(type) {
	case *record.Health, *record.Summary:
		if !t.ending {
			t.ending = true
			record.Flush(t.next)
			if t.opt.OnEnd != nil {
				t.opt.OnEnd()
			}
			// The problems held back: the first lines of the run's end.
			for _, p := range t.problems {
				t.next.Emit(p)
			}
			t.problems = nil
		}
	case *record.Problem:
		if !t.ending {
			t.mu.Lock()
			held = len(t.problems) < MaxProblems
			if held {
				t.problems = append(t.problems, v)
			} else {
				t.problemsMore++
			}
			t.mu.Unlock()
		}
	}
	t.book.See(r)
	t.mu.Lock()
	t.observe(r)
	t.mu.Unlock()
	if !held {
		t.next.Emit(r)
	}
}

// observe updates the rows from r; t.mu is held.
func (t *Table) observe(r record.Record) {
	switch v := r.(type) {
	case *record.Request:
		if !v.Watch {
			return
		}
		w := t.row(v.Conn, v.Exchange)
		if w == nil {
			return
		}
		w.who = phrase.Clip(t.book.Of(v).Text(), maxText)
		w.requested = true
		if s, ok := record.TargetScope(v.Target); ok {
			w.scope = clipScope(s)
		}
	case *record.Response:
		if !v.Watch || v.StatusCode < 200 {
			return
		}
		w := t.rows[key{v.Conn.Key(), v.Exchange}]
		if w == nil && v.Request == nil {
			// A watch whose request was not seen: named by its
			// connection's client, and by its events.
			if w = t.row(v.Conn, v.Exchange); w != nil {
				w.who = phrase.Clip(who.ConnOf(nil, t.book.Known(v.Conn)).Text(), maxText)
			}
		}
	case *record.Event:
		t.event(v)
	case *record.End:
		if v.Request {
			return
		}
		if w := t.rows[key{v.Conn.Key(), v.Exchange}]; w != nil {
			w.ended, w.endedAt = true, v.Time
			if v.Cut != nil {
				w.cut = v.Cut.String()
			}
			t.judged(w)
		}
	case *record.ConnNote:
		if v.Stall > 0 {
			// health counted it for the watches open on the
			// connection.
			for _, w := range t.rows {
				if w.key.conn == v.Conn.Key() {
					t.judged(w)
				}
			}
		}
	case *record.Restart:
		t.restart(v)
	}
}

// row returns the row of the watch of exchange on connection c, made when
// first seen; nil past MaxRows with no ended row to make room.
func (t *Table) row(c *record.Conn, exchange int) *row {
	k := key{c.Key(), exchange}
	if w := t.rows[k]; w != nil {
		return w
	}
	if len(t.rows) >= t.opt.MaxRows && !t.evict() {
		t.notShown++
		return nil
	}
	t.nextID++
	w := &row{id: t.nextID, key: k, conn: c, label: printer.WatchRef(c, exchange)}
	t.rows[k] = w
	return w
}

// evict drops the row of the watch that ended first, to make room.
func (t *Table) evict() bool {
	var oldest *row
	for _, w := range t.rows {
		if w.ended && (oldest == nil || w.endedAt.Before(oldest.endedAt)) {
			oldest = w
		}
	}
	if oldest == nil {
		return false
	}
	delete(t.rows, oldest.key)
	return true
}

// event counts an event in its watch's row: the data bytes of the chunks or
// DATA frames that carried it as sent (compressed, for a gzip'd body; one
// that carried several events counted once), or its own bytes when the
// body is neither chunked nor HTTP/2.
func (t *Table) event(e *record.Event) {
	w := t.rows[key{e.Conn.Key(), e.Exchange}]
	if w == nil {
		if w = t.row(e.Conn, e.Exchange); w == nil {
			return
		}
		w.who = phrase.Clip(who.ConnOf(nil, t.book.Known(e.Conn)).Text(), maxText)
	}
	w.events++
	if e.Time.After(w.last) {
		w.last = e.Time
	}
	switch {
	case len(e.Chunks) > 0:
		for _, c := range e.Chunks {
			if !w.carrierSeen || c.Index > w.lastCarrier {
				w.bytes += c.Size
				w.lastCarrier, w.carrierSeen = c.Index, true
			}
		}
	case len(e.Frames) > 0:
		for _, f := range e.Frames {
			if !w.carrierSeen || f.Index > w.lastCarrier {
				w.bytes += f.Data()
				w.lastCarrier, w.carrierSeen = f.Index, true
			}
		}
	default:
		w.bytes += e.Length
	}
	if !w.requested && !w.named && e.Kind != "" && e.Type != "ERROR" {
		// Named as the h2-joined note names it (a bookmark's object
		// names the resource, not a namespace).
		name, known := record.Resource{APIVersion: e.APIVersion, Kind: e.Kind, RowKind: e.RowKind}.Watched()
		if !known {
			name += " (resource not seen)"
		}
		w.resource = phrase.Clip(name, maxText)
		if e.Type != "BOOKMARK" {
			w.named, w.clusterScoped = true, e.Namespace == ""
		}
	}
	if e.Type == "ERROR" {
		w.errors++
		if e.Status != nil && e.Status.Code == 410 {
			w.gone = true
		}
	}
	t.judged(w)
}

// judged reads the health of w's current watch from the Judge.
func (t *Table) judged(w *row) {
	if t.judge == nil {
		return
	}
	h := t.judge.Current(w.conn, w.key.exchange)
	if h == nil {
		return
	}
	w.h.findings, w.h.zero, w.h.flow = len(h.Findings)+h.FindingsNotListed, h.ZeroWindows, h.FlowStalls
}

// restart moves the row of the watch that r's watch followed to r's watch:
// a client's watches of one resource are one row, whose restarts and
// re-lists count how it went on.
func (t *Table) restart(r *record.Restart) {
	prev := t.rows[key{r.Prev.Key(), r.PrevExchange}]
	if prev == nil {
		return
	}
	k := key{r.Conn.Key(), r.Exchange}
	if cur := t.rows[k]; cur != nil && cur != prev {
		// Made at the request: its request's name and scope are the
		// row's from now on.
		prev.who, prev.scope, prev.requested = cur.who, cur.scope, cur.requested
		prev.events += cur.events
		prev.bytes += cur.bytes
		if cur.last.After(prev.last) {
			prev.last = cur.last
		}
		delete(t.rows, k)
	}
	delete(t.rows, prev.key)
	prev.prior.findings += prev.h.findings
	prev.prior.zero += prev.h.zero
	prev.prior.flow += prev.h.flow
	prev.h = struct{ findings, zero, flow int }{}
	prev.key, prev.conn, prev.label = k, r.Conn, printer.WatchRef(r.Conn, r.Exchange)
	// What ended the watch before is said by the restart and re-list
	// counts; its findings and stalls stay counted.
	prev.ended, prev.endedAt, prev.cut, prev.carrierSeen = false, time.Time{}, "", false
	prev.errors, prev.gone = 0, false
	prev.restarts++
	if r.Why == record.WhyRelist {
		prev.relists++
	}
	t.rows[k] = prev
	t.judged(prev)
}

// Notice keeps a line kwatch would have said on stderr while the table is
// shown (the last ones are shown under it; all of them, up to 1000, are
// said once it is gone: Notices).
func (t *Table) Notice(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.noticed++
	if len(t.notices) < 1000 {
		t.notices = append(t.notices, line)
	}
}

// ProblemsNotKept returns how many problem records came past the first
// MaxProblems while the run went on: the run's end lists those only.
func (t *Table) ProblemsNotKept() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.problemsMore
}

// Notices returns the lines Notice kept, and how many more came.
func (t *Table) Notices() ([]string, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.notices), t.noticed - len(t.notices)
}

// Row is one watch as the table shows it.
type Row struct {
	// ID numbers the rows in the order their watches were first seen.
	ID int
	// Watch names the watch as the printers prefix its lines: "#3",
	// "#3 s5" (the latest of the watches the row followed).
	Watch string
	// Client is its client as who.Identity.Text names it ("" not known).
	Client string
	// Resource is the resource ("configmaps", "deployments.apps"), or,
	// when its request was not seen, what its events' objects name
	// (record.Resource.Watched: "ConfigMap"; "Table rows (resource not
	// seen)" for kubectl get -w's, whose objects name no kind).
	Resource string
	// Namespace is the namespace watched ("" all, or cluster-scoped;
	// NamespaceNotSeen when its request was not seen: a watch whose events
	// are in namespace demo may watch every namespace, as pkg/filter
	// judges it); Selectors its label and field selectors, as kubectl's
	// flags say them.
	Namespace, Selectors string
	// Events and Bytes count its events and the data bytes that carried
	// them (the chunks' or DATA frames' data, as sent).
	Events int
	Bytes  int64
	// Last is the time of its last event; zero before the first.
	Last time.Time
	// Restarts counts the watches that followed one another in the row
	// (pkg/rewatch), and Relists those that re-listed.
	Restarts, Relists int
	// ZeroWindows and FlowStalls count the TCP zero windows and HTTP/2
	// flow-control stalls on it (pkg/health).
	ZeroWindows, FlowStalls int
	// Health says what is wrong in a few words, "ok" when nothing is:
	// findings (resourceVersions that went backwards or repeated),
	// ERROR events (410 Gone), how the server cut it short.
	Health string
	// Bad is true when Health is not "ok".
	Bad bool
	// Ended is true once the watch ended and no other followed it.
	Ended bool
}

// Snapshot is the table's rows at one moment.
type Snapshot struct {
	Rows []Row
	// NotShown counts the watches past Options.MaxRows, not in Rows.
	NotShown int
	// Notice is the latest notice (Notice), "" none.
	Notice string
}

// Snapshot copies the rows, in the order their watches were first seen.
func (t *Table) Snapshot() Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Snapshot{Rows: make([]Row, 0, len(t.rows)), NotShown: t.notShown}
	if len(t.notices) > 0 {
		s.Notice = t.notices[len(t.notices)-1]
	}
	for _, w := range t.rows {
		s.Rows = append(s.Rows, w.snapshot())
	}
	slices.SortFunc(s.Rows, func(a, b Row) int { return a.ID - b.ID })
	return s
}

func (w *row) snapshot() Row {
	r := Row{ID: w.id, Watch: w.label, Client: w.who, Resource: w.scope.Resource, Namespace: w.scope.Namespace,
		Events: w.events, Bytes: w.bytes, Last: w.last, Restarts: w.restarts, Relists: w.relists,
		ZeroWindows: w.prior.zero + w.h.zero, FlowStalls: w.prior.flow + w.h.flow, Ended: w.ended}
	if !w.requested {
		r.Resource = w.resource
		if !w.clusterScoped {
			r.Namespace = NamespaceNotSeen
		}
	}
	var sel []string
	if w.scope.LabelSelector != "" {
		sel = append(sel, "-l "+w.scope.LabelSelector)
	}
	if w.scope.FieldSelector != "" {
		sel = append(sel, "--field-selector "+w.scope.FieldSelector)
	}
	r.Selectors = strings.Join(sel, " ")
	var bad []string
	if n := w.prior.findings + w.h.findings; n > 0 {
		bad = append(bad, phrase.Count(n, "finding", "findings"))
	}
	switch {
	case w.gone:
		bad = append(bad, "410 Gone")
	case w.errors > 0:
		bad = append(bad, phrase.Count(w.errors, "ERROR", "ERRORs"))
	}
	if w.cut != "" {
		bad = append(bad, "ended by "+w.cut)
	}
	r.Health, r.Bad = "ok", len(bad) > 0
	if r.Bad {
		r.Health = strings.Join(bad, ", ")
	}
	if w.ended && !r.Bad {
		r.Health = "ended"
	}
	return r
}

func clipScope(s record.Scope) record.Scope {
	s.Resource, s.Namespace = phrase.Clip(s.Resource, maxText), phrase.Clip(s.Namespace, maxText)
	s.LabelSelector, s.FieldSelector = phrase.Clip(s.LabelSelector, maxText), phrase.Clip(s.FieldSelector, maxText)
	return s
}

// String is a row on one line, for tests and logs.
func (r Row) String() string {
	return fmt.Sprintf("%s %s %s %s %d", r.Watch, r.Client, r.Resource, r.Namespace, r.Events)
}
