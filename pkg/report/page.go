package report

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
)

//go:embed assets/page.html
var pageHTML string

//go:embed assets/page.css
var pageCSS string

//go:embed assets/page.js
var pageJS string

// page is the data embedded in the report as JSON; the page's script draws
// everything from it. Times are milliseconds after T0.
type page struct {
	Title     string     `json:"title"`
	Generated string     `json:"generated"`
	T0        string     `json:"t0"`
	Span      float64    `json:"span"`
	Live      bool       `json:"live"`
	Diff      bool       `json:"diff"`
	Lanes     []pageLane `json:"lanes,omitempty"`  // written one by one
	Events    []pageEv   `json:"events,omitempty"` // written one by one
	Notes     []pageNote `json:"notes"`
	Sizes     []sizeBar  `json:"sizes"`
	Problems  []pageNote `json:"problems"`
	Summary   string     `json:"summary"`
	Health    string     `json:"health"`
	Lists     []string   `json:"lists"`
	Retries   []pageNote `json:"retries"`
	Dropped   dropped    `json:"dropped"`
	Events0   int        `json:"eventCount"`
	MaxMarks  int        `json:"maxLaneMarks"`
}

// sizeBar is one bucket of the histogram of chunk and DATA frame sizes
// that carried events, as the health records count them.
type sizeBar struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

type dropped struct {
	Notes   int `json:"notes"`
	Lanes   int `json:"lanes"`
	Details int `json:"details"`
	Marks   int `json:"marks"`
	// Events counts the events of watches not kept, by type.
	Events [nTypes]int `json:"events"`
}

type pageLane struct {
	Idx      int          `json:"i"`
	Label    string       `json:"label"`
	ByClient bool         `json:"byClient"`
	Conn     int          `json:"conn"`
	Client   string       `json:"client"`
	Server   string       `json:"server"`
	HTTP2    bool         `json:"h2"`
	Stream   int          `json:"stream"`
	Path     string       `json:"path"`
	Target   string       `json:"target"`
	Selector string       `json:"sel"`
	UA       string       `json:"ua"`
	Who      string       `json:"who"`
	Start    float64      `json:"start"`
	First    *float64     `json:"first"`
	Last     *float64     `json:"last"`
	End      *float64     `json:"end"`
	How      string       `json:"how"`
	Clean    bool         `json:"clean"`
	Status   int          `json:"status"`
	Encoding string       `json:"enc"`
	Format   string       `json:"format"`
	Counts   [nTypes]int  `json:"counts"`
	Dense    bool         `json:"dense"`
	Marks    [][4]float64 `json:"m"`
	BinWidth float64      `json:"binW"`
	Bins     [][]float64  `json:"bins"`
	Findings []string     `json:"findings"`
	Health   string       `json:"health"`
	WatchNo  int          `json:"watch"`
	Reason   string       `json:"reason"`
	After    string       `json:"after"`
	Link     string       `json:"link"`
	Closed   string       `json:"closed"`
	Restarts int          `json:"restarts"`
	// Bookmarks: count, then the shortest, median and longest interval
	// between them in milliseconds (health records).
	Bookmarks []float64 `json:"bookmarks"`
}

type pageEv struct {
	Lane    int       `json:"l"`
	Seq     int       `json:"s"`
	T       float64   `json:"t"`
	Time    string    `json:"ts"`
	Type    string    `json:"ty"`
	What    string    `json:"w"`
	Carrier string    `json:"c"`
	Offset  int64     `json:"o"`
	Length  int64     `json:"n"`
	Format  string    `json:"f"`
	Object  string    `json:"obj"`
	ObjLen  int       `json:"ol"`
	Changes []string  `json:"ch,omitempty"`
	Carrs   []carrier `json:"cs"`
	Frames  bool      `json:"fr,omitempty"`
	More    int       `json:"more,omitempty"`
	Gzip    bool      `json:"gz,omitempty"`
}

type pageNote struct {
	Lane int     `json:"l"`
	Conn int     `json:"c"`
	T    float64 `json:"t"`
	Kind string  `json:"k"`
	Text string  `json:"x"`
}

func (r *Report) ms(t time.Time) float64 {
	if t.IsZero() || r.t0.IsZero() {
		return 0
	}
	return float64(t.Sub(r.t0).Microseconds()) / 1000
}

func (r *Report) msp(t time.Time) *float64 {
	if t.IsZero() {
		return nil
	}
	v := r.ms(t)
	return &v
}

