package attach

// Which process owns a connection, from the kernel (pkg/sockowner): the
// connections of the attached processes are known from events the kernel
// writes as each opens (before its first packet) and closes, and the
// captures' socket filters keep their packets and drop every other's in
// the kernel. /proc is read once, at start, for the connections open then.

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/kwatch/kwatch/pkg/live"
	"github.com/kwatch/kwatch/pkg/procnet"
	"github.com/kwatch/kwatch/pkg/sockowner"
)

// portAt is a listening port in a network namespace (by inode).
type portAt struct {
	ns   uint64
	port uint16
}

// listener is an attached process's listening socket: its process and
// address (unspecified: every address of the namespace).
type listener struct {
	proc procnet.Process
	addr netip.Addr
}

// serves reports whether l takes connections to server (its port matched
// already): an address of its own, or any.
func (l listener) serves(server netip.AddrPort) bool {
	return l.addr.IsUnspecified() || l.addr.Unmap() == server.Addr().Unmap()
}

// peerEnd is the process at the other end of an attached server's
// connection: a process of this node that is not attached.
type peerEnd struct {
	proc  procnet.Process
	pod   procnet.Pod
	local netip.AddrPort // its end
}

// closedKept is how long the verdict of a connection that closed is kept:
// its last packets (FIN, RST, the last ACKs) come after the close event.
const closedKept = 5 * time.Second

// maxPeerCache bounds the processes remembered by PID for naming peers.
const maxPeerCache = 4096

// openOwners loads the kernel's source of connection owners, unless opt
// asks for /proc; it returns the line that says where owners come from
// when that is /proc (nothing is said when the kernel tells them).
func (a *attacher) openOwners() string {
	if a.opt.ProcOwners {
		return "connection owners come from /proc (as asked): the processes' sockets are read again at each new connection"
	}
	src, err := sockowner.Open()
	if err != nil {
		return fmt.Sprintf("connection owners come from /proc, read again at each new connection: %v", err)
	}
	a.owners = src
	return ""
}

// drain takes the events the kernel wrote, if any: the connections the
// attached processes opened, accepted and closed, their listening ports,
// the clients of their servers, and processes of Exes met for the first
// time.
func (a *attacher) drain() {
	for {
		e, ok := a.owners.Next()
		if !ok {
			return
		}
		a.event(e)
	}
}

// event takes one event of the kernel's.
func (a *attacher) event(e sockowner.Event) {
	switch e.Kind {
	case sockowner.Connect, sockowner.Accept:
		p := a.followedProc(int(e.PID), e.Comm, e.NetNS)
		t := newTuple(e.Local, e.Remote)
		v := a.fresh(t)
		v.ends = addEnd(v.ends, end{proc: p, local: e.Local, server: e.Kind == sockowner.Accept})
		a.setVerdict(t, v)
	case sockowner.Peer:
		t := newTuple(e.Local, e.Remote)
		v := a.fresh(t)
		if len(v.ends) == 0 {
			v.ends = a.listening(e.NetNS, e.Remote)
		}
		pe := a.peerOf(int(e.PID), e.Comm)
		pe.local = e.Local
		v.peer = &pe
		a.setVerdict(t, v)
	case sockowner.Listen:
		p := a.followedProc(int(e.PID), e.Comm, e.NetNS)
		if len(a.listeners) < sockowner.MaxPorts {
			a.listeners[portAt{e.NetNS, e.Local.Port()}] = listener{p, e.Local.Addr()}
		}
	case sockowner.Unlisten:
		delete(a.listeners, portAt{e.NetNS, e.Local.Port()})
		still := false
		for k := range a.listeners {
			still = still || k.port == e.Local.Port()
		}
		if !still {
			// No namespace's: nor any's.
			_ = a.owners.RemoveListener(0, e.Local.Port())
		}
	case sockowner.Close:
		t := newTuple(e.Local, e.Remote)
		if v, ok := a.verdicts[t]; ok && v.closed.IsZero() {
			v.closed = time.Now()
			a.verdicts[t] = v
		}
	}
}

// fresh returns the verdict known of t, or none when it is of a connection
// that closed (a new one on the same four-tuple).
func (a *attacher) fresh(t tuple) verdict {
	v := a.verdicts[t]
	if !v.closed.IsZero() {
		return verdict{}
	}
	return v
}

