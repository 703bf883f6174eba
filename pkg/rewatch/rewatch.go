// Package rewatch links the watches of one client in a capture and says why
// each next one began, as kwatch stream says it of its own watches: it
// resumed from a resourceVersion, or it re-listed (a watch-list, a LIST
// then a watch, or a watch from no resourceVersion), after what the watch
// before ended with (410 Gone, a reset, a close, the server's or the
// client's end), and how long after. For a re-list it compares the objects
// sent with those the client's earlier watches delivered last, and says how
// many came again unchanged: an informer hands each of them to its update
// handler with the same resourceVersion as before.
//
// Watches are of one client when they watch the same path with the same
// selectors from the same client address and User-Agent, whether on one
// connection (HTTP/2 streams, HTTP/1.1 exchanges one after another) or on
// a new one; a watch follows the latest of them that had ended when it
// began (two open at once, an informer's and a plain Watch, are not linked
// to each other).
//
// A Linker is a record.Sink placed before health: it passes every record
// on, emits a record.Restart after the request of each watch that follows
// another, and a record.Relist when a re-list's initial events are over.
// It decides from typed fields only. What it keeps is bounded (watches,
// clients, objects); past a bound a client is no longer compared, and its
// re-lists say so (Relist.Partial).
package rewatch

import (
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
)

// Bounds of what a Linker keeps.
const (
	// MaxWatches bounds the watches followed at once.
	MaxWatches = 4096
	// MaxClients bounds the clients (client address, path, selectors,
	// User-Agent) whose watches are linked.
	MaxClients = 4096
	// MaxObjects bounds the objects whose last resourceVersion is kept,
	// for all clients together.
	MaxObjects = 1 << 18
	// maxEnded is how many ended watches of a client are kept as the
	// ones a next watch may follow.
	maxEnded = 8
)

type key struct{ conn, exchange int }

// clientKey names a client's watches of one resource.
type clientKey struct {
	addr                 netip.Addr
	path, labels, fields string
	userAgent            string
}

// object is what is kept of an object a client was sent.

// client is what is known of one client's watches of one resource.
type client struct {
	// ended are its latest watches that ended, newest last.
	ended []*watch
	// known is the last version of each object its watches delivered;
	// full is true once some watch delivered the whole state (its
	// initial events were seen from their start to their end), and
	// stays true as long as every event since was followed.
	known map[string]record.Version
	full  bool
	// lost: the object bound was reached; known no longer follows.
	lost bool
	// lastRV is the last resourceVersion delivered, bookmarks included.
	lastRV string
	// list is the time of its latest LIST (a GET of the path without
	// watch), zero when none.
	list time.Time
}

// watch is one watch exchange followed.
type watch struct {
	k      key
	conn   *record.Conn
	c      *client
	start  time.Time
	last   time.Time // its last record
	end    time.Time // its End (zero before)
	ended  bool
	clean  bool
	byCl   bool
	gone   bool // ERROR 410 in the stream, or the request answered 410
	status int
	rst    bool // the server reset its stream (RST_STREAM)
	// initial is true while its initial events (the state) come;
	// leading marks a watch from no resourceVersion without bookmarks,
	// whose initial events are its leading ADDED events; fresh collects
	// them when they are compared (relist) or learnt (learn).
	initial bool
	leading bool
	relist  *record.Relist
	learn   bool
	fresh   map[string]record.Version
	overrun bool
}

// Linker is the record.Sink that links watches. Create it with New.
type Linker struct {
	next    record.Sink
	watches map[key]*watch
	clients map[clientKey]*client
	// reset holds the connections reset (TCP RST), the latest
	// MaxWatches of them (resetOrder, oldest first).
	reset      map[int]bool
	resetOrder []int
	// recent indexes the clients' ended watches (client.ended) by key;
	// byConn lists the watches of each connection still open.
	recent  map[key]*watch
	byConn  map[int][]key
	objects int
}

// New returns a Linker that passes records on to next.
func New(next record.Sink) *Linker {
	return &Linker{next: next, watches: map[key]*watch{}, clients: map[clientKey]*client{}, reset: map[int]bool{},
		recent: map[key]*watch{}, byConn: map[int][]key{}}
}

// Flush flushes the next sink (record.Flusher).
func (l *Linker) Flush() { record.Flush(l.next) }

