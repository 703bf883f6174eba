package filter

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kwatch/kwatch/pkg/merge"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/record"
)

// Stage is a record.Sink that passes on the records of what the filters
// keep and drops those of what they leave out: every record of a left-out
// exchange (its request, response, events, end, the problems about it, and
// the notes about its HTTP/2 stream), counted in the run's summary
// (record.Summary.LeftOut), which it fills on the way. It goes first in a
// run's sinks, so that rewatch, health, diff and the report see only what
// is shown.
//
// An exchange is judged by its request (Options.Judge); what the request
// does not tell is judged by what else was seen:
//   - a User-Agent not seen (no request, or an HPACK entry from before the
//     join) by the User-Agents the connection's other requests showed,
//     when they all agree; else by the name of its client process, where
//     kwatch attach knows it (a "process" note): client-go's default
//     User-Agent begins with the program's executable name
//     (rest.DefaultKubernetesUserAgent), so a --user-agent the process's
//     name holds keeps it;
//   - a resource not seen (no request, or its :path an HPACK entry from
//     before the join) by its first event's object (its apiVersion and
//     kind), the exchange's records held until then;
//   - a namespace not seen is not known: a watch whose first event is in
//     namespace NS may be a watch of all namespaces.
//
// What is still not known is left out, and counted apart
// (record.LeftOut.NotKnown).
type Stage struct {
	next  record.Sink
	opt   Options
	conns map[int]*conn
	left  record.LeftOut
	// kept counts the watches kept; byAgent, byResource and byNamespace
	// tally the watches left out, for Unmatched.
	kept                             int
	byAgent, byResource, byNamespace map[string]int
	// versions counts the object versions of the events kept: a run on
	// nodes counts them in its summary (record.Summary.Versions), of
	// what is shown.
	versions merge.Versions
	nversion int
}

// conn is what a Stage knows of one connection.
type conn struct {
	// process is its client process's name (kwatch attach's "process"
	// note), "" when not known.
	process string
	// agents are the distinct User-Agents its requests showed, at most
	// maxAgents.
	agents []string
	ex     map[int]*exchange
	// shown: a record of an exchange kept passed; until then the
	// problems about the connection as a whole are held (problems, at
	// most maxHeld), to be dropped with it when nothing of it is kept.
	shown    bool
	problems []record.Record
}

// maxAgents bounds conn.agents.
const maxAgents = 4

// exchange is what a Stage decided of one exchange, until its end.
type exchange struct {
	verdict verdict
	// watch: the request or the response said it is a watch.
	watch bool
	// notKnown: left out because what a filter asks was not seen.
	notKnown bool
	// held are its records while the verdict is pending.
	held []record.Record
	// agent, resource and namespace name it for Unmatched.
	agent, resource, namespace string
}

// verdict is an exchange's state in a Stage.
type verdict uint8

const (
	keep verdict = iota
	leave
	// pending: its resource was not seen; its first event will say.
	pending
)

// maxHeld bounds the records held for a pending exchange: past it, it is
// left out as not known.
const maxHeld = 64

// New returns a Stage that passes what opt keeps on to next.
func New(next record.Sink, opt Options) *Stage {
	return &Stage{next: next, opt: opt, conns: map[int]*conn{},
		byAgent: map[string]int{}, byResource: map[string]int{}, byNamespace: map[string]int{}}
}

// Flush flushes the next sink (record.Flusher).
func (s *Stage) Flush() { record.Flush(s.next) }

// LeftOut returns what was left out so far.
func (s *Stage) LeftOut() record.LeftOut { return s.left }