// setVerdict keeps v for t; when the verdicts are many, those of closed
// connections and of other processes' go first, then all (the kernel's map
// still answers for the attached processes' connections).
func (a *attacher) setVerdict(t tuple, v verdict) {
	if len(a.verdicts) >= maxVerdicts {
		for k, old := range a.verdicts {
			if !old.closed.IsZero() || len(old.ends) == 0 {
				delete(a.verdicts, k)
			}
		}
		if len(a.verdicts) >= maxVerdicts {
			clear(a.verdicts)
		}
	}
	a.verdicts[t] = v
}

// addEnd adds e to ends unless the same process's end is there.
func addEnd(ends []end, e end) []end {
	if slices.ContainsFunc(ends, func(x end) bool { return x.proc.PID == e.proc.PID && x.local == e.local }) {
		return ends
	}
	return append(ends, e)
}

// followedProc returns the attached process pid; one not attached yet (a
// process of Exes the kernel met at its first connection, listen or
// accept) is remembered, said, and its network namespace netns captured.
func (a *attacher) followedProc(pid int, comm string, netns uint64) procnet.Process {
	if p, ok := a.byPID[pid]; ok {
		return p
	}
	p, err := procnet.Get(pid)
	if err != nil {
		// Gone already (a command that lives milliseconds): its name is
		// its command name.
		p = procnet.Process{PID: pid, Comm: comm}
	}
	a.remember(p)
	a.opt.Notice(fmt.Sprintf("%s (pid %d) started: followed", p.Name(), p.PID))
	a.nsOf[pid] = netns
	if _, ok := a.caps[netns]; !ok {
		if err := a.netns(p); err != nil {
			a.opt.Notice(err.Error())
		}
	}
	return p
}

// listening returns the attached process that listens on server's port as
// an end of the connection to server, preferring netns's (the client's
// namespace; the server may be in another, reached through a node
// address).
func (a *attacher) listening(netns uint64, server netip.AddrPort) []end {
	if e := a.listeningIn(netns, server); e != nil {
		return e
	}
	for k, l := range a.listeners {
		if k.port == server.Port() && l.serves(server) {
			return []end{{proc: l.proc, local: server, server: true}}
		}
	}
	return nil
}

// peerOf names process pid, a client of an attached server: its name (its
// command name when it is gone) and its pod, from /proc, remembered by PID
// while its command name stays the same.
func (a *attacher) peerOf(pid int, comm string) peerEnd {
	if pe, ok := a.peers[pid]; ok && (comm == "" || pe.proc.Comm == comm) {
		return pe
	}
	p, err := procnet.Get(pid)
	if err != nil {
		p = procnet.Process{PID: pid, Comm: comm}
	}
	pod, _ := procnet.PodOf(pid)
	pe := peerEnd{proc: p, pod: pod}
	if len(a.peers) >= maxPeerCache {
		clear(a.peers)
	}
	a.peers[pid] = pe
	return pe
}

// podOf returns the pod of attached process pid, read once.
func (a *attacher) podOf(pid int) procnet.Pod {
	if pod, ok := a.pods[pid]; ok {
		return pod
	}
	pod, _ := procnet.PodOf(pid)
	if len(a.pods) >= maxPeerCache {
		clear(a.pods)
	}
	a.pods[pid] = pod
	return pod
}

// decideKernel returns the verdict of the connection between src and dst:
// from the kernel's events (read first, when some wait: a connection's
// event is written before its first packet), else from the kernel's map of
// the attached processes' connections (an event the ring buffer lost),
// else from the attached processes' listening ports, else none (a packet
// the captures took before their filters were in place).
func (a *attacher) decideKernel(src, dst netip.AddrPort) verdict {
	if a.owners.Pending() {
		a.drain()
	}
	t := newTuple(src, dst)
	if v, ok := a.verdicts[t]; ok {
		return v
	}
	var v verdict
	for ns := range a.caps {
		if o, ok := a.owners.Lookup(ns, src, dst); ok {
			if p, ok := a.byPID[o.PID]; ok {
				v.ends = addEnd(v.ends, end{proc: p, local: o.Local, server: !o.Client})
			}
		}
		if len(v.ends) == 0 {
			if e := a.listeningIn(ns, dst); e != nil {
				v.ends = e
			} else if e := a.listeningIn(ns, src); e != nil {
				v.ends = e
			}
		}
		if len(v.ends) > 0 {
			break
		}
	}
	if _, ok := a.open[t]; ok && len(v.ends) > 0 {
		v.before = true
	}
	a.setVerdict(t, v)
	return v
}

