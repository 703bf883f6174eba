// Package printer turns kwatch records into output: readable, colored lines
// for people (Pretty) and JSON Lines for scripts (JSON). Both filter the same
// way: watch exchanges are shown, other HTTP exchanges only when asked, and
// problems and non-HTTP connections always.
package printer

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/who"
)

// Options tune a printer.
type Options struct {
	// Color enables ANSI colors (decided once by the caller from
	// --color, NO_COLOR, TERM and whether stdout is a terminal).
	Color bool
	// Wire shows the framing bytes of every chunk in hex.
	Wire bool
	// AllHTTP also shows HTTP exchanges that are not watches.
	AllHTTP bool
	// Terminal selects local clock times (15:04:05.000000) instead of RFC
	// 3339 times in UTC.
	Terminal bool
	// HideUndecrypted leaves out the TLS connections that could not be
	// decrypted and carried nothing else (their "tls" note and their
	// "no TLS key for this connection" problems): they are counted in
	// Tally.NotDecrypted instead, which the summary says in one line. A
	// connection that has anything else to show (another problem) is
	// shown whole.
	HideUndecrypted bool
	// Filtered says that the watch filters (--user-agent, --resource, -n:
	// pkg/filter) narrowed what is shown: a connection that could not be
	// decoded (TLS not decrypted, not HTTP) is not shown for that alone,
	// only counted in the summary's "not decoded", as the connections
	// whose watches were all left out are not shown.
	Filtered bool
	// Bookmarks shows each BOOKMARK event on a line of its own. Without
	// it the readable output folds a watch's bookmarks into one line per
	// BookmarkFold ("12 BOOKMARKs rv 2351→2410 over 4m58s"), said before
	// the watch's next other event, its end, or once the fold spans
	// BookmarkFold; the initial-events-end bookmark keeps its line. JSON
	// Lines always have every event.
	Bookmarks bool
}

// Printer is a record.Sink that writes output; Close writes the summary.
type Printer interface {
	record.Sink
	// Flush writes the output held so far (see record.Flusher); printers
	// hold lines until then, or until 64 KiB of them.
	Flush()
	// Close writes what is held and returns the first write error.
	Close() error
	// Tally returns what was printed so far.
	Tally() *Tally
}

// Tally counts the records a printer saw.
type Tally struct {
	Events      map[string]int
	Chunks      int
	Frames      int // HTTP/2 DATA frames of the responses
	Watches     int
	Exchanges   int
	Problems    int // errors
	Warnings    int // problems that decoded anyway
	Connections int
	// Undecoded counts the connections that carried no HTTP/1.1 kwatch
	// could decode, by the kind of their note: "tls" (encrypted), "http2",
	// "not-http"; counted when the connection ends (kwatch pcap).
	Undecoded map[string]int
	// Decrypted counts the TLS connections decrypted with a key log, by
	// version and cipher suite ("TLS 1.3 TLS_AES_128_GCM_SHA256").
	Decrypted map[string]int
	// NotDecrypted counts the TLS connections left out by
	// Options.HideUndecrypted.
	NotDecrypted NotDecrypted
	// HTTPConns counts the connections that carried an HTTP request or
	// response kwatch decoded.
	HTTPConns int
}

// NotDecrypted counts TLS connections that could not be decrypted, left
// out of the output (Options.HideUndecrypted).
type NotDecrypted struct {
	// Connections counts them; Bytes is what their TCP streams carried.
	Connections int
	Bytes       int64
	// NoKey counts those a key log was given for that holds no key of
	// theirs ("no TLS key for this connection").
	NoKey int
}

// NothingFrom says where a run's connections came from, for
// Tally.NothingDecoded, in the terms of the command that ran.
type NothingFrom struct {
	// Whose names the connections' source, possessive: "the capture's"
	// (kwatch pcap), "the processes'" (kwatch attach).
	Whose string
	// None says there was no connection at all.
	None string
	// TLSAdvice says what to do when TLS connections were not decrypted.
	TLSAdvice string
}

// Sources of NothingDecoded's message.
var (
	// FromCapture: kwatch pcap's file or interface, decrypted with key
	// logs.
	FromCapture = NothingFrom{Whose: "the capture's", None: "the capture holds no TCP connection",
		TLSAdvice: "give the TLS clients' key logs with --tls-keylog or SSLKEYLOGFILE (start the capture before they connect)"}
	// FromAttach: kwatch attach's processes, decrypted with their own
	// secrets or state.
	FromAttach = NothingFrom{Whose: "the processes'", None: "no TCP connection of the processes carried a packet while kwatch was attached",
		TLSAdvice: "their handshakes came before kwatch attached and their TLS state could not be read from the processes (kwatch said why when it attached)"}
)