// Emit observes r, passes it on, and emits the records it gives rise to.
func (l *Linker) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.Request:
		l.next.Emit(r)
		l.request(v)
		return
	case *record.Response:
		if w := l.watches[key{v.Conn.Key(), v.Exchange}]; w != nil {
			w.status, w.last = v.StatusCode, v.Time
			if v.StatusCode == 410 {
				w.gone = true
			}
		}
	case *record.Event:
		l.event(v) // passes it on, with a re-list said around it
		return
	case *record.End:
		if v.Request {
			break
		}
		if w := l.watches[key{v.Conn.Key(), v.Exchange}]; w != nil {
			l.finishInitial(w, v.Time)
			w.ended, w.end, w.last, w.clean, w.byCl = true, v.Time, v.Time, v.Clean, v.ByClient
			l.retire(w)
		}
	case *record.ConnNote:
		switch {
		case v.Kind == "closed" || v.Kind == "capture-ended":
			if v.Reset {
				l.resetConn(v.Conn.Key())
			}
			// A watch its connection's end left without an End (a
			// request the reset left unanswered) ends with it.
			for _, k := range l.byConn[v.Conn.Key()] {
				if w := l.watches[k]; w != nil {
					l.finishInitial(w, v.Time)
					w.ended, w.end, w.last = true, v.Time, v.Time
					l.retire(w)
				}
			}
			delete(l.byConn, v.Conn.Key())
		case v.Kind == "h2" && v.Frame == "RST_STREAM":
			l.rstStream(v)
		}
	}
	l.next.Emit(r)
}

// resetConn notes that connection id was reset (TCP RST); the note comes
// after the End of its watches.
func (l *Linker) resetConn(id int) {
	if l.reset[id] {
		return
	}
	if len(l.resetOrder) == MaxWatches {
		delete(l.reset, l.resetOrder[0])
		l.resetOrder = l.resetOrder[1:]
	}
	l.reset[id] = true
	l.resetOrder = append(l.resetOrder, id)
}

// rstStream marks the watch of a RST_STREAM note's stream reset by the
// server: the client's own RST_STREAM ended its watch first (End.ByClient).
func (l *Linker) rstStream(n *record.ConnNote) {
	k := key{n.Conn.Key(), int(n.Stream)}
	w := l.watches[k]
	if w == nil {
		w = l.recent[k]
	}
	if w != nil && !w.byCl {
		w.rst = true
	}
}

// clientOf returns the client of a watch request (nil: not one kwatch can
// name, or past MaxClients).
func (l *Linker) clientOf(v *record.Request, path string, q url.Values) *client {
	if v.Conn == nil || path == "" {
		return nil
	}
	ck := clientKey{addr: v.Conn.Client.Addr(), path: path, labels: q.Get("labelSelector"), fields: q.Get("fieldSelector")}
	for name, vals := range v.Header {
		if strings.EqualFold(name, "User-Agent") && len(vals) > 0 {
			ck.userAgent = vals[0]
		}
	}
	c := l.clients[ck]
	if c == nil {
		if len(l.clients) >= MaxClients {
			return nil
		}
		c = &client{known: map[string]record.Version{}}
		l.clients[ck] = c
	}
	return c
}

// request follows a watch request, or notes a LIST.
func (l *Linker) request(v *record.Request) {
	path, query, _ := strings.Cut(v.Target, "?")
	q, _ := url.ParseQuery(query)
	if !v.Watch {
		if v.Method == "GET" {
			if c := l.clientOf(v, path, q); c != nil {
				c.list = v.Time
			}
		}
		return
	}
	c := l.clientOf(v, path, q)
	if c == nil || len(l.watches) >= MaxWatches {
		return
	}
	w := &watch{k: key{v.Conn.Key(), v.Exchange}, conn: v.Conn, c: c, start: v.Time, last: v.Time}
	w.initial = v.InitialState || v.StartsWithState
	w.leading = v.StartsWithState && !v.InitialState
	l.watches[w.k] = w
	l.byConn[w.k.conn] = append(l.byConn[w.k.conn], w.k)
	rv := q.Get("resourceVersion")
	if prev := c.latest(v.Time); prev != nil {
		rs := &record.Restart{Time: v.Time, Conn: v.Conn, Exchange: v.Exchange, Prev: prev.conn, PrevExchange: prev.k.exchange,
			Why: record.WhyResume, After: l.after(prev), Gap: v.Time.Sub(prev.last), ResourceVersion: rv,
			LastResourceVersion: c.lastRV, Resource: path}
		switch {
		case q.Get("sendInitialEvents") == "true":
			rs.Why, rs.Relist = record.WhyRelist, record.RelistWatchList
		case !c.list.IsZero() && !c.list.Before(prev.last):
			rs.Why, rs.Relist = record.WhyRelist, record.RelistList
		case w.initial:
			rs.Why, rs.Relist = record.WhyRelist, record.RelistState
		}
		if rs.Why == record.WhyRelist && rs.Relist != record.RelistList && w.initial {
			w.relist = &record.Relist{Conn: v.Conn, Exchange: v.Exchange, Partial: !c.full || c.lost}
		}
		if rs.Relist == record.RelistList {
			// The LIST's objects are not decoded: what the client
			// holds now is not known.
			c.full = false
		}
		c.ended = slices.DeleteFunc(c.ended, func(e *watch) bool { return e == prev })
		delete(l.recent, prev.k)
		l.next.Emit(rs)
	}
	if w.initial && w.relist == nil && !c.full {
		w.learn = true // a first state: what a later re-list compares with
	}
	if w.relist != nil || w.learn {
		w.fresh = map[string]record.Version{}
	}
}