// Emit passes r on, or drops it when it belongs to what is left out.
func (s *Stage) Emit(r record.Record) {
	switch v := r.(type) {
	case *record.ConnNote:
		c := s.conn(v.Conn)
		if v.Kind == "process" && c != nil {
			// Its first client process, as pkg/who and the source's
			// --client NAME take it.
			for _, p := range v.Processes {
				if p.Role == "client" {
					c.process = p.Name
					break
				}
			}
		}
		if v.Stream != 0 && c != nil && s.hold(c.ex[int(v.Stream)], r) {
			return
		}
		s.pass(r)
		if v.Kind == "closed" || v.Kind == "capture-ended" {
			s.endConn(v.Conn.Key())
		}
		return
	case *record.Request:
		c := s.conn(v.Conn)
		if c == nil {
			break
		}
		c.sawAgent(v)
		x := s.judge(c, v)
		c.ex[v.Exchange] = x
		if s.hold(x, r) {
			return
		}
		s.show(c)
	case *record.Response:
		c := s.conn(v.Conn)
		if c == nil {
			break
		}
		x := c.ex[v.Exchange]
		if x == nil {
			// Its request was not seen.
			x = s.judge(c, nil)
			c.ex[v.Exchange] = x
		}
		x.watch = x.watch || v.Watch
		if s.hold(x, r) {
			return
		}
		s.show(c)
	case *record.Event:
		c := s.conn(v.Conn)
		if c == nil {
			break
		}
		x := c.ex[v.Exchange]
		if x != nil && x.verdict == pending {
			s.decide(c, x, v)
		}
		if s.hold(x, r) {
			return
		}
		s.show(c)
	case *record.End:
		c := s.conn(v.Conn)
		if c == nil {
			break
		}
		x := c.ex[v.Exchange]
		if x != nil && x.verdict == pending && !v.Request {
			s.drop(x, true) // no event came to name its resource
		}
		if s.hold(x, r) {
			return
		}
		s.show(c)
		if !v.Request {
			s.end(c, v.Exchange)
		}
	case *record.Problem:
		if v.Conn == nil {
			break
		}
		c := s.conn(v.Conn)
		if v.Exchange == 0 && v.Kind == record.KindNoTLSKey {
			// A connection not decrypted: what the filters would ask
			// of it cannot be read. The printer counts it among the
			// connections not decrypted (and lists it under
			// --show-undecrypted), as it does without filters; it is
			// no problem about what they left out.
			break
		}
		if v.Exchange == 0 {
			// About the connection as a whole: said when something of
			// it is kept.
			if !c.shown {
				if len(c.problems) < maxHeld {
					c.problems = append(c.problems, r)
				} else {
					s.left.Problems++
				}
				return
			}
			break
		}
		if s.hold(c.ex[v.Exchange], r) {
			return
		}
		s.show(c)
	case *record.Summary:
		for id := range s.conns {
			s.endConn(id)
		}
		if v.Nodes > 0 {
			// The merge counted every node's; these are those shown.
			v.Versions = s.nversion
		}
		if v.LeftOut == nil {
			v.LeftOut = &record.LeftOut{}
		}
		l := v.LeftOut
		l.Watches += s.left.Watches
		l.NotKnown += s.left.NotKnown
		l.Exchanges += s.left.Exchanges
		l.Problems += s.left.Problems
	}
	s.pass(r)
}

// pass hands r on, counting the object version of an event.
func (s *Stage) pass(r record.Record) {
	if e, ok := r.(*record.Event); ok {
		if _, first := s.versions.Add(e); first {
			s.nversion++
		}
	}
	s.next.Emit(r)
}

// conn returns the state of connection c (nil for none), made at its first
// record.
func (s *Stage) conn(c *record.Conn) *conn {
	if c == nil {
		return nil
	}
	st := s.conns[c.ID]
	if st == nil {
		st = &conn{ex: map[int]*exchange{}}
		s.conns[c.ID] = st
	}
	return st
}

// sawAgent remembers the User-Agent req showed.
func (c *conn) sawAgent(req *record.Request) {
	ua, ok := agentOf(req)
	if !ok || ua == "" || len(c.agents) >= maxAgents {
		return
	}
	for _, a := range c.agents {
		if a == ua {
			return
		}
	}
	c.agents = append(c.agents, ua)
}

// judge decides the exchange req opens on c (req nil: its request was not
// seen), from its own fields and, for what they do not tell, from what c
// showed (see Stage).
func (s *Stage) judge(c *conn, req *record.Request) *exchange {
	x := &exchange{watch: req != nil && req.Watch}
	if ua, ok := agentOf(req); ok {
		x.agent = program(ua)
	}
	if req != nil && req.Target != "" {
		if info := requestInfo(req); info != nil && info.IsResourceRequest {
			x.resource = info.Resource
			if info.APIGroup != "" {
				x.resource += "." + info.APIGroup
			}
			x.namespace = info.Namespace
		}
	}
	agent := s.opt.judgeAgent(req)
	if agent == NotKnown {
		agent = s.agentOfConn(c)
	}
	path := s.opt.judgePath(req)
	switch {
	case agent == Leave || path == Leave:
		x.verdict = leave
	case agent == NotKnown || path == NotKnown && s.opt.Namespace != "":
		x.verdict, x.notKnown = leave, true
	case path == NotKnown:
		x.verdict = pending
	default:
		x.verdict = keep
	}
	return x
}

// agentOfConn judges a User-Agent that was not seen by the User-Agents of
// c's other requests, when they all match or none does; else by c's client
// process's name, when it holds --user-agent (client-go's default
// User-Agent begins with it).
func (s *Stage) agentOfConn(c *conn) Verdict {
	if len(c.agents) > 0 {
		match := 0
		for _, a := range c.agents {
			if containsFold(a, s.opt.UserAgent) {
				match++
			}
		}
		switch match {
		case len(c.agents):
			return Keep
		case 0:
			return Leave
		}
	}
	if c.process != "" && containsFold(c.process, s.opt.UserAgent) {
		return Keep
	}
	return NotKnown
}

