// Package merge makes one stream of records out of several, such as the
// streams of kwatch on several nodes: in time order within a bounded
// window, as Hubble's relay merges its nodes' flows (a bounded queue and a
// drain time, hubble-relay's sorting of observer responses); each
// connection numbered in the order it is shown; one TCP connection seen
// from two sources at once (its client's node and its server's, or two
// sources on one machine) shown once; and the object versions that the
// events delivered counted once each, however many watches they were
// delivered to (several API servers, several clients).
//
// A Merger is not safe for concurrent use: one goroutine pushes records
// and hands them on (the sink is called on it).
package merge

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/kwatch/kwatch/pkg/record"
)

// DefaultWindow is how long a record waits, by default, for records of the
// other sources that are earlier than it: Hubble relay's drain time (1 s).
const DefaultWindow = time.Second

// DefaultMaxHeld bounds the records held, by default.
const DefaultMaxHeld = 4096

// maxVersions bounds the object versions remembered to count each once:
// deliveries of one version to several watches come within seconds of
// each other, long before 64 Ki other versions.
const maxVersions = 1 << 16

// Options tune a Merger.
type Options struct {
	// Window is how long a record waits for earlier records of sources
	// that have sent nothing since (a node whose stream is slower);
	// DefaultWindow when 0. A record that comes later than that after
	// records later than it were handed on is handed on at once, out of
	// order (Stats.Late counts them).
	Window time.Duration
	// MaxHeld bounds the records held; past it the earliest is handed on
	// at once. DefaultMaxHeld when 0.
	MaxHeld int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Stats count what a Merger did.
type Stats struct {
	// Records counts the records handed on, and Late those handed on after
	// a record of another source that was later than them.
	Records, Late int
	// Connections counts the connections shown, Duplicates those seen
	// again from another source while shown (left out).
	Connections, Duplicates int
	// Events counts the watch events handed on that named an object
	// version (an object's resourceVersion: ADDED, MODIFIED, DELETED), and
	// Versions the object versions among them, each once.
	Events, Versions int
}

// Merger merges the records of its sources into one sink.
type Merger struct {
	sink    record.Sink
	opt     Options
	sources []*source
	held    int
	// last is the time of the last record handed on.
	last time.Time
	// nextID numbers the connections shown.
	nextID int
	// open holds the connections shown by their endpoints, until their
	// last note; dup the connections left out as seen again.
	open map[[2]netip.AddrPort]*record.Conn
	dup  map[*record.Conn]bool
	// versions counts the object versions the events delivered.
	versions Versions
	stats    Stats
}

// source is one stream's records waiting, in the order they came.
type source struct {
	name  string
	queue []item
	// key is the last record's key: keys never go back within a source
	// (a record of a stream is never handed on before one that came before
	// it in that stream).
	key  time.Time
	done bool
}

// item is a record held, with its key (its time, or the time of the one
// before it in its stream when earlier) and when it came.
type item struct {
	rec     record.Record
	key     time.Time
	arrived time.Time
}

// version is an object version: what a watch event delivered.
type version struct {
	apiVersion, kind, namespace, name, resourceVersion string
}

// New returns a Merger handing records on to sink.
func New(sink record.Sink, opt Options) *Merger {
	if opt.Window <= 0 {
		opt.Window = DefaultWindow
	}
	if opt.MaxHeld <= 0 {
		opt.MaxHeld = DefaultMaxHeld
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Merger{sink: sink, opt: opt, open: map[[2]netip.AddrPort]*record.Conn{}, dup: map[*record.Conn]bool{}}
}

// Add adds a source named name (a node) and returns its number, for Push
// and Done. Its connections must come unnumbered (record.Conn.ID 0): the
// Merger numbers them.
func (m *Merger) Add(name string) int {
	m.sources = append(m.sources, &source{name: name})
	return len(m.sources) - 1
}

// Push takes a record of source src, and hands on what may go.
func (m *Merger) Push(src int, r record.Record) {
	s := m.sources[src]
	now := m.opt.Now()
	key := r.When()
	if key.Before(s.key) || key.IsZero() {
		key = s.key
	}
	s.key = key
	s.queue = append(s.queue, item{rec: r, key: key, arrived: now})
	m.held++
	m.release(now)
}

// Done says that source src sends no more records; what it sent is handed
// on in order with the others'.
func (m *Merger) Done(src int) {
	m.sources[src].done = true
	m.release(m.opt.Now())
}

// Tick hands on what waited long enough, and returns how long until the
// next record held will have (0: none is held).
func (m *Merger) Tick() time.Duration {
	now := m.opt.Now()
	m.release(now)
	var next time.Duration
	for _, s := range m.sources {
		if len(s.queue) > 0 {
			if d := s.queue[0].arrived.Add(m.opt.Window).Sub(now); next == 0 || d < next {
				next = max(d, time.Millisecond)
			}
		}
	}
	return next
}

// Flush hands on every record held, in order (the end of a run).
func (m *Merger) Flush() {
	for m.held > 0 {
		m.pop()
	}
}

// Stats returns what the Merger did so far.
func (m *Merger) Stats() Stats { return m.stats }

// release hands on records while the earliest held may go: every source
// still sending has one held (no earlier record can come, keys being
// monotonic per source), or a record has waited the window, or too many
// are held.
func (m *Merger) release(now time.Time) {
	for m.held > 0 {
		all, waited := true, false
		for _, s := range m.sources {
			if len(s.queue) == 0 {
				if !s.done {
					all = false
				}
				continue
			}
			if !now.Before(s.queue[0].arrived.Add(m.opt.Window)) {
				waited = true
			}
		}
		if !all && !waited && m.held <= m.opt.MaxHeld {
			return
		}
		m.pop()
	}
}

// pop hands on the earliest record held (of the source listed first, for
// equal keys).
func (m *Merger) pop() {
	var min *source
	for _, s := range m.sources {
		if len(s.queue) > 0 && (min == nil || s.queue[0].key.Before(min.queue[0].key)) {
			min = s
		}
	}
	it := min.queue[0]
	min.queue[0] = item{}
	min.queue = min.queue[1:]
	if len(min.queue) == 0 {
		min.queue = nil // let the backing array go
	}
	m.held--
	if it.key.Before(m.last) {
		m.stats.Late++
	} else {
		m.last = it.key
	}
	m.hand(it.rec, min)
}

// hand numbers the connections of r, leaves out a record of a connection
// shown from another source, counts object versions, and hands r on.
func (m *Merger) hand(r record.Record, s *source) {
	c := record.ConnOf(r)
	if c != nil {
		if m.dup[c] {
			if ended(r) {
				delete(m.dup, c)
			}
			return
		}
		if c.ID == 0 {
			k := [2]netip.AddrPort{c.Client, c.Server}
			if shown := m.open[k]; shown != nil && shown.Node != c.Node {
				// The same TCP connection, seen from two sources at once.
				m.dup[c] = true
				m.stats.Duplicates++
				m.sink.Emit(&record.ConnNote{Conn: shown, Time: r.When(), Kind: "node",
					Message: fmt.Sprintf("also seen from node %s (the same TCP connection): shown once, as node %s saw it", c.Node, shown.Node)})
				if ended(r) {
					delete(m.dup, c)
				}
				return
			}
			m.number(c)
			m.open[k] = c
			m.stats.Connections++
		}
		if ended(r) {
			if k := [2]netip.AddrPort{c.Client, c.Server}; m.open[k] == c {
				delete(m.open, k)
			}
		}
	}
	// Other connections a record names: a watch followed, a finding's.
	switch v := r.(type) {
	case *record.Restart:
		m.number(v.Prev)
	case *record.Health:
		for i := range v.Findings {
			m.number(v.Findings[i].Conn)
		}
		if v.Began != nil {
			m.number(v.Began.Conn)
			m.number(v.Began.Prev)
		}
	case *record.Event:
		if counted, first := m.versions.Add(v); counted {
			m.stats.Events++
			if first {
				m.stats.Versions++
			}
		}
	}
	m.stats.Records++
	m.sink.Emit(r)
}

// number gives c the next number when it has none.
func (m *Merger) number(c *record.Conn) {
	if c != nil && c.ID == 0 {
		m.nextID++
		c.ID = m.nextID
	}
}

// ended reports whether r is a connection's last record.
func ended(r record.Record) bool {
	n, ok := r.(*record.ConnNote)
	return ok && (n.Kind == "closed" || n.Kind == "capture-ended")
}

// Versions counts the object versions that watch events delivered (an
// object's kind, namespace, name and resourceVersion: ADDED, MODIFIED,
// DELETED), each once however many watches, or API servers, delivered it;
// it remembers the last 64 Ki versions (maxVersions). The zero value is
// ready to use.
type Versions struct {
	seen map[version]struct{}
	// ring holds the versions in the order they came, to forget the
	// oldest.
	ring []version
}

// Add counts the version e delivered: counted is false for an event that
// names no object version (a BOOKMARK, an ERROR, no resourceVersion), and
// first says that the version was not counted before.
func (vs *Versions) Add(e *record.Event) (counted, first bool) {
	if e.ResourceVersion == "" || e.Type == "BOOKMARK" || e.Type == "ERROR" || e.Name == "" {
		return false, false
	}
	v := version{e.APIVersion, e.Kind, e.Namespace, e.Name, e.ResourceVersion}
	if e.RowKind != "" {
		v.kind = "Table row " + e.RowKind
	}
	if _, ok := vs.seen[v]; ok {
		return true, false
	}
	if vs.seen == nil {
		vs.seen = map[version]struct{}{}
	}
	vs.seen[v] = struct{}{}
	vs.ring = append(vs.ring, v)
	if len(vs.ring) > maxVersions {
		delete(vs.seen, vs.ring[0])
		vs.ring[0] = version{}
		vs.ring = vs.ring[1:]
	}
	return true, true
}