func (r *Report) build(now time.Time) *page {
	p := &page{Title: r.opt.Title, Generated: now.UTC().Format(time.RFC3339), Live: r.live, Diff: r.diffSeen,
		Span: r.ms(r.t1), Events0: r.counted, MaxMarks: r.opt.MaxLaneMarks,
		Dropped: dropped{Notes: r.dropped.notes, Lanes: r.dropped.lanes, Marks: r.dropped.marks, Events: r.hidden},
		Lanes:   []pageLane{}, Events: []pageEv{}, Notes: []pageNote{}, Sizes: []sizeBar{}, Lists: []string{}, Retries: []pageNote{}, Problems: []pageNote{}}
	if !r.t0.IsZero() {
		p.T0 = r.t0.UTC().Format(time.RFC3339Nano)
	}
	links := r.laneLinks()
	for _, l := range r.order {
		p.Lanes = append(p.Lanes, r.pageLane(l, links))
	}
	r.pageEvents(p)
	for _, i := range r.waiting {
		// A re-list with no watch after it: drawn on the last one.
		if len(r.order) > 0 {
			l := r.order[len(r.order)-1]
			r.notes[i].lane, r.notes[i].conn = l.idx, l.key.conn
		}
	}
	for _, n := range r.notes {
		p.Notes = append(p.Notes, pageNote{Lane: n.lane, Conn: n.conn, T: r.ms(n.t), Kind: n.kind, Text: n.text})
	}
	for _, n := range r.retries {
		p.Retries = append(p.Retries, pageNote{Lane: -1, T: r.ms(n.t), Kind: n.kind, Text: n.text})
	}
	for i, n := range r.frameSizes {
		if r.overall != nil {
			n += r.overall.ChunkSizes[i]
		}
		p.Sizes = append(p.Sizes, sizeBar{Name: printer.ChunkBucketNames[i], N: n})
	}
	for _, n := range r.problemList {
		p.Problems = append(p.Problems, pageNote{Lane: -1, Conn: n.conn, T: r.ms(n.t), Kind: n.kind, Text: n.text})
	}
	for _, li := range r.lists {
		s := fmt.Sprintf("+%.3f s  LIST: %d items at resourceVersion %s in %s", r.ms(li.t)/1000, li.items, li.rv, li.dur.Round(time.Millisecond))
		if li.reason != "" {
			s += " (" + li.reason + ")"
		}
		p.Lists = append(p.Lists, s)
	}
	if r.overall != nil {
		p.Health = printer.HealthText(r.overall)
	}
	if r.summary != nil {
		p.Summary = r.summaryText(r.summary)
	}
	return p
}

// pageLane is lane l as the page draws it; links are the lanes' links to
// the watches they follow (laneLinks).
func (r *Report) pageLane(l *lane, links map[int]string) pageLane {
	pl := pageLane{Idx: l.idx, Path: l.path, Target: l.target, Selector: selector(l), UA: l.ua, Who: l.who, Start: r.ms(l.start),
		First: r.msp(l.first), Last: r.msp(l.last), How: l.endHow, Clean: l.endClean, Status: l.status,
		Encoding: l.encoding, Format: l.format, Counts: l.counts, Dense: l.dense,
		Findings: l.findings, WatchNo: l.watchNo, Reason: l.reason, Link: links[l.idx], Stream: l.stream,
		Marks: make([][4]float64, 0, len(l.marks)), BinWidth: float64(l.binWidth.Microseconds()) / 1000}
	if pl.Findings == nil {
		pl.Findings = []string{}
	}
	if l.after > 0 {
		pl.After = l.after.Round(time.Millisecond).String()
	}
	pl.Label, pl.ByClient = r.label(l), l.byClient
	if l.ended {
		pl.End = r.msp(l.end)
	}
	if l.conn != nil {
		pl.Conn, pl.Client, pl.Server, pl.HTTP2, pl.Closed = l.conn.id, l.conn.client, l.conn.server, l.conn.http2, l.conn.closed
	}
	if l.health != nil {
		pl.Health = printer.HealthText(l.health)
		pl.Restarts = l.health.Restarts
		b := l.health.Bookmarks
		pl.Bookmarks = []float64{float64(b.Count), ms(b.Min), ms(b.Median), ms(b.Max)}
	}
	for _, m := range l.marks {
		pl.Marks = append(pl.Marks, [4]float64{r.ms(m.t), float64(m.typ), float64(m.flags), float64(m.ev)})
	}
	keys := make([]int64, 0, len(l.bins))
	for k := range l.bins {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		b := l.bins[k]
		row := []float64{r.ms(time.Unix(0, k*int64(l.binWidth)))}
		for _, c := range b {
			row = append(row, float64(c))
		}
		pl.Bins = append(pl.Bins, row)
	}
	if pl.Bins == nil {
		pl.Bins = [][]float64{}
	}
	return pl
}

