package attach

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/kwatch/kwatch/pkg/gotls"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/procnet"
)

// joiner reads, from the attached processes' memory, the TLS state of the
// connections that were open when kwatch attached (gotls's connections
// probe and ReadConnState), and keeps it in the key store by endpoints
// (keylog.Log.AddJoined): a connection whose handshake came before kwatch
// attached decrypts from its next records on (pkg/tlsconn's join).
//
// The connections probe (uprobes on crypto/tls's (*Conn).Read and Write)
// costs the process a trap into the kernel at every call, so it is placed
// only for a process that had TCP connections open when kwatch attached,
// and removed as soon as each of them is settled: its state read, closed,
// or found not to be a crypto/tls connection of the process (it carried
// bytes for notTLSAfter and the probe never named it). A connection that
// stays idle keeps the probe until it is used or closed. Connections made
// after attach need none of this: their handshakes give the secrets
// (Probe.Attach's uprobe on writeKeyLog).
type joiner struct {
	a *attacher
	// mu guards what follows.
	mu      sync.Mutex
	layouts map[int]*layoutOf // by PID
	said    map[string]bool
	// last holds, by connection, the state added last (its secrets and
	// when it was read): the same state is not added again, so that
	// connections waiting for keys are not woken for nothing.
	last map[[2]netip.AddrPort]joinedAt
	// joined counts the connections whose state was read; open the TCP
	// connections the attached processes had established at attach.
	joined, open int
	// before holds, by PID, the processes whose connections probe is in
	// place, with their connections still to settle.
	before map[int]*unsettled
	// carried holds when each connection open at attach first carried
	// bytes since (attacher.owner), for the notTLSAfter rule.
	carried map[tuple]time.Time
}

// unsettled is one process's connections open at attach that are not
// settled yet, by tuple, with their socket inodes.
type unsettled struct {
	name  string
	conns map[tuple]uint64
	all   int // how many it had at attach
}

// notTLSAfter is how long a connection open at attach may carry bytes
// without the connections probe naming it before it is taken for one that
// is not the process's crypto/tls connection (a plain HTTP or gRPC one, a
// TLS library of its own): a crypto/tls connection in use is reported at
// its first Read or Write after attach, and again every
// gotls.ConnReportInterval.
const notTLSAfter = 3 * gotls.ConnReportInterval

// settleEvery is how often the joiner looks whether the connections it
// waits for were closed, or carried bytes long enough (notTLSAfter).
const settleEvery = time.Second

// newJoiner returns the joiner of a's processes.
func newJoiner(a *attacher) *joiner {
	return &joiner{a: a, layouts: map[int]*layoutOf{}, said: map[string]bool{}, last: map[[2]netip.AddrPort]joinedAt{},
		before: map[int]*unsettled{}, carried: map[tuple]time.Time{}}
}

// count returns how many connections' state was read.
func (j *joiner) count() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.joined
}

// openAtAttach returns how many TCP connections the attached processes had
// established when kwatch attached to each (the count each one's start
// line says).
func (j *joiner) openAtAttach() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.open
}

type layoutOf struct {
	l   *gotls.Layout
	err error
}

type joinedAt struct {
	client, server string // the traffic secrets, as text
	at             time.Time
}

// maxJoinedConns bounds joiner.last; past it the memory is emptied.
const maxJoinedConns = 1 << 14

// watch looks at the TCP connections process p has open now, as kwatch
// attaches to it (after the uprobe on writeKeyLog is in place, so that
// any connection made later gives its secrets): when there are some and
// the layout of p's crypto/tls is known, it places the connections probe
// for p, to read each connection's state at its next use. It returns the
// line that says what it did, or why those connections stay encrypted;
// "" when p has none.
func (j *joiner) watch(p procnet.Process) string {
	name := fmt.Sprintf("%s (pid %d)", p.Name(), p.PID)
	socks, err := procnet.Sockets(p.PID)
	if err != nil {
		return fmt.Sprintf("the connections %s has open cannot be read: %v", name, err)
	}
	u := &unsettled{name: name, conns: map[tuple]uint64{}}
	for _, s := range socks {
		if s.State == procnet.StateEstablished {
			u.conns[newTuple(s.Local, s.Remote)] = s.Inode
		}
	}
	if len(u.conns) == 0 {
		return ""
	}
	u.all = len(u.conns)
	j.mu.Lock()
	j.open += u.all
	j.mu.Unlock()
	conns := phrase.Count(u.all, "TCP connection", "TCP connections")
	if _, err := j.layout(p.PID); err != nil {
		return fmt.Sprintf("%s has %s open at attach: TLS ones stay encrypted: %v", name, conns, err)
	}
	if _, err := j.a.probe.AttachConns(p.ExePath(), p.PID); err != nil {
		return fmt.Sprintf("%s has %s open at attach: TLS ones stay encrypted: %v", name, conns, err)
	}
	j.mu.Lock()
	j.before[p.PID] = u
	j.mu.Unlock()
	return fmt.Sprintf("%s has %s open at attach: the TLS state of each is read from its memory at its next use (probes on crypto/tls's (*Conn).Read and Write until each is settled)", name, conns)
}

// carriedBytes notes that connection t carried its first bytes since
// attach (the capture's reader names its owner then).
func (j *joiner) carriedBytes(t tuple) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, u := range j.before {
		if _, ok := u.conns[t]; ok {
			if _, seen := j.carried[t]; !seen {
				j.carried[t] = time.Now()
			}
			return
		}
	}
}