// NothingDecoded says, when a run of connections TCP connections
// decoded no HTTP at all, why, in the terms of from, e.g. "nothing
// decoded: the capture's 7 TCP connections carried no HTTP kwatch could
// read (7 not decoded: 7 TLS); give the TLS clients' key logs with
// --tls-keylog or SSLKEYLOGFILE (…)"; "" when something was decoded.
func (t *Tally) NothingDecoded(connections int, from NothingFrom) string {
	if t.HTTPConns > 0 {
		return ""
	}
	if connections == 0 {
		return "nothing decoded: " + from.None
	}
	msg := fmt.Sprintf("nothing decoded: %s %s carried no HTTP kwatch could read", from.Whose, phrase.Count(connections, "TCP connection", "TCP connections"))
	if u := undecodedText(t.Undecoded); u != "" {
		msg += " (" + u + ")"
	}
	if t.Undecoded["tls"] > 0 {
		msg += "; " + from.TLSAdvice
	}
	return msg
}

// filter decides which records are shown, holding back a request until its
// response says whether the exchange is a watch.
type filter struct {
	opt       Options
	held      map[heldKey]*record.Request
	shownConn map[int]bool
	watch     map[heldKey]bool
	// notes about a connection not shown yet (such as "no-syn", which
	// comes before its first request), by connection ID.
	heldNotes map[int][]record.Record
	tally     Tally
	// undecoded is the kind of the first note that said a connection
	// cannot be decoded, and httpConn the connections that carried HTTP
	// all the same, until each connection ends.
	undecoded map[int]string
	httpConn  map[int]bool
	// watchNo numbers the watch exchanges shown on each connection, 1, 2,
	// …, in the order their responses came (watchesOn counts them): the
	// numbers a reader can count on the screen, unlike the exchange
	// numbers, which count hidden discovery and LIST exchanges too.
	watchNo   map[heldKey]int
	watchesOn map[int]int
	// starts are kwatch stream's watch announcements (WATCH n) whose
	// request has not come yet, and opened the number each watch request
	// was announced with, until the request is printed.
	starts []*record.WatchStart
	opened map[heldKey]int
	// hidden holds, by connection ID, the records of a connection that
	// could not be decrypted (Options.HideUndecrypted), until it ends
	// (counted in tally.NotDecrypted) or shows something else (shown
	// whole).
	hidden map[int]*hiddenConn
	// book keeps what is known of each connection's client (its
	// process), to name the clients of connections and watches.
	book *who.Book
}

// hiddenConn is what is held of a connection that could not be decrypted.
type hiddenConn struct {
	recs  []record.Record
	noKey bool // a "no TLS key for this connection" problem came
}

// maxHidden bounds filter.hidden; past it connections are shown as usual.
const maxHidden = 1024

type heldKey struct{ conn, exchange int }

func newFilter(opt Options) filter {
	return filter{opt: opt, held: map[heldKey]*record.Request{}, shownConn: map[int]bool{},
		watch: map[heldKey]bool{}, heldNotes: map[int][]record.Record{}, tally: Tally{Events: map[string]int{}, Undecoded: map[string]int{}},
		undecoded: map[int]string{}, httpConn: map[int]bool{}, watchNo: map[heldKey]int{}, watchesOn: map[int]int{},
		opened: map[heldKey]int{}, hidden: map[int]*hiddenConn{}, book: who.NewBook()}
}