// pageEvents adds the events whose details are kept to p, and points the
// lanes' marks at them.
func (r *Report) pageEvents(p *page) {
	// Details thinned out (see thin) leave holes: number the kept ones.
	index := make([]int, len(r.events))
	for i, d := range r.events {
		index[i] = -1
		if d == nil {
			continue
		}
		index[i] = len(p.Events)
		cs := d.chunks
		if cs == nil {
			cs = []carrier{}
		}
		p.Events = append(p.Events, pageEv{Lane: d.lane, Seq: d.seq, T: r.ms(d.t), Time: d.t.UTC().Format("2006-01-02T15:04:05.000000Z"),
			Type: d.typ, What: d.what, Carrier: d.carrier, Offset: d.offset, Length: d.length, Format: d.format, Object: d.object,
			ObjLen: d.objLen, Changes: d.changes, Carrs: cs, Frames: d.frames, More: d.more, Gzip: d.gzip})
	}
	marks := 0
	for i := range p.Lanes {
		for k, m := range p.Lanes[i].Marks {
			if m[3] >= 0 {
				p.Lanes[i].Marks[k][3] = float64(index[int(m[3])])
			}
			marks++
		}
	}
	p.Dropped.Details = marks - len(p.Events)
}

// summaryText is the page's one-line summary of the run s ended.
func (r *Report) summaryText(s *record.Summary) string {
	parts := []string{}
	if !s.Live {
		parts = append(parts, phrase.Count(int(s.Packets), "packet", "packets"), phrase.Count(s.Connections, "TCP connection", "TCP connections"))
		if r.undecoded > 0 {
			parts = append(parts, fmt.Sprintf("%d not decoded", r.undecoded))
		}
	}
	parts = append(parts, phrase.Count(len(r.order)+r.dropped.lanes, "watch", "watches"), phrase.Count(r.counted, "event", "events"),
		phrase.Count(r.problems, "problem", "problems")+", "+phrase.Count(r.warnings, "warning", "warnings"))
	return strings.Join(parts, " · ")
}

// label names a watch as the terminal does: "#1", "#1 s3" (an HTTP/2
// stream), "#1 watch 2" (the second watch of an HTTP/1.1 connection), and
// for kwatch stream after its watch number: "watch 4 #3".
func (r *Report) label(l *lane) string {
	s := fmt.Sprintf("#%d", l.key.conn)
	switch {
	case l.conn != nil && l.conn.http2 && l.key.exchange > 0:
		s += fmt.Sprintf(" s%d", l.key.exchange)
	case r.perConn[l.key.conn] > 1 && l.onConn > 0:
		s += fmt.Sprintf(" watch %d", l.onConn)
	}
	if l.watchNo > 0 {
		s = fmt.Sprintf("watch %d %s", l.watchNo, s)
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// selector names what a watch asked for beyond its path: label and field
// selectors, the resourceVersion it started from, a watch-list's
// sendInitialEvents, timeoutSeconds.
func selector(l *lane) string {
	var parts []string
	for _, k := range []string{"labelSelector", "fieldSelector", "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds"} {
		if v := l.query.Get(k); v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

// Write renders the page to w: an HTML5 document with its style, script
// and data inline. Errors are w's.
func (r *Report) Write(w io.Writer) error {
	p := r.build(time.Now())
	lanes, events := p.Lanes, p.Events
	p.Lanes, p.Events = nil, nil
	meta, err := json.Marshal(p)
	if err != nil {
		return err
	}
	title := r.opt.Title
	if title == "" {
		title = "kwatch report"
	}
	// json.Marshal escapes <, > and & in strings, so the data cannot end
	// its script element; the page reads it with JSON.parse.
	// The page is cut where the data goes before anything is put in:
	// a title (the capture's file name) may hold "{{DATA}}" itself.
	fill := strings.NewReplacer(
		"{{TITLE}}", html.EscapeString(title),
		"{{STYLE}}", pageCSS,
		"{{SCRIPT}}", pageJS,
	)
	before, after, _ := strings.Cut(pageHTML, "{{DATA}}")
	before, after = fill.Replace(before), fill.Replace(after)
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(before)
	// The data is one JSON object; its lanes and events are encoded one
	// at a time, so that the page is never all in memory at once.
	bw.Write(meta[:len(meta)-1])
	if err := writeArray(bw, `,"lanes":[`, lanes); err != nil {
		return err
	}
	if err := writeArray(bw, `],"events":[`, events); err != nil {
		return err
	}
	bw.WriteString("]}")
	bw.WriteString(after)
	return bw.Flush()
}

func writeArray[T any](bw *bufio.Writer, open string, items []T) error {
	bw.WriteString(open)
	for i := range items {
		if i > 0 {
			bw.WriteByte(',')
		}
		b, err := json.Marshal(&items[i])
		if err != nil {
			return err
		}
		bw.Write(b)
	}
	return nil
}

// WriteFile writes the page to path through a temporary file in the same
// directory renamed into place, so that a report being rewritten is never
// seen half written. The file's mode is 0600, as kwatch stream --record's:
// the page holds the objects of the capture.
func (r *Report) WriteFile(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".kwatch-report-*.html")
	if err != nil {
		return err
	}
	err = r.Write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
