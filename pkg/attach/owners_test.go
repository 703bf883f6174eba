package attach

import (
	"net/netip"
	"testing"

	"github.com/kwatch/kwatch/pkg/procnet"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/sockowner"
)

// kernelAttacher is an attacher whose owners come from events fed by the
// test (event), with the processes of procs attached; its kernel source is
// not loaded (the events are given to event directly).
func kernelAttacher(procs ...procnet.Process) *attacher {
	a := &attacher{opt: Options{Notice: func(string) {}}, names: map[uint32]string{}, attached: map[int]bool{},
		byPID: map[int]procnet.Process{}, verdicts: map[tuple]verdict{}, listeners: map[portAt]listener{},
		peers: map[int]peerEnd{}, pods: map[int]procnet.Pod{}, nsOf: map[int]uint64{}}
	for _, p := range procs {
		a.remember(p)
	}
	return a
}

// TestEvents: the verdicts the kernel's events make. A connect makes the
// attached process the client from the connection's first packet; a close
// then a connect on the same four-tuple by another attached process
// replaces it (the tuple was reused); a listen makes a later peer's
// connection the attached server's, with the peer named as its client; an
// accept adds the server's end without a second copy.
func TestEvents(t *testing.T) {
	ap := netip.MustParseAddrPort
	ctl := procnet.Process{PID: 812, Exe: "/usr/local/bin/kube-controller-manager"}
	api := procnet.Process{PID: 7, Exe: "/usr/local/bin/kube-apiserver"}
	a := kernelAttacher(ctl, api)
	const ns = 4026531840
	c, s := ap("127.0.0.1:50000"), ap("127.0.0.1:6443")
	a.event(sockowner.Event{Kind: sockowner.Connect, PID: 812, NetNS: ns, Local: c, Remote: s})
	v := a.verdicts[newTuple(s, c)]
	if got, _ := describe(v, c); got != "client kube-controller-manager (pid 812)" {
		t.Errorf("after the connect: %q", got)
	}
	a.event(sockowner.Event{Kind: sockowner.Close, PID: 812, NetNS: ns, Local: c, Remote: s})
	if a.verdicts[newTuple(c, s)].closed.IsZero() {
		t.Error("the close was not kept")
	}
	a.event(sockowner.Event{Kind: sockowner.Connect, PID: 7, NetNS: ns, Local: c, Remote: s})
	if got, _ := describe(a.verdicts[newTuple(c, s)], c); got != "client kube-apiserver (pid 7)" {
		t.Errorf("the four-tuple used again: %q", got)
	}

	a.event(sockowner.Event{Kind: sockowner.Listen, PID: 7, NetNS: ns, Local: ap("0.0.0.0:6443")})
	pc := ap("127.0.0.1:51000")
	a.event(sockowner.Event{Kind: sockowner.Peer, PID: 2000000001, Comm: "kubectl", NetNS: ns, Local: pc, Remote: s})
	a.event(sockowner.Event{Kind: sockowner.Accept, PID: 7, NetNS: ns, Local: s, Remote: pc})
	got, procs := describe(a.verdicts[newTuple(pc, s)], pc)
	// No process has pid 2000000001 (above any pid_max): its name is its command name.
	if got != "client kubectl (pid 2000000001) · server kube-apiserver (pid 7)" {
		t.Errorf("a peer's connection: %q", got)
	}
	want := []record.ConnProcess{{Role: "client", PID: 2000000001, Name: "kubectl"}, {Role: "server", PID: 7, Name: "kube-apiserver", Attached: true}}
	if len(procs) != 2 || procs[0] != want[0] || procs[1] != want[1] {
		t.Errorf("processes %+v, want %+v", procs, want)
	}
	// A peer of a listener bound to another address is not the server's.
	a.event(sockowner.Event{Kind: sockowner.Listen, PID: 7, NetNS: ns, Local: ap("10.0.0.1:8443")})
	a.event(sockowner.Event{Kind: sockowner.Peer, PID: 2000000002, Comm: "curl", NetNS: ns, Local: ap("127.0.0.1:52000"), Remote: ap("10.9.9.9:8443")})
	if v := a.verdicts[newTuple(ap("127.0.0.1:52000"), ap("10.9.9.9:8443"))]; len(v.ends) != 0 {
		t.Errorf("a connection to another host's port 8443 was taken for the listener's: %+v", v.ends)
	}
}

// TestDescribePod: a process in a pod is named with its pod UID and its
// container's ID (cut as crictl shows it); the typed values hold both
// whole.
func TestDescribePod(t *testing.T) {
	c := netip.MustParseAddrPort("10.244.0.5:40000")
	pod := procnet.Pod{UID: "8dbc5577-d0e2-4706-8787-57d52c03ddf2", Container: "14011c7d92a9e513dfd69211da0413dbf319a5e45a02b354ba6e98e10272542d"}
	v := verdict{peer: &peerEnd{proc: procnet.Process{PID: 4242, Comm: "coredns"}, pod: pod, local: c}}
	got, procs := describe(v, c)
	if want := "client coredns (pid 4242, pod 8dbc5577-d0e2-4706-8787-57d52c03ddf2, container 14011c7d92a9e)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if len(procs) != 1 || procs[0].PodUID != pod.UID || procs[0].ContainerID != pod.Container || procs[0].Attached {
		t.Errorf("%+v", procs)
	}
}