// pass returns the records to print for r, in order (possibly none, or a
// held request followed by r).
func (f *filter) pass(r record.Record) []record.Record {
	switch v := r.(type) {
	case *record.Request:
		f.sawHTTP(v.Conn)
		k := heldKey{v.Conn.ID, v.Exchange}
		if v.Watch {
			if n := f.announced(v.Target); n > 0 && len(f.opened) < 1024 {
				f.opened[k] = n
			}
		}
		if v.Watch || f.opt.AllHTTP {
			f.watch[k] = v.Watch
			return f.withConn(v.Conn, r)
		}
		if len(f.held) < 1024 {
			f.held[k] = v
		}
		return nil
	case *record.Response:
		f.sawHTTP(v.Conn)
		k := heldKey{v.Conn.ID, v.Exchange}
		req := f.held[k]
		delete(f.held, k)
		_, reqShown := f.watch[k]
		// A watch exchange: the request asked for a watch (whatever the
		// answer, e.g. 410 Gone or 403), or the response is a watch
		// stream whose request was not captured.
		isWatch := v.Watch || (v.Request != nil && v.Request.Watch)
		if isWatch && v.StatusCode >= 200 { // an interim response (1xx) is not one more watch
			f.tally.Watches++
			f.watchesOn[v.Conn.ID]++
			f.watchNo[k] = f.watchesOn[v.Conn.ID]
		}
		if !isWatch && !reqShown && !f.opt.AllHTTP {
			return nil
		}
		f.watch[k] = isWatch
		f.tally.Exchanges++
		if req != nil {
			return f.withConn(v.Conn, req, r)
		}
		return f.withConn(v.Conn, r)
	case *record.Event:
		event.CountType(f.tally.Events, v.Type)
		return f.withConn(v.Conn, r)
	case *record.End:
		k := heldKey{v.Conn.ID, v.Exchange}
		if _, ok := f.watch[k]; !ok {
			delete(f.held, k)
			return nil
		}
		if !v.Request {
			// The response's End is the exchange's last record: forget
			// it, so that the maps do not grow with a capture's (or a
			// long stream's) exchanges.
			delete(f.watch, k)
		}
		if v.Request && !f.opt.AllHTTP {
			return nil
		}
		f.tally.Chunks += v.Chunks
		f.tally.Frames += v.Frames
		return []record.Record{r}
	case *record.ConnNote:
		f.book.See(v)
		if v.Kind == "tls-decrypted" {
			if f.tally.Decrypted == nil {
				f.tally.Decrypted = map[string]int{}
			}
			if len(f.tally.Decrypted) < 64 {
				f.tally.Decrypted[v.Suite]++
			}
		}
		if v.Kind == "tls" || v.Kind == "not-http" || v.Kind == "http2" {
			if _, ok := f.undecoded[v.Conn.ID]; !ok {
				f.undecoded[v.Conn.ID] = v.Kind
			}
			if v.Kind == "tls" && f.hide(v.Conn, r, false) {
				return nil
			}
			if !f.opt.Filtered {
				return f.withConn(v.Conn, r)
			}
			// Filtered: held as the connection's other notes are,
			// said if it shows something kept.
		}
		if v.Kind == "closed" || v.Kind == "capture-ended" {
			// A connection's last record.
			defer delete(f.shownConn, v.Conn.ID)
			if kind, ok := f.undecoded[v.Conn.ID]; ok && !f.httpConn[v.Conn.ID] {
				f.tally.Undecoded[kind]++
			}
			if h := f.hidden[v.Conn.ID]; h != nil {
				delete(f.hidden, v.Conn.ID)
				f.countHidden(h, v.Bytes)
			}
			delete(f.undecoded, v.Conn.ID)
			delete(f.httpConn, v.Conn.ID)
		}
		if !f.shownConn[v.Conn.ID] {
			// A note can come before the connection's first shown
			// record (e.g. "no-syn" before the request): hold it
			// until the connection is shown, and forget it when the
			// connection ends unshown.
			switch {
			case v.Kind == "closed" || v.Kind == "capture-ended":
				delete(f.heldNotes, v.Conn.ID)
			case len(f.heldNotes) < 1024 && len(f.heldNotes[v.Conn.ID]) < 8:
				f.heldNotes[v.Conn.ID] = append(f.heldNotes[v.Conn.ID], r)
			}
			return nil
		}
		return []record.Record{r}
	case *record.WatchStart:
		if len(f.starts) >= maxStarts {
			f.starts = f.starts[1:] // the oldest: a watch that never sent its request
		}
		f.starts = append(f.starts, v)
	case *record.Restart:
		return f.withConn(v.Conn, r)
	case *record.Relist:
		if v.Conn != nil {
			return f.withConn(v.Conn, r)
		}
	case *record.Problem:
		if v.Kind == record.KindNoTLSKey && v.Conn != nil && f.hide(v.Conn, r, true) {
			return nil
		}
		f.countProblem(v)
		if v.Conn != nil {
			return f.withConn(v.Conn, r)
		}
		return []record.Record{r}
	case *record.Summary:
		f.endHidden()
	}
	return []record.Record{r}
}

