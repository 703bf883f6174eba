package attach

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/kwatch/kwatch/pkg/procnet"
	"github.com/kwatch/kwatch/pkg/record"
)

// tuple is a TCP connection's two endpoints, the lower first, so that both
// directions' packets give the same tuple.
type tuple struct{ a, b netip.AddrPort }

func newTuple(x, y netip.AddrPort) tuple {
	if x.Compare(y) > 0 {
		x, y = y, x
	}
	return tuple{x, y}
}

// end is one attached process at one end of a connection.
type end struct {
	proc   procnet.Process
	local  netip.AddrPort // the process's end
	server bool           // the process listens on its end
	pod    procnet.Pod    // its pod, when in one (read for the note)
}

// verdict is what the tracker decided of a connection: the attached
// processes at its ends, none for a connection of other processes.
type verdict struct {
	ends []end
	// before: the connection was open when kwatch attached (its
	// handshake, if any, was not seen).
	before bool
	// peer is, for a connection to an attached server, the client
	// when it is a process of this node that is not attached (from the
	// kernel, or from the first scan's /proc walk); nil when not known.
	peer *peerEnd
	// closed is when the kernel said the connection closed (zero while
	// open, and always with /proc scans).
	closed time.Time
}

// maxVerdicts bounds the connections the tracker remembers; past it the
// memory is emptied (and connections decided again as packets come).
const maxVerdicts = 1 << 16

// sockets indexes the TCP sockets of the attached processes.
type sockets struct {
	// listen maps a listening endpoint (its address may be 0.0.0.0 or ::)
	// to its process.
	listen map[netip.AddrPort]procnet.Process
	// conns maps a connection (local, remote) to its process.
	conns map[[2]netip.AddrPort]procnet.Process
	// ports is the kernel filter's port set: the listening ports, and
	// the remote port of every connection the processes made.
	ports []uint16
	// table is the namespace's whole socket table as read (every
	// process's sockets).
	table []procnet.Socket
}

// index reads the sockets of procs, processes of one network namespace:
// its socket table is read once, from the first process it can be read
// of (each read costs the kernel a walk of its TCP hash tables).
func index(procs []procnet.Process) (*sockets, error) {
	s := &sockets{listen: map[netip.AddrPort]procnet.Process{}, conns: map[[2]netip.AddrPort]procnet.Process{}}
	var errs []string
	type made struct {
		p   procnet.Process
		soc procnet.Socket
	}
	var outgoing []made
	var table []procnet.Socket
	read := false
	for _, p := range procs {
		mine, err := procnet.SocketInodes(p.PID)
		if err == nil && !read {
			table, err = procnet.Table(p.PID)
			read = err == nil
		}
		if err != nil {
			if procnet.Alive(p.PID) {
				errs = append(errs, err.Error())
			}
			continue
		}
		socks := procnet.Mine(table, mine)
		for _, so := range socks {
			if so.State == procnet.StateListen {
				s.listen[so.Local] = p
				s.ports = append(s.ports, so.Local.Port())
				continue
			}
			s.conns[[2]netip.AddrPort{so.Local, so.Remote}] = p
			outgoing = append(outgoing, made{p, so})
		}
	}
	for _, m := range outgoing {
		if _, ok := s.listening(m.soc.Local); !ok {
			s.ports = append(s.ports, m.soc.Remote.Port())
		}
	}
	slices.Sort(s.ports)
	s.ports = slices.Compact(s.ports)
	s.table = table
	if len(errs) > 0 && len(s.conns)+len(s.listen) == 0 {
		return s, fmt.Errorf("reading the processes' sockets: %s", strings.Join(errs, "; "))
	}
	return s, nil
}

// listening returns the attached process listening on a (on its address
// or on any address of its port).
func (s *sockets) listening(a netip.AddrPort) (procnet.Process, bool) {
	if p, ok := s.listen[a]; ok {
		return p, true
	}
	for _, any := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		if p, ok := s.listen[netip.AddrPortFrom(any, a.Port())]; ok {
			return p, true
		}
	}
	return procnet.Process{}, false
}

// ends returns the attached processes at the ends of the connection
// between x and y.
func (s *sockets) ends(x, y netip.AddrPort) []end {
	var out []end
	for _, e := range [][2]netip.AddrPort{{x, y}, {y, x}} {
		if p, ok := s.conns[e]; ok {
			_, server := s.listening(e[0])
			out = append(out, end{proc: p, local: e[0], server: server})
		} else if p, ok := s.listening(e[0]); ok {
			// Accepted by a listener, not (yet) in /proc: the SYN of
			// a connection to it.
			out = append(out, end{proc: p, local: e[0], server: true})
		}
	}
	return out
}

// packetTuple returns the TCP endpoints of a raw IP packet, and whether it
// is a SYN without ACK (a connection's first packet).
func packetTuple(p []byte) (src, dst netip.AddrPort, syn, ok bool) {
	if len(p) < 1 {
		return
	}
	var tcp []byte
	var sa, da netip.Addr
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0x0f) * 4
		if len(p) < ihl+14 || ihl < 20 || p[9] != 6 {
			return
		}
		sa, da = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		tcp = p[ihl:]
	case 6:
		if len(p) < 40+14 || p[6] != 6 {
			return
		}
		sa, da = netip.AddrFrom16([16]byte(p[8:24])).Unmap(), netip.AddrFrom16([16]byte(p[24:40])).Unmap()
		tcp = p[40:]
	default:
		return
	}
	flags := tcp[13]
	return netip.AddrPortFrom(sa, binary.BigEndian.Uint16(tcp[0:])), netip.AddrPortFrom(da, binary.BigEndian.Uint16(tcp[2:])),
		flags&0x02 != 0 && flags&0x10 == 0, true
}

// describe says who is at the ends of a connection, for its "process"
// note: "client kube-controller-manager (pid 812) · server kube-apiserver
// (pid 7)", the client first, with a process's pod and container when it
// is in one ("client coredns (pid 812, pod UID, container ID)", the
// container's ID cut to 13 digits, as crictl shows it), and the same as
// typed values.
func describe(v verdict, client netip.AddrPort) (string, []record.ConnProcess) {
	type who struct {
		role     string
		p        procnet.Process
		pod      procnet.Pod
		attached bool
	}
	var all []who
	for _, e := range v.ends {
		role := "server"
		if e.local == client {
			role = "client"
		}
		all = append(all, who{role, e.proc, e.pod, true})
	}
	if v.peer != nil {
		role := "server"
		if v.peer.local == client {
			role = "client"
		}
		all = append(all, who{role, v.peer.proc, v.peer.pod, false})
	}
	// The client first; then by PID, for a stable order.
	slices.SortStableFunc(all, func(x, y who) int {
		if x.role != y.role {
			return strings.Compare(x.role, y.role)
		}
		return x.p.PID - y.p.PID
	})
	var parts []string
	var procs []record.ConnProcess
	for _, w := range all {
		detail := fmt.Sprintf("pid %d", w.p.PID)
		if w.pod.UID != "" {
			detail += ", pod " + w.pod.UID
			if c := w.pod.Container; c != "" {
				detail += ", container " + c[:min(13, len(c))]
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s (%s)", w.role, w.p.Name(), detail))
		procs = append(procs, record.ConnProcess{Role: w.role, PID: w.p.PID, Name: w.p.Name(), Attached: w.attached,
			PodUID: w.pod.UID, ContainerID: w.pod.Container})
	}
	if v.before && len(parts) > 0 {
		parts = append(parts, "open before kwatch attached")
	}
	return strings.Join(parts, " · "), procs
}