// latest returns the client's watch that ended last before t, nil when
// none did.
func (c *client) latest(t time.Time) *watch {
	var best *watch
	for _, w := range c.ended {
		if !w.last.After(t) && (best == nil || !w.last.Before(best.last)) {
			best = w
		}
	}
	return best
}

// after says what ended w, from what was seen of it.
func (l *Linker) after(w *watch) record.After {
	switch {
	case w.gone:
		return record.AfterGone
	case w.status >= 300:
		return record.AfterRefused
	case w.byCl:
		return record.AfterClientEnded
	case w.clean:
		return record.AfterServerEnded
	case w.rst || l.reset[w.k.conn]:
		return record.AfterReset
	}
	return record.AfterClosed
}

// retire moves an ended watch to its client's ended ones.
func (l *Linker) retire(w *watch) {
	delete(l.watches, w.k)
	if ks := slices.DeleteFunc(l.byConn[w.k.conn], func(k key) bool { return k == w.k }); len(ks) > 0 {
		l.byConn[w.k.conn] = ks
	} else {
		delete(l.byConn, w.k.conn)
	}
	c := w.c
	if len(c.ended) == maxEnded {
		delete(l.recent, c.ended[0].k)
		c.ended = c.ended[1:]
	}
	c.ended = append(c.ended, w)
	l.recent[w.k] = w
	w.fresh = nil
}

func objectKey(e *record.Event) string {
	if e.Namespace == "" {
		return e.Name
	}
	return e.Namespace + "/" + e.Name
}

func (l *Linker) event(e *record.Event) {
	w := l.watches[key{e.Conn.Key(), e.Exchange}]
	if w == nil {
		l.next.Emit(e)
		return
	}
	w.last = e.Time
	c := w.c
	if e.Type == "ERROR" {
		if e.Status != nil && e.Status.Code == 410 {
			w.gone = true
		}
		l.next.Emit(e)
		return
	}
	if w.initial {
		initial := e.Initial || (w.leading && e.Type == "ADDED")
		if !initial {
			// The first event after the state ends it, unless it is
			// the bookmark that says so (passed on first).
			if !e.InitialEventsEnd {
				l.finishInitial(w, e.Time)
			}
		} else if e.Name != "" {
			if w.fresh != nil {
				if len(w.fresh) < MaxObjects {
					w.fresh[objectKey(e)] = record.Version{UID: e.UID, ResourceVersion: e.ResourceVersion}
				} else {
					w.overrun = true
				}
			}
			if w.relist != nil {
				w.relist.Sent++
			}
		}
	}
	if e.ResourceVersion != "" {
		c.lastRV = e.ResourceVersion
	}
	if !w.initial && e.Name != "" && !c.lost {
		l.learnEvent(c, e)
	}
	if e.InitialEventsEnd && w.initial {
		l.next.Emit(e)
		l.finishInitial(w, e.Time)
		return
	}
	l.next.Emit(e)
}

// learnEvent keeps the version of an event's object as the client's last.
func (l *Linker) learnEvent(c *client, e *record.Event) {
	k := objectKey(e)
	switch e.Type {
	case "ADDED", "MODIFIED":
		if _, ok := c.known[k]; !ok {
			if l.objects >= MaxObjects {
				l.forget(c)
				return
			}
			l.objects++
		}
		c.known[k] = record.Version{UID: e.UID, ResourceVersion: e.ResourceVersion}
	case "DELETED":
		if _, ok := c.known[k]; ok {
			delete(c.known, k)
			l.objects--
		}
	}
}

// forget stops following a client's objects (MaxObjects was reached).
func (l *Linker) forget(c *client) {
	l.objects -= len(c.known)
	c.known, c.lost, c.full = map[string]record.Version{}, true, false
}

// finishInitial ends w's initial events: a re-list is compared and said,
// and the state becomes what the client knows.
func (l *Linker) finishInitial(w *watch, t time.Time) {
	if !w.initial {
		return
	}
	w.initial = false
	c := w.c
	if w.relist != nil {
		rl := w.relist
		w.relist = nil
		rl.Time = t
		rl.Partial = rl.Partial || w.overrun || c.lost
		rl.CompareStates(c.known, w.fresh, rl.Partial)
		l.next.Emit(rl)
	}
	if w.fresh != nil && !w.overrun && !c.lost {
		l.objects -= len(c.known)
		if l.objects+len(w.fresh) <= MaxObjects {
			c.known, c.full = w.fresh, true
			l.objects += len(w.fresh)
		} else {
			l.forget(c)
		}
	}
	w.fresh, w.learn = nil, false
}