// maxStarts bounds filter.starts: the announcements waiting for their
// requests (several resources announce theirs at once).
const maxStarts = 64

// announced takes the announcement (WATCH n) of the watch whose request
// has target, and returns its number (0: none): the newest with the same
// path and query, else the newest with the same path, else the oldest
// (several resources announce their watches at once). Announcements of the
// same path older than the one taken are dropped: their watches never sent
// a request (a retry that failed before it, or a request the tap did not
// see), and a later request of that path is a later watch's.
func (f *filter) announced(target string) int {
	if len(f.starts) == 0 {
		return 0
	}
	path, _, _ := strings.Cut(target, "?")
	k := -1
	for i := len(f.starts) - 1; i >= 0; i-- {
		if f.starts[i].Path == target {
			k = i
			break
		}
		if p, _, _ := strings.Cut(f.starts[i].Path, "?"); p == path && k < 0 {
			k = i
		}
	}
	if k < 0 {
		k = 0
	}
	n := f.starts[k].Number
	taken, _, _ := strings.Cut(f.starts[k].Path, "?")
	kept := f.starts[:0]
	for i, w := range f.starts {
		if p, _, _ := strings.Cut(w.Path, "?"); i == k || i < k && p == taken {
			continue
		}
		kept = append(kept, w)
	}
	clear(f.starts[len(kept):])
	f.starts = kept
	return n
}

// watchNumber returns, once, the number (WATCH n) the watch request of
// exchange on connection c was announced with; 0 when none was.
func (f *filter) watchNumber(c *record.Conn, exchange int) int {
	k := heldKey{c.Key(), exchange}
	n := f.opened[k]
	delete(f.opened, k)
	return n
}

// connRecord marks the first record shown of a connection: the connection,
// its client as known then (who.ConnOf: its first request shown, its
// process), and whether a process note is shown after it (noted).
type connRecord struct {
	conn  *record.Conn
	who   who.Identity
	noted bool
}

// When returns the zero time: the record marks a connection, not a moment.
func (connRecord) When() time.Time { return time.Time{} }

func (f *filter) withConn(c *record.Conn, rs ...record.Record) []record.Record {
	if c == nil || f.shownConn[c.ID] {
		return rs
	}
	f.shownConn[c.ID] = true
	f.tally.Connections++
	held := f.heldNotes[c.ID]
	cr := connRecord{conn: c, who: who.ConnOf(firstRequest(rs), f.book.Known(c))}
	for _, n := range held {
		if n, ok := n.(*record.ConnNote); ok && n.Kind == "process" {
			cr.noted = true
		}
	}
	out := append([]record.Record{cr}, held...)
	delete(f.heldNotes, c.ID)
	if h := f.hidden[c.ID]; h != nil {
		// It has more to show than that it was not decrypted: shown
		// whole, its problems counted now.
		delete(f.hidden, c.ID)
		for _, r := range h.recs {
			if p, ok := r.(*record.Problem); ok {
				f.countProblem(p)
			}
		}
		out = append(out, h.recs...)
	}
	return append(out, rs...)
}

// firstRequest returns the first request among rs; nil when none is.
func firstRequest(rs []record.Record) *record.Request {
	for _, r := range rs {
		if q, ok := r.(*record.Request); ok {
			return q
		}
	}
	return nil
}

// whoOf names the client of a watch: of its request (who.Of), or, for a
// watch whose request was not seen (req nil), of its connection alone.
func (f *filter) whoOf(c *record.Conn, req *record.Request) who.Identity {
	if req != nil {
		return f.book.Of(req)
	}
	return who.ConnOf(nil, f.book.Known(c))
}

// sawHTTP notes that connection c carried HTTP.
func (f *filter) sawHTTP(c *record.Conn) {
	if !f.httpConn[c.ID] {
		f.httpConn[c.ID] = true
		f.tally.HTTPConns++
	}
}

// countProblem counts a problem shown.
func (f *filter) countProblem(p *record.Problem) {
	if p.Warning {
		f.tally.Warnings++
	} else {
		f.tally.Problems++
	}
}