// decide ends x's pending verdict (an exchange of c) at its first event ev, by the resource
// its object names; an event that names none (an ERROR's Status, a value
// that is no object, a Table's row) leaves x out as not known.
func (s *Stage) decide(c *conn, x *exchange, ev *record.Event) {
	switch {
	case ev.Kind == "" || ev.Type == "ERROR" || ev.NotObject != "" || ev.RowKind != "":
		s.drop(x, true)
	case s.opt.Resource.matchesKind(ev.APIVersion, ev.Kind):
		x.verdict = keep
		s.show(c)
		held := x.held
		x.held = nil
		for _, r := range held {
			s.pass(r)
		}
	default:
		x.resource = resourceOfKind(ev.APIVersion, ev.Kind)
		s.drop(x, false)
	}
}

// drop leaves x out (notKnown: as not known), dropping what it held.
func (s *Stage) drop(x *exchange, notKnown bool) {
	for _, r := range x.held {
		s.dropped(r)
	}
	x.held = nil
	x.verdict, x.notKnown = leave, notKnown
}

// hold keeps r back for x, or drops it, when x is not kept; it reports
// whether it did. r passes when x is nil (nothing is known of its
// exchange).
func (s *Stage) hold(x *exchange, r record.Record) bool {
	if x == nil {
		return false
	}
	switch x.verdict {
	case leave:
		s.dropped(r)
		return true
	case pending:
		if len(x.held) >= maxHeld {
			s.drop(x, true)
			s.dropped(r)
			return true
		}
		x.held = append(x.held, r)
		return true
	}
	return false
}

// dropped counts r, a record left out, when it is a problem.
func (s *Stage) dropped(r record.Record) {
	if _, ok := r.(*record.Problem); ok {
		s.left.Problems++
	}
}

// end counts exchange n of c, which ended, and forgets it.
func (s *Stage) end(c *conn, n int) {
	x := c.ex[n]
	if x == nil {
		return
	}
	delete(c.ex, n)
	if x.verdict == pending {
		s.drop(x, true)
	}
	if x.verdict == keep {
		if x.watch {
			s.kept++
		}
		return
	}
	if !x.watch {
		s.left.Exchanges++
		return
	}
	s.left.Watches++
	if x.notKnown {
		s.left.NotKnown++
	}
	tally(s.byAgent, x.agent, "(not seen)")
	tally(s.byResource, x.resource, "(not seen)")
	ns := x.namespace
	if ns == "" && x.resource != "" && !x.notKnown {
		ns = "(none: all namespaces, or cluster-scoped)"
	}
	tally(s.byNamespace, ns, "(not seen)")
}

// show passes on the problems held about connection c as a whole, once
// something of it is kept.
func (s *Stage) show(c *conn) {
	if c.shown {
		return
	}
	c.shown = true
	held := c.problems
	c.problems = nil
	for _, r := range held {
		s.pass(r)
	}
}

// endConn counts the exchanges of connection id still open, and the
// problems about it held when nothing of it was kept, and forgets it.
func (s *Stage) endConn(id int) {
	c := s.conns[id]
	if c == nil {
		return
	}
	s.left.Problems += len(c.problems)
	for n := range c.ex {
		s.end(c, n)
	}
	delete(s.conns, id)
}

// maxTally bounds the keys of each tally.
const maxTally = 32

// tally counts k (unknown when empty) in m, up to maxTally keys.
func tally(m map[string]int, k, unknown string) {
	if k == "" {
		k = unknown
	}
	if _, ok := m[k]; ok || len(m) < maxTally {
		m[k]++
	}
}

// program is the product of a User-Agent (RFC 9110 §10.1.5), its first
// word: "kube-controller-manager/v1.37.2".
func program(ua string) string {
	p, _, _ := strings.Cut(ua, " ")
	return p
}

// Unmatched says, when the filters kept no watch and left some out, what
// they left out, e.g. "no watch matches --user-agent kubectl: 14 watches
// left out; their User-Agents: kube-scheduler/v1.37.2 (8), …"; "" when
// they kept one, or left none out.
func (s *Stage) Unmatched() string {
	if s.kept > 0 || s.left.Watches == 0 {
		return ""
	}
	msg := fmt.Sprintf("no watch matches %s: %s left out", s.opt, phrase.Count(s.left.Watches, "watch", "watches"))
	if s.left.NotKnown > 0 {
		msg += fmt.Sprintf(" (%d of them because what the filters ask was not seen)", s.left.NotKnown)
	}
	if s.opt.UserAgent != "" {
		msg += "; their User-Agents: " + byCount(s.byAgent)
	}
	if s.opt.Resource.Name != "" {
		msg += "; their resources: " + byCount(s.byResource)
	}
	if s.opt.Namespace != "" {
		msg += "; their namespaces: " + byCount(s.byNamespace)
	}
	return msg
}

// byCount lists m's keys by their counts, most first, then by name:
// "configmaps (3), leases.coordination.k8s.io (2)".
func byCount(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s (%d)", k, m[k])
	}
	return strings.Join(parts, ", ")
}
