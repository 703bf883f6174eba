// Package report writes kwatch's HTML report: one self-contained page with a
// timeline of every watch (a lane per watch, a mark per watch event, the
// connection's notes and problems), the chunks or HTTP/2 DATA frames that
// carried each event as a strip of bytes, a table of who watches what, and
// the watches' health.
//
// The report is a record.Sink placed beside the printer: it sees the same
// records as the JSON Lines (-o json), passes each one on unchanged, and
// keeps a bounded summary of them. Nothing in the page needs the network:
// its script and styles are inline and its pictures are SVG drawn by that
// script from the data embedded in the page.
package report

import (
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/who"
)

// Defaults of Options: what a report keeps in memory and writes into the
// page, so that a 1 GB capture gives a page a browser opens.
const (
	// DefaultMaxLaneMarks is how many events one lane draws as marks;
	// past it the lane is drawn as density (events per time bin).
	DefaultMaxLaneMarks = 5000
	// DefaultMaxMarks bounds the marks of all lanes together.
	DefaultMaxMarks = 200000
	// DefaultMaxDetailBytes bounds the bytes of events' objects (and
	// diffs) kept for the page's event view, in bytes.
	DefaultMaxDetailBytes = 8 << 20
	// DefaultMaxObjectBytes is the most of one object the page shows, in
	// bytes; a longer one is cut with a note.
	DefaultMaxObjectBytes = 16 << 10
	// DefaultMaxLanes bounds the watches kept (drawn and listed); the
	// others are counted with their events.
	DefaultMaxLanes = 2000
	// DefaultMaxNotes bounds the notes and problems drawn on lanes.
	DefaultMaxNotes = 20000
	// maxBins bounds the density bins of a lane; bins widen to stay under.
	maxBins = 2048
	// maxCarriers bounds the chunks or DATA frames listed for one event.
	maxCarriers = 64
	// maxSpecialMarks bounds the ERROR, 410 and initial-events-end marks a
	// dense lane keeps past its marks, and maxSpecialMarksTotal those of
	// all lanes past DefaultMaxMarks.
	maxSpecialMarks      = 1000
	maxSpecialMarksTotal = 20000
	// maxWhat bounds the line text kept for one event, note or end
	// (bytes): a name may be as long as an event; maxText bounds a
	// request target.
	maxWhat = 512
	maxText = 2048
	// maxProblems bounds the problems and warnings the page lists.
	maxProblems = 500
)

// Options shape a report. Zero values take the defaults above.
type Options struct {
	// Title heads the page, e.g. "kwatch pcap watch.pcap".
	Title          string
	MaxLaneMarks   int
	MaxMarks       int
	MaxDetailBytes int64
	MaxObjectBytes int
	MaxLanes       int
	MaxNotes       int
}

// Report is a record.Sink that keeps what the page shows and passes every
// record on to the next sink unchanged. Write renders the page. A Report is
// not safe for concurrent use; records arrive from one goroutine.
type Report struct {
	next     record.Sink
	opt      Options
	lanes    map[laneKey]*lane
	order    []*lane
	conns    map[int]*connInfo
	marks    int
	detailed int64
	events   []*detail
	notes    []note
	dropped  struct{ notes, lanes, marks int }
	overall  *record.Health
	summary  *record.Summary
	lists    []listInfo
	retries  []note
	t0, t1   time.Time
	live     bool
	counted  int
	diffSeen bool
	// relists counts kwatch stream's re-lists so far; waiting holds the
	// notes (indices) of re-lists not yet drawn on the watch that follows.
	relists int
	waiting []int
	// problems and warnings count the Problem records (the Summary's
	// counts are the printer's, not set in the record).
	problems, warnings int
	hidden             [nTypes]int // events of watches not kept
	// stride: an ordinary event keeps its details when its number is a
	// multiple of stride (doubled by thin).
	stride int
	// problemList keeps the first problems and warnings for the page's
	// list, all of them, watch or not.
	problemList []note
	// watchStarts are kwatch stream's announcements of watches whose
	// request has not come yet (several resources: several at once).
	watchStarts []*record.WatchStart
	// labels numbers the watches of each HTTP/1.1 connection.
	perConn map[int]int
	// frameSizes counts the DATA frames that carried events, in the
	// buckets of Health.ChunkSizes.
	frameSizes [len(record.ChunkBuckets) + 1]int
	// undecoded counts the connections kwatch did not decode (TLS
	// without a key, HTTP/2 it could not follow, not HTTP).
	undecoded int
	// book keeps what is known of each connection's client (its
	// process), to name the client of each watch as the printers do.
	book *who.Book
}