// settled takes connection t of process pid off what the probe waits for,
// and removes the probe when the process has none left. j.mu is held.
func (j *joiner) settled(pid int, t tuple) {
	u := j.before[pid]
	if u == nil {
		return
	}
	if _, ok := u.conns[t]; !ok {
		return
	}
	delete(u.conns, t)
	delete(j.carried, t)
	if len(u.conns) == 0 {
		verb := "are"
		if u.all == 1 {
			verb = "is"
		}
		j.detach(pid, fmt.Sprintf("%s: the %s open before attach %s settled: the probes on crypto/tls's (*Conn).Read and Write are removed",
			u.name, phrase.Count(u.all, "connection", "connections"), verb))
	}
}

// detach removes process pid's connections probe, saying why. j.mu is
// held.
func (j *joiner) detach(pid int, why string) {
	delete(j.before, pid)
	if _, err := j.a.probe.DetachConns(pid); err != nil {
		why += fmt.Sprintf(" (%v)", err)
	}
	j.sayLocked(why)
}

// settle looks at the connections the probe still waits for: those whose
// socket the process closed, and those that carried bytes for notTLSAfter
// without the probe naming them, are settled; a process that exited has
// its probe removed.
func (j *joiner) settle() {
	j.mu.Lock()
	pids := make([]int, 0, len(j.before))
	for pid := range j.before {
		pids = append(pids, pid)
	}
	j.mu.Unlock()
	for _, pid := range pids {
		inodes, err := procnet.SocketInodes(pid) // its fds only: cheap
		j.mu.Lock()
		u := j.before[pid]
		switch {
		case u == nil:
		case err != nil && !procnet.Alive(pid):
			j.detach(pid, u.name+" exited: the probes on crypto/tls's (*Conn).Read and Write are removed")
		case err == nil:
			for t, ino := range u.conns {
				at, carried := j.carried[t]
				if !inodes[ino] || carried && time.Since(at) >= notTLSAfter {
					j.settled(pid, t)
				}
			}
		}
		j.mu.Unlock()
	}
}

// layout returns the struct layout of process pid's executable, read once.
func (j *joiner) layout(pid int) (*gotls.Layout, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if lo, ok := j.layouts[pid]; ok {
		return lo.l, lo.err
	}
	l, err := gotls.LayoutFor(procnet.Process{PID: pid}.ExePath())
	if len(j.layouts) > 4096 {
		clear(j.layouts)
	}
	j.layouts[pid] = &layoutOf{l, err}
	return l, err
}

// say tells a line once.
func (j *joiner) say(line string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.sayLocked(line)
}

// sayLocked is say with j.mu held.
func (j *joiner) sayLocked(line string) {
	if !j.said[line] {
		j.said[line] = true
		j.a.opt.Notice(line)
	}
}

// run reads the connections the processes use until the probe is closed,
// and settles the connections waited for every settleEvery. It returns at
// once when no process needed the connections probe.
func (j *joiner) run() {
	for {
		j.a.probe.SetConnDeadline(time.Now().Add(settleEvery))
		u, err := j.a.probe.ReadConn()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			j.settle()
		case err != nil:
			return
		default:
			j.use(u)
		}
	}
}

// use reads the state of the connection the process used, and keeps it.
func (j *joiner) use(u gotls.ConnUse) {
	pid := int(u.PID)
	l, err := j.layout(pid)
	if err != nil {
		j.say(fmt.Sprintf("the connections of pid %d open before attach cannot be decrypted: %v", pid, err))
		return
	}
	st, err := gotls.ReadConnState(pid, u.Conn, l)
	switch {
	case errors.Is(err, gotls.ErrHandshakeIncomplete):
		return // a new connection: its handshake gives the secrets
	case errors.Is(err, gotls.ErrNotTCP):
		return // closed meanwhile, or over a Unix socket: nothing to capture
	case err != nil:
		j.say(fmt.Sprintf("a TLS connection of pid %d cannot be read: %v", pid, err))
		return
	}
	client, server := st.Remote, st.Local
	if st.IsClient {
		client, server = st.Local, st.Remote
	}
	j.mu.Lock()
	j.settled(pid, newTuple(client, server))
	j.mu.Unlock()
	// Read once: the probe need not report it again (a KeyUpdate,
	// which would change its secrets, is rare, and kwatch's TLS follower
	// then says the records it cannot open).
	_ = j.a.probe.ConnKnown(u.PID, u.Conn)
	key := [2]netip.AddrPort{client, server}
	c, s := st.Client(), st.Server()
	now := joinedAt{client: string(c.Secret) + string(st.MasterSecret), server: string(s.Secret), at: time.Now()}
	j.mu.Lock()
	prev, seen := j.last[key]
	if seen && prev.client == now.client && prev.server == now.server {
		j.mu.Unlock()
		return // known already; a KeyUpdate would change the secrets
	}
	if len(j.last) >= maxJoinedConns {
		clear(j.last)
	}
	j.last[key] = now
	j.joined++
	j.mu.Unlock()
	j.a.mu.Lock()
	name := j.a.names[u.PID]
	j.a.mu.Unlock()
	if name == "" {
		name = fmt.Sprintf("pid %d", pid)
	}
	state := keylog.Joined{Client: client, Server: server, Version: st.Version, Suite: st.CipherSuite,
		ClientTraffic: c.Secret, ServerTraffic: s.Secret, ClientSeq: c.Seq, ServerSeq: s.Seq,
		Master: st.MasterSecret, ClientRandom: st.ClientRandom, ServerRandom: st.ServerRandom,
		Source: "the memory of " + name}
	// The recording gets its line (keylog.Joined.Line) when the
	// capture's TLS follower first looks it up (attacher.admitted).
	j.a.keys.AddJoined(state)
}