// hide holds r, a record saying that connection c could not be decrypted
// (its "tls" note, or a no-key problem when noKey), when
// Options.HideUndecrypted asks for it and c is not shown yet; it reports
// whether r was held.
func (f *filter) hide(c *record.Conn, r record.Record, noKey bool) bool {
	if !f.opt.HideUndecrypted || f.shownConn[c.ID] || f.httpConn[c.ID] {
		return false
	}
	h := f.hidden[c.ID]
	if h == nil {
		if len(f.hidden) >= maxHidden {
			return false
		}
		h = &hiddenConn{}
		f.hidden[c.ID] = h
	}
	if len(h.recs) >= 8 {
		return false
	}
	h.recs = append(h.recs, r)
	h.noKey = h.noKey || noKey
	return true
}

// countHidden counts a connection left out as not decrypted, whose TCP
// streams carried bytes.
func (f *filter) countHidden(h *hiddenConn, bytes int64) {
	n := &f.tally.NotDecrypted
	n.Connections++
	n.Bytes += bytes
	if h.noKey {
		n.NoKey++
	}
}

// endHidden counts the connections still held as not decrypted when the
// run ends (their ends were not seen).
func (f *filter) endHidden() {
	for id, h := range f.hidden {
		f.countHidden(h, 0)
		delete(f.hidden, id)
	}
}

// watchLabel names the watch of exchange on connection c as the screen
// shows it: "#3" for a connection's only watch shown, "#3 watch 2" for the
// second watch shown on it, "#3 s5" for stream 5 of an HTTP/2 connection.
func (f *filter) watchLabel(c *record.Conn, exchange int) string {
	conn := c.ID
	k := heldKey{conn, exchange}
	n := f.watchNo[k]
	delete(f.watchNo, k) // a watch's health is said once
	if c.HTTP2 && exchange > 0 {
		return fmt.Sprintf("#%d s%d", conn, exchange)
	}
	if n == 0 || f.watchesOn[conn] <= 1 {
		return fmt.Sprintf("#%d", conn)
	}
	return fmt.Sprintf("#%d watch %d", conn, n)
}

// Tally returns the counts.
func (f *filter) Tally() *Tally { return &f.tally }

// countsLine formats event counts as "4 events: 1 ADDED, 2 MODIFIED, 1 DELETED"
// in the canonical type order.
func countsLine(m map[string]int) string {
	total := 0
	for _, n := range m {
		total += n
	}
	s := phrase.Count(total, "event", "events")
	if total == 0 {
		return s
	}
	var parts []string
	for _, t := range eventTypes(m) {
		parts = append(parts, fmt.Sprintf("%d %s", m[t], Escape(t))) // a type is what the server sent
	}
	return s + ": " + strings.Join(parts, ", ")
}

var typeOrder = map[string]int{"ADDED": 0, "MODIFIED": 1, "DELETED": 2, "BOOKMARK": 3, "ERROR": 4}

func eventTypes(m map[string]int) []string {
	var ts []string
	for t, n := range m {
		if n > 0 {
			ts = append(ts, t)
		}
	}
	sort.Slice(ts, func(i, j int) bool {
		oi, iok := typeOrder[ts[i]]
		oj, jok := typeOrder[ts[j]]
		if iok != jok {
			return iok
		}
		if oi != oj {
			return oi < oj
		}
		return ts[i] < ts[j]
	})
	return ts
}

// flushBytes is how much output a printer holds before writing it: whole
// lines only, so that a reader of a pipe never sees half a line.
const flushBytes = 64 << 10

// errWriter holds output until Flush (or flushBytes of it) and remembers
// the first write error. Holding it turns one write system call per line
// into one per batch: a tenth of the time of kwatch pcap -o json went to
// writes of single lines.
type errWriter struct {
	w   io.Writer
	buf []byte
	err error
}

// Write holds p (a whole line, or several). Lines of flushBytes or more
// are written as they come, after what is held, not copied.
func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if len(p) >= flushBytes {
		if e.Flush() == nil {
			_, e.err = e.w.Write(p)
		}
		if e.err != nil {
			return 0, e.err
		}
		return len(p), nil
	}
	e.buf = append(e.buf, p...)
	if len(e.buf) >= flushBytes {
		e.Flush()
	}
	return len(p), nil
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err != nil {
		return
	}
	e.buf = fmt.Appendf(e.buf, format, args...)
	if len(e.buf) >= flushBytes && bytes.HasSuffix(e.buf, []byte("\n")) {
		e.Flush()
	}
}

// Flush writes what is held and returns the first write error.
func (e *errWriter) Flush() error {
	if e.err == nil && len(e.buf) > 0 {
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
	if cap(e.buf) > 4*flushBytes {
		e.buf = nil // one huge event does not keep its buffer
	}
	return e.err
}