type laneKey struct {
	conn     int
	exchange int
}

// New returns a Report that passes records on to next (which may be nil).
func New(next record.Sink, opt Options) *Report {
	orDefault(&opt.MaxLaneMarks, DefaultMaxLaneMarks)
	orDefault(&opt.MaxMarks, DefaultMaxMarks)
	orDefault(&opt.MaxDetailBytes, DefaultMaxDetailBytes)
	orDefault(&opt.MaxObjectBytes, DefaultMaxObjectBytes)
	orDefault(&opt.MaxLanes, DefaultMaxLanes)
	orDefault(&opt.MaxNotes, DefaultMaxNotes)
	return &Report{next: next, opt: opt, lanes: map[laneKey]*lane{}, conns: map[int]*connInfo{},
		stride: 1, perConn: map[int]int{}, book: who.NewBook()}
}

func orDefault[T int | int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Flush flushes the next sink (record.Flusher).
func (r *Report) Flush() { record.Flush(r.next) }

// Emit keeps what the page needs of rec and passes it on.
func (r *Report) Emit(rec record.Record) {
	r.observe(rec)
	if r.next != nil {
		r.next.Emit(rec)
	}
}

// connInfo is a TCP connection with a watch kept: its addresses, HTTP/2
// or not, and how it ended.
type connInfo struct {
	id             int
	client, server string
	http2          bool
	closed         string
}

// lane is one watch: an exchange (an HTTP/1.1 request and its response, or
// an HTTP/2 stream) whose response streams watch events.
type lane struct {
	idx    int
	key    laneKey
	conn   *connInfo
	stream int // HTTP/2 stream ID, 0 on HTTP/1.1
	target string
	path   string
	query  url.Values
	ua     string
	// who names its client (who.Of), as the printers' lines do.
	who      string
	start    time.Time
	first    time.Time
	last     time.Time
	end      time.Time
	endHow   string
	endClean bool
	ended    bool
	status   int
	encoding string
	format   string
	counts   [nTypes]int
	marks    []mark
	dense    bool
	bins     map[int64]*[nTypes]int32
	binWidth time.Duration
	findings []string
	health   *record.Health
	watchNo  int
	reason   string
	why      record.Why // the kind of reason (record.WatchStart.Why)
	// began is, in a capture, how the watch followed an earlier one of
	// its client (pkg/rewatch); nil otherwise.
	began     *record.Restart
	after     time.Duration
	lastRV    string
	requestRV string
	relists   int // the session's re-lists before this watch began
	specials  int // ERROR, 410 and initial-events-end marks kept
	onConn    int // which watch of its connection (HTTP/1.1), from 1
	byClient  bool
	lastFrame int
	frameSeen bool
}

const (
	tAdded = iota
	tModified
	tDeleted
	tBookmark
	tError
	tOther
	nTypes
)

var typeNames = [nTypes]string{"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "other"}

func typeCode(t string) int {
	for i, n := range typeNames[:tOther] {
		if n == t {
			return i
		}
	}
	return tOther
}

// Flags of a mark.
const (
	flagInitialEnd = 1 << iota // the bookmark that ends the initial events
	flagInitial                // one of a watch-list's initial events
	flagExpired                // ERROR 410 (Expired or Gone)
)

type mark struct {
	t     time.Time
	typ   int
	flags int
	ev    int // index into events, -1 when the details were not kept
}

type note struct {
	lane int // -1: the connection's (drawn on its lanes)
	conn int
	t    time.Time
	kind string
	text string
}

type listInfo struct {
	t      time.Time
	items  int
	rv     string
	reason string
	dur    time.Duration
}

// detail is what the event view shows of one event.
type detail struct {
	lane    int
	seq     int
	t       time.Time
	typ     string
	what    string
	carrier string
	offset  int64
	length  int64
	format  string
	object  string
	objLen  int
	changes []string
	chunks  []carrier
	frames  bool
	more    int
	gzip    bool
	// ord is the event's number among all events; special marks an
	// ERROR, 410 or initial-events-end event; cost is its share of the
	// detail budget (see thin).
	ord     int
	special bool
	cost    int64
}

// carrier is one chunk or DATA frame as the byte strip draws it: its
// framing bytes before the data (the chunk-size line, or the frame header
// and pad length), the data as bytes of other events before this event's,
// this event's, and others' after, then the framing after the data (CRLF,
// or padding).
type carrier struct {
	Index    int    `json:"i"`
	Stream   uint32 `json:"s,omitempty"`
	Offset   int64  `json:"o"`
	Head     string `json:"h"`
	HeadText string `json:"ht"`
	Size     int64  `json:"n"`
	Before   int64  `json:"b"`
	Bytes    int64  `json:"e"`
	After    int64  `json:"a"`
	Tail     string `json:"t"`
	Events   int    `json:"k"`
	Inflated int64  `json:"z,omitempty"`
	Padding  int64  `json:"p,omitempty"`
	End      bool   `json:"x,omitempty"`
}

func (r *Report) see(t time.Time) {
	if t.IsZero() {
		return
	}
	if r.t0.IsZero() || t.Before(r.t0) {
		r.t0 = t
	}
	if t.After(r.t1) {
		r.t1 = t
	}
}

func (r *Report) conn(c *record.Conn) *connInfo {
	if c == nil {
		return nil
	}
	ci := r.conns[c.ID]
	if ci == nil {
		ci = &connInfo{id: c.ID}
		r.conns[c.ID] = ci
	}
	if c.Client.IsValid() {
		ci.client = c.Client.String()
	}
	if c.Server.IsValid() {
		ci.server = c.Server.String()
	}
	ci.http2 = ci.http2 || c.HTTP2
	return ci
}

// laneFor returns the lane of an exchange, made when first seen (a capture
// that starts mid-watch has events without a request).
func (r *Report) laneFor(c *record.Conn, exchange int, t time.Time) *lane {
	if c == nil {
		return nil
	}
	k := laneKey{c.ID, exchange}
	if l := r.lanes[k]; l != nil {
		return l
	}
	if len(r.order) >= r.opt.MaxLanes {
		return nil // counted by the caller, kept nowhere
	}
	ci := r.conn(c)
	l := &lane{idx: len(r.order), key: k, conn: ci, start: t, binWidth: 10 * time.Millisecond,
		bins: map[int64]*[nTypes]int32{}}
	if ci.http2 {
		l.stream = exchange
	}
	r.lanes[k] = l
	r.order = append(r.order, l)
	return l
}

func (r *Report) observe(rec record.Record) {
	switch v := rec.(type) {
	case *record.WatchStart:
		r.live = true
		r.see(v.Time)
		if len(r.watchStarts) < 64 {
			r.watchStarts = append(r.watchStarts, v)
		}
	case *record.Request:
		r.observeRequest(v)
	case *record.Response:
		r.see(v.Time)
		l := r.lanes[laneKey{v.Conn.Key(), v.Exchange}]
		if l == nil && v.Watch {
			// A watch whose request the capture missed (one past the
			// lanes kept was counted at its request).
			l = r.laneFor(v.Conn, v.Exchange, v.Time)
		}
		if l == nil {
			return
		}
		if l.who == "" && v.Request == nil {
			// A watch whose request was not seen: its connection's
			// client.
			l.who = phrase.Clip(who.ConnOf(nil, r.book.Known(v.Conn)).Text(), maxWhat)
		}
		l.status = v.StatusCode
		l.encoding = phrase.Clip(v.ContentEncoding, 64)
		l.format = v.Format
	case *record.Event:
		r.event(v)
	case *record.End:
		r.observeEnd(v)
	case *record.ConnNote:
		r.observeNote(v)
	case *record.Problem:
		r.observeProblem(v)
	case *record.Health:
		if v.Scope == "all" {
			r.overall = v
			return
		}
		if l := r.lanes[laneKey{v.Conn.Key(), v.Exchange}]; l != nil {
			l.health = v
			for _, f := range v.Findings {
				l.findings = append(l.findings, phrase.Clip(fmt.Sprintf("%s at event %d (%s)", f.Kind, f.Seq, f.Detail), maxWhat))
			}
		}
	case *record.Summary:
		r.summary = v
		r.live = r.live || v.Live
	case *record.List:
		r.observeList(v)
	case *record.Restart:
		r.see(v.Time)
		if l := r.lanes[laneKey{v.Conn.Key(), v.Exchange}]; l != nil {
			l.began, l.why = v, v.Why
			l.reason = phrase.Clip(v.Reason(), maxWhat)
		}
	case *record.Relist:
		r.see(v.Time)
		if v.Conn != nil {
			// A capture's re-list: drawn on the watch that made it.
			if l := r.lanes[laneKey{v.Conn.Key(), v.Exchange}]; l != nil {
				r.addNote(note{lane: l.idx, conn: l.key.conn, t: v.Time, kind: "relist", text: phrase.Clip("RE-LIST "+printer.RelistText(v), maxWhat)})
			}
			return
		}
		// Drawn on the watch that follows the re-list.
		r.relists++
		if r.addNote(note{lane: -1, t: v.Time, kind: "relist", text: printer.RelistText(v)}) {
			r.waiting = append(r.waiting, len(r.notes)-1)
		}
	case *record.Retry:
		r.see(v.Time)
		if len(r.retries) < r.opt.MaxNotes {
			r.retries = append(r.retries, note{lane: -1, t: v.Time, kind: "retry",
				text: fmt.Sprintf("retry in %s: %s", v.Wait.Round(time.Millisecond), v.Error)})
		}
	}
}

// observeRequest opens the lane of a watch request.
func (r *Report) observeRequest(v *record.Request) {
	r.see(v.Time)
	if !v.Watch {
		return
	}
	l := r.laneFor(v.Conn, v.Exchange, v.Time)
	if l == nil {
		r.dropped.lanes++
		return
	}
	l.start = v.Time
	l.target = phrase.Clip(v.Target, maxText)
	l.path, l.query = splitTarget(v.Target)
	l.path = phrase.Clip(l.path, maxText)
	l.requestRV = phrase.Clip(l.query.Get("resourceVersion"), 64)
	id := r.book.Of(v)
	if id.Agent != nil {
		l.ua = id.Agent.UserAgent
	}
	l.who = phrase.Clip(id.Text(), maxWhat)
	if p := r.startOf(v.Target); p != nil {
		l.watchNo, l.reason, l.why, l.after = p.Number, phrase.Clip(p.Reason, maxWhat), p.Why, p.After
	}
	r.perConn[l.key.conn]++
	l.onConn = r.perConn[l.key.conn]
	l.relists = r.relists
	for _, i := range r.waiting {
		r.notes[i].lane, r.notes[i].conn = l.idx, l.key.conn
	}
	r.waiting = nil
}

// observeEnd closes the lane of a body that ended.
func (r *Report) observeEnd(v *record.End) {
	r.see(v.Time)
	l := r.lanes[laneKey{v.Conn.Key(), v.Exchange}]
	if l == nil {
		return
	}
	l.ended, l.end, l.endClean = true, v.Time, v.Clean
	l.endHow = v.How
	if v.Detail != "" {
		l.endHow += ": " + v.Detail
	}
	if v.Status != nil {
		l.endHow += " (" + printer.StatusText(v.Status) + ")"
	}
	l.endHow = phrase.Clip(l.endHow, maxWhat)
	// The client ending its own watch (Ctrl-C, an informer
	// stopping) is no failure of the stream.
	l.byClient = v.ByClient
}

// observeNote draws a connection note on its connection's lanes (or lists it with the problems).
func (r *Report) observeNote(v *record.ConnNote) {
	r.book.See(v)
	// Drawn on the lanes of its connection: a connection without
	// a watch kept has none to be drawn on.
	r.see(v.Time)
	ci := r.conns[v.Conn.Key()]
	kind := noteKind(v)
	switch v.Kind {
	case "tls", "http2", "not-http":
		r.undecoded++
	}
	if kind == "conn" && len(r.problemList) < maxProblems {
		// Listed with the problems: a connection kwatch did not
		// decode (TLS without a key, not HTTP) has no lane.
		r.problemList = append(r.problemList, note{lane: -1, conn: v.Conn.Key(), t: v.Time, kind: "note",
			text: phrase.Clip(fmt.Sprintf("#%d %s %s", v.Conn.Key(), v.Conn, v.Message), maxWhat)})
	}
	if kind == "" || ci == nil {
		return
	}
	if kind == "closed" || kind == "reset" || kind == "capture-ended" {
		ci.closed = phrase.Clip(v.Message, maxWhat)
	}
	n := note{lane: -1, conn: ci.id, t: v.Time, kind: kind, text: phrase.Clip(v.Message, maxWhat)}
	if id := streamOf(kind, v); id > 0 {
		// A RST_STREAM, or a stall of one stream: that stream's
		// lane (none: a stream kwatch did not follow).
		l := r.lanes[laneKey{ci.id, id}]
		if l == nil {
			return
		}
		n.lane = l.idx
	}
	r.addNote(n)
}

// observeProblem lists a problem, on its lane when it has one.
func (r *Report) observeProblem(v *record.Problem) {
	r.see(v.Time)
	if v.Warning {
		r.warnings++
	} else {
		r.problems++
	}
	n := note{lane: -1, t: v.Time, kind: "problem", text: phrase.Clip(printer.ProblemText(v), maxWhat)}
	if v.Warning {
		n.kind = "warning"
	}
	if len(r.problemList) < maxProblems {
		p := n
		if v.Conn != nil {
			p.conn = v.Conn.ID
			p.text = phrase.Clip(fmt.Sprintf("#%d %s", v.Conn.ID, n.text), maxWhat)
		}
		r.problemList = append(r.problemList, p)
	}
	if v.Conn != nil {
		if r.conns[v.Conn.ID] == nil {
			return
		}
		n.conn = v.Conn.ID
		if l := r.lanes[laneKey{v.Conn.ID, v.Exchange}]; l != nil && v.Exchange != 0 {
			n.lane = l.idx
		}
	}
	r.addNote(n)
}

// observeList keeps a LIST of kwatch stream.
func (r *Report) observeList(v *record.List) {
	r.see(v.Time)
	if len(r.lists) < r.opt.MaxNotes {
		r.lists = append(r.lists, listInfo{t: v.Time, items: v.Items, rv: v.ResourceVersion, reason: phrase.Clip(v.Reason, maxWhat), dur: v.Duration})
	}
	if v.Why == record.WhyRelist {
		// kwatch stream --list-mode list lists again after 410:
		// drawn on the watch that follows.
		r.relists++
		text := fmt.Sprintf("LIST: %s at resourceVersion %s (%s)", phrase.Count(v.Items, "item", "items"), v.ResourceVersion, v.Reason)
		if r.addNote(note{lane: -1, t: v.Time, kind: "relist", text: phrase.Clip(text, maxWhat)}) {
			r.waiting = append(r.waiting, len(r.notes)-1)
		}
	}
}

// startOf takes the announcement of the watch whose request has target:
// the same path and query, else the same path, else the oldest.
func (r *Report) startOf(target string) *record.WatchStart {
	if len(r.watchStarts) == 0 {
		return nil
	}
	path, _, _ := strings.Cut(target, "?")
	k := 0
	for i, w := range r.watchStarts {
		if w.Path == target {
			k = i
			break
		}
		if p, _, _ := strings.Cut(w.Path, "?"); p == path && k == 0 {
			k = i
		}
	}
	w := r.watchStarts[k]
	r.watchStarts = append(r.watchStarts[:k], r.watchStarts[k+1:]...)
	return w
}

func (r *Report) addNote(n note) bool {
	if len(r.notes) >= r.opt.MaxNotes {
		r.dropped.notes++
		return false
	}
	r.notes = append(r.notes, n)
	return true
}

// noteKind sorts a connection note into what the timeline draws, by its
// typed fields: HTTP/2 PING, RST_STREAM, GOAWAY and flow-control stalls, a
// TCP zero window, the TCP connection's end. Notes the timeline does not
// draw (SETTINGS, the preface) give "".
func noteKind(n *record.ConnNote) string {
	switch n.Kind {
	case "closed":
		if n.Reset {
			return "reset"
		}
		return "closed"
	case "capture-ended":
		return "capture-ended"
	case "h2":
		switch n.Frame {
		case "PING":
			return "ping"
		case "RST_STREAM":
			return "rst_stream"
		case "GOAWAY":
			return "goaway"
		case "WINDOW_UPDATE":
			return "stall"
		}
	case "tcp":
		if n.Unlisted == 0 {
			return "stall" // not the count of the stalls not listed
		}
	case "tls", "http2", "not-http", "mid-stream", "no-syn":
		return "conn"
	}
	return ""
}

// streamOf returns the stream a RST_STREAM note or a stream's flow-control
// note (of kind, from noteKind) is about, 0 for a note of the whole
// connection.
func streamOf(kind string, n *record.ConnNote) int {
	if kind != "rst_stream" && kind != "stall" {
		return 0
	}
	return int(n.Stream)
}

func splitTarget(target string) (string, url.Values) {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		path, q, _ := strings.Cut(target, "?")
		vals, _ := url.ParseQuery(q)
		return path, vals
	}
	return u.Path, u.Query()
}

func (r *Report) event(e *record.Event) {
	r.see(e.Time)
	r.counted++
	typ := typeCode(e.Type)
	l := r.laneFor(e.Conn, e.Exchange, e.Time)
	if l == nil {
		r.hidden[typ]++
		return
	}
	l.counts[typ]++
	if l.first.IsZero() {
		l.first = e.Time
	}
	l.last = e.Time
	if e.ResourceVersion != "" {
		l.lastRV = e.ResourceVersion
	}
	if len(e.Diff) > 0 {
		r.diffSeen = true
	}
	l.bin(e.Time, typ)
	flags := 0
	if e.InitialEventsEnd {
		flags |= flagInitialEnd
	}
	if e.Initial {
		flags |= flagInitial
	}
	if e.Status != nil && e.Status.Code == 410 {
		flags |= flagExpired
	}
	// The health records count chunks only: DATA frames are counted
	// here, each once (a frame shared by events comes again).
	for _, f := range e.Frames {
		if f.Index > l.lastFrame || !l.frameSeen {
			r.frameSizes[record.ChunkBucket(f.Length)]++
			l.lastFrame, l.frameSeen = f.Index, true
		}
	}
	// Past a lane's (or all lanes') marks the lane is drawn as density;
	// ERROR, 410 and initial-events-end marks are kept further, within
	// bounds of their own.
	special := flags&(flagInitialEnd|flagExpired) != 0 || typ == tError
	if r.marks >= r.opt.MaxMarks || len(l.marks) >= r.opt.MaxLaneMarks {
		l.dense = true
		if !special || l.specials >= maxSpecialMarks || r.marks >= r.opt.MaxMarks+maxSpecialMarksTotal {
			r.dropped.marks++
			return
		}
	}
	if special {
		l.specials++
	}
	m := mark{t: e.Time, typ: typ, flags: flags, ev: -1}
	if d := r.detail(l, e, special); d != nil {
		m.ev = len(r.events)
		r.events = append(r.events, d)
	}
	l.marks = append(l.marks, m)
	r.marks++
}

// bin counts an event in the lane's density bins, widening them (and
// merging neighbours) when there would be more than maxBins.
func (l *lane) bin(t time.Time, typ int) {
	k := t.UnixNano() / int64(l.binWidth)
	b := l.bins[k]
	if b == nil {
		for len(l.bins) >= maxBins {
			l.binWidth *= 2
			merged := make(map[int64]*[nTypes]int32, len(l.bins)/2+1)
			for old, c := range l.bins {
				nk := old / 2
				if m := merged[nk]; m != nil {
					for i := range c {
						m[i] += c[i]
					}
				} else {
					merged[nk] = c
				}
			}
			l.bins = merged
			k = t.UnixNano() / int64(l.binWidth)
			if b = l.bins[k]; b != nil {
				break
			}
		}
		if b == nil {
			b = &[nTypes]int32{}
			l.bins[k] = b
		}
	}
	b[typ]++
}

// carriers lays out the chunks or DATA frames that carried e: where in
// each the event's bytes sit among other events' (RFC 9112 §7.1 chunks;
// RFC 9113 §6.1 DATA frames, whose header is 9 bytes and whose padding,
// when PADDED is set, follows a 1-byte pad length), from each carrier's
// data offset in the body and the event's. A compressed body's bytes
// cannot be placed: its events are counted in inflated bytes.
func carriers(e *record.Event) []carrier {
	var out []carrier
	place := func(dataAt, size, bytes int64) (before, after int64) {
		if dataAt < 0 {
			return 0, 0
		}
		before = min(max(e.Offset-dataAt, 0), size)
		return before, max(size-before-bytes, 0)
	}
	for _, c := range e.Chunks {
		if len(out) == maxCarriers {
			continue
		}
		b, a := place(c.DataAt, c.Size, c.Bytes)
		out = append(out, carrier{Index: c.Index, Offset: c.Offset, Head: spaced(hex.EncodeToString(c.Header)),
			HeadText: fmt.Sprintf("%q", c.Header), Size: c.Size, Before: b, Bytes: c.Bytes, After: a,
			Tail: "0d 0a", Events: c.Events, Inflated: c.Inflated})
	}
	for _, f := range e.Frames {
		if len(out) == maxCarriers {
			continue
		}
		hb := f.Header[:]
		if f.Padded {
			hb = append(hb, byte(f.Padding))
		}
		tail := ""
		if f.Padding > 0 {
			tail = fmt.Sprintf("%d bytes of padding", f.Padding)
		}
		b, a := place(f.DataAt, f.Data(), f.Bytes)
		out = append(out, carrier{Index: f.Index, Stream: f.Stream, Offset: f.Offset, Head: spaced(hex.EncodeToString(hb)),
			HeadText: fmt.Sprintf("DATA frame: length %d, flags 0x%02x, stream %d", f.Length, f.Header[4], f.Stream),
			Size:     f.Data(), Before: b, Bytes: f.Bytes, After: a, Tail: tail, Events: f.Events, Inflated: f.Inflated,
			Padding: f.Padding, End: f.EndStream})
	}
	return out
}

func spaced(h string) string {
	var sb strings.Builder
	for i := 0; i+1 < len(h); i += 2 {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(h[i : i+2])
	}
	return sb.String()
}

// detail keeps what the event view shows of e, while the detail budget
// lasts; past it the mark stays and its view says the details were not
// kept.
func (r *Report) detail(l *lane, e *record.Event, special bool) *detail {
	if !special && r.counted%r.stride != 0 {
		return nil // thinned out (see thin): nothing to lay out or copy
	}
	cs := carriers(e)
	// Only what the page shows is copied: a slice of a longer string
	// would keep all of it.
	obj := string(e.Object[:min(len(e.Object), r.opt.MaxObjectBytes)])
	what, carried := phrase.Clip(printer.EventWhat(e), maxWhat), phrase.Clip(printer.ChunkText(e), maxWhat)
	var changes []string
	for i, c := range e.Changes {
		if i == 50 {
			break
		}
		changes = append(changes, phrase.Clip(c, maxWhat))
	}
	if more := len(e.Changes) - len(changes) + e.MoreChanges; more > 0 {
		changes = append(changes, fmt.Sprintf("… %d more changes", more))
	}
	cost := int64(len(obj) + len(what) + len(carried) + 256)
	for _, c := range cs {
		cost += int64(len(c.Head) + len(c.HeadText) + 64)
	}
	for _, c := range changes {
		cost += int64(len(c))
	}
	for r.detailed+cost > r.opt.MaxDetailBytes {
		if !r.thin() {
			return nil
		}
		if !special && r.counted%r.stride != 0 {
			return nil
		}
	}
	r.detailed += cost
	d := &detail{lane: l.idx, seq: e.Seq, t: e.Time, typ: phrase.Clip(e.Type, 32), what: what, carrier: carried,
		offset: e.Offset, length: e.Length, format: e.Format, changes: changes,
		chunks: cs, frames: len(e.Frames) > 0, more: len(e.Chunks) + len(e.Frames) - len(cs), gzip: l.encoding != "", object: obj,
		ord: r.counted, special: special, cost: cost}
	d.objLen = len(e.Object)
	return d
}

// thin makes room in the detail budget by keeping the details of every
// other event kept so far (ERROR, 410 and initial-events-end ones stay),
// so that the events with bytes spread over the whole capture instead of
// being its first ones. It returns false when nothing is left to drop.
func (r *Report) thin() bool {
	if r.stride >= 1<<30 {
		return false
	}
	r.stride *= 2
	for i, d := range r.events {
		if d != nil && !d.special && d.ord%r.stride != 0 {
			r.detailed -= d.cost
			r.events[i] = nil
		}
	}
	return true
}

// laneLinks joins each watch to the one before it on the same resource from
// the same client and User-Agent, when that one had ended by then:
// "index|kind|reason" by lane index (kind from followKind). In a capture
// the links are pkg/rewatch's (record.Restart), which says why each watch
// began; kwatch stream's are found here, from its own watch announcements.
func (r *Report) laneLinks() map[int]string {
	links := map[int]string{}
	if !r.live {
		for _, l := range r.order {
			b := l.began
			if b == nil {
				continue
			}
			prev := r.lanes[laneKey{b.Prev.Key(), b.PrevExchange}]
			if prev == nil {
				continue
			}
			kind := "resume"
			if b.Why == record.WhyRelist {
				kind = "re-list"
			}
			links[l.idx] = fmt.Sprintf("%d|%s|%s", prev.idx, kind, phrase.Clip(printer.RestartText(b), maxWhat))
		}
		return links
	}
	type group struct{ path, client string }
	last := map[group]*lane{}
	byStart := append([]*lane(nil), r.order...)
	sort.SliceStable(byStart, func(i, j int) bool { return byStart[i].start.Before(byStart[j].start) })
	for _, l := range byStart {
		if l.path == "" {
			continue
		}
		client := ""
		if l.conn != nil {
			client = hostOf(l.conn.client)
		}
		g := group{l.path, client + "|" + l.ua}
		if prev := last[g]; prev != nil && prev.ended && !l.start.Before(prev.end) {
			links[l.idx] = fmt.Sprintf("%d|%s|%s", prev.idx, followKind(prev, l), l.reason)
		}
		last[g] = l
	}
	return links
}

// followKind says how a watch followed the one before it on the same
// resource from the same client: "re-list" when kwatch stream listed again
// in between (after 410 Gone) or said so, "resume" when it started from the
// last resourceVersion the one before delivered, else "follows" (a new
// watch, e.g. an informer's after its own LIST).
func followKind(prev, l *lane) string {
	switch {
	case l.relists > prev.relists || l.why == record.WhyRelist:
		return "re-list"
	case l.why == record.WhyResume:
		return "resume"
	case l.requestRV != "" && l.requestRV != "0" && l.requestRV == prev.lastRV:
		return "resume"
	}
	return "follows"
}

func hostOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i > 0 {
		return addr[:i]
	}
	return addr
}
