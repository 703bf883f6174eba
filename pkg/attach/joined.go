package attach

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/kwatch/kwatch/pkg/gotls"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/procnet"
)

// joiner reads, from the attached processes' memory, the TLS state of the
// connections they use (gotls's connections probe and ReadConnState), and
// keeps it in the key store by endpoints (keylog.Log.AddJoined): a
// connection whose handshake came before kwatch attached decrypts from its
// next records on (pkg/tlsconn's join).
type joiner struct {
	a *attacher
	// mu guards layouts and the notes said.
	mu      sync.Mutex
	layouts map[int]*layoutOf // by PID
	said    map[string]bool
	// last holds, by connection, the state added last (its secrets and
	// when it was read): the same state is not added again, so that
	// connections waiting for keys are not woken for nothing.
	last map[[2]netip.AddrPort]joinedAt
	// joined counts the connections whose state was read.
	joined int
}

// newJoiner returns the joiner of a's processes.
func newJoiner(a *attacher) *joiner {
	return &joiner{a: a, layouts: map[int]*layoutOf{}, said: map[string]bool{}, last: map[[2]netip.AddrPort]joinedAt{}}
}

// count returns how many connections' state was read.
func (j *joiner) count() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.joined
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

// attachConns puts the connections probe on process p's executable (pid
// 0: on every process of path), and reads the layout of its structs; a
// process whose layout cannot be read is said once, and its connections
// opened before attach stay encrypted.
func (j *joiner) attachConns(path string, pid int) {
	if _, err := j.a.probe.AttachConns(path, pid); err != nil {
		j.say(fmt.Sprintf("connections open before attach cannot be read in %s: %v", path, err))
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
	seen := j.said[line]
	j.said[line] = true
	j.mu.Unlock()
	if !seen {
		j.a.opt.Notice(line)
	}
}

// run reads the connections the processes use until the probe is closed.
func (j *joiner) run() {
	for {
		u, err := j.a.probe.ReadConn()
		if err != nil {
			return
		}
		j.use(u)
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
	j.a.keys.AddJoined(state)
	if j.a.rec != nil {
		// The recording's secrets name connections by client random,
		// which this one never showed: its state goes in as a comment
		// line that kwatch pcap reads back (keylog.Joined.Line).
		_ = j.a.rec.Secrets(state.Line())
	}
}