// listeningIn is listening for network namespace ns only.
func (a *attacher) listeningIn(ns uint64, server netip.AddrPort) []end {
	if l, ok := a.listeners[portAt{ns, server.Port()}]; ok && l.serves(server) {
		return []end{{proc: l.proc, local: server, server: true}}
	}
	return nil
}

// seed puts what the first scan found (the attached processes' connections
// open now and their listening ports, by network namespace) into the
// kernel's maps and the verdicts, and names the local clients of the
// attached servers' connections open now: one walk of every process's
// /proc/PID/fd, for the sockets of the namespaces' tables at the other end.
func (a *attacher) seed() {
	for ns, s := range a.socks {
		for l, p := range s.listen {
			a.listeners[portAt{ns, l.Port()}] = listener{p, l.Addr()}
			if err := a.owners.AddListener(ns, l.Port(), p.PID); err != nil {
				a.opt.Notice(err.Error())
			}
		}
		for c, p := range s.conns {
			if err := a.owners.AddConn(ns, c[0], c[1], p.PID); err != nil {
				a.opt.Notice(err.Error())
			}
			t := newTuple(c[0], c[1])
			v := verdict{ends: s.ends(c[0], c[1]), before: true}
			a.setVerdict(t, v)
		}
	}
	// The clients, on this node, of the attached servers' connections.
	type served struct {
		ns           uint64
		client, srv  netip.AddrPort
		clientSocket uint64
	}
	var want []served
	inodes := map[uint64]bool{}
	for ns, s := range a.socks {
		for c := range s.conns {
			local, remote := c[0], c[1]
			if _, ok := s.listening(local); !ok {
				continue
			}
			for _, so := range s.table {
				if so.Local == remote && so.Remote == local && !inodes[so.Inode] && so.Inode != 0 {
					inodes[so.Inode] = true
					want = append(want, served{ns, remote, local, so.Inode})
				}
			}
		}
	}
	if len(want) == 0 {
		return
	}
	owners, err := procnet.SocketOwners(inodes)
	if err != nil {
		a.opt.Notice(fmt.Sprintf("the clients of the connections open now cannot be named: %v", err))
		return
	}
	for _, w := range want {
		p, ok := owners[w.clientSocket]
		if !ok || a.attached[p.PID] {
			continue // gone, or attached: an end already
		}
		t := newTuple(w.client, w.srv)
		v := a.verdicts[t]
		pe := a.peerOf(p.PID, p.Comm)
		pe.local = w.client
		v.peer = &pe
		a.setVerdict(t, v)
	}
}

// light is the periodic look of kernel mode (every Rescan): events, new
// processes that gave secrets, a replaced executable of Exes, processes
// that exited (forgotten by the kernel too), and the connections closed
// long ago forgotten. No socket table is read.
func (a *attacher) light() {
	a.lastScan = time.Now()
	a.drain()
	a.findNew()
	alive := a.procs[:0]
	for _, p := range a.procs {
		if !procnet.Alive(p.PID) {
			a.opt.Notice(fmt.Sprintf("%s (pid %d) exited", p.Name(), p.PID))
			_ = a.owners.Unfollow(p.PID)
			continue
		}
		alive = append(alive, p)
	}
	a.procs = alive
	a.owners.Sweep()
	for t, v := range a.verdicts {
		if !v.closed.IsZero() && time.Since(v.closed) > closedKept {
			delete(a.verdicts, t)
		}
	}
}

// kernelCapture opens the capture of network namespace ino (path "" for
// kwatch's own) with the kernel's socket filter of that namespace.
func (a *attacher) kernelCapture(path string, ino uint64) (*live.Capture, error) {
	prog, err := a.owners.Filter(ino, live.SnapLen)
	if err != nil {
		return nil, err
	}
	return live.Open(live.Options{NetNS: path, Program: prog, RingBytes: a.opt.RingBytes})
}
