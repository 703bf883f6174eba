package procnet

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
)

func TestParseTCP(t *testing.T) {
	text := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0100007F:C5A2 0100007F:192B 01 00000000:00000000 02:000A7D00 00000000     0        0 4242 2 0000000000000000 20 4 30 10 -1
`
	got, err := ParseTCP([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []Socket{
		{Local: netip.MustParseAddrPort("127.0.0.1:8001"), Remote: netip.MustParseAddrPort("0.0.0.0:0"), State: StateListen, Inode: 31337},
		{Local: netip.MustParseAddrPort("127.0.0.1:50594"), Remote: netip.MustParseAddrPort("127.0.0.1:6443"), State: StateEstablished, Inode: 4242},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	v6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:192B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 100 0 0 10 0
`
	got, err = ParseTCP([]byte(v6))
	if err != nil || len(got) != 1 || got[0].Local != netip.MustParseAddrPort("[::1]:6443") {
		t.Errorf("IPv6: %v, %v", got, err)
	}
	if _, err := ParseTCP([]byte("header\n 0: zz:1 00:0 0A 0 0 0 0 0 1 2\n")); err == nil {
		t.Error("a bad address parsed")
	}
}

// TestSockets finds this test's own listening socket and connection.
func TestSockets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	socks, err := Sockets(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	lnAddr := netip.MustParseAddrPort(ln.Addr().String())
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	var listen, conn bool
	for _, s := range socks {
		listen = listen || s.State == StateListen && s.Local == lnAddr
		conn = conn || s.Local == local && s.Remote == lnAddr && s.State == StateEstablished
	}
	if !listen || !conn {
		t.Errorf("listen %v, connection %v in %v", listen, conn, socks)
	}
	p, err := Get(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	byExe, err := ByExe(exe)
	if err != nil || !slices.ContainsFunc(byExe, func(q Process) bool { return q.PID == p.PID }) {
		t.Errorf("ByExe(%s): %v, %v", exe, byExe, err)
	}
	byName, err := ByName(p.Name(), 0)
	if err != nil || !slices.ContainsFunc(byName, func(q Process) bool { return q.PID == p.PID }) {
		t.Errorf("ByName(%s): %v, %v", p.Name(), byName, err)
	}
	if !Alive(p.PID) || Alive(1<<30) {
		t.Error("Alive")
	}
	if _, ino, err := NetNS(p.PID); err != nil || ino == 0 {
		t.Errorf("NetNS: %d, %v", ino, err)
	}
}

// TestNameShown: a process names itself, and its file, as it likes: what
// kwatch prints of them holds no control character (no escape sequence
// written to the terminal, no line break that would forge a line of
// kwatch's), while ByName still matches the name as it is.
func TestNameShown(t *testing.T) {
	for _, tc := range []struct {
		p    Process
		want string
	}{
		{Process{Exe: "/usr/local/bin/kube-apiserver"}, "kube-apiserver"},
		{Process{Exe: "/tmp/x/evil\x1b]0;pwned\x07 (deleted)"}, `"evil\x1b]0;pwned\a"`},
		{Process{Comm: "a\nkwatch: b"}, `"a\nkwatch: b"`},
		{Process{Exe: "/tmp/\xff"}, `"\xff"`},
		{Process{Comm: "ünïcode ok"}, "ünïcode ok"},
	} {
		if got := tc.p.Name(); got != tc.want {
			t.Errorf("%q: Name %s, want %s", tc.p.Exe+tc.p.Comm, got, tc.want)
		}
	}
	if got := Shown("/tmp/evil\x1b[31m/x"); got != `"/tmp/evil\x1b[31m/x"` {
		t.Errorf("Shown: %s", got)
	}
}

// TestParsePod reads pods and containers from the cgroup files of the
// kubelet's drivers, cgroup v1 and v2, and nothing from a process in no pod.
func TestParsePod(t *testing.T) {
	const uid = "8dbc5577-d0e2-4706-8787-57d52c03ddf2"
	const cid = "14011c7d92a9e513dfd69211da0413dbf319a5e45a02b354ba6e98e10272542d"
	for _, tc := range []struct {
		name, cgroup string
		want         Pod
	}{
		{"cgroupfs v1", "12:memory:/kubepods/burstable/pod" + uid + "/" + cid + "\n11:cpu:/kubepods/burstable/pod" + uid + "/" + cid + "\n", Pod{uid, cid}},
		{"cgroupfs guaranteed", "0::/kubepods/pod" + uid + "/" + cid + "\n", Pod{uid, cid}},
		{"systemd containerd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8dbc5577_d0e2_4706_8787_57d52c03ddf2.slice/cri-containerd-" + cid + ".scope\n", Pod{uid, cid}},
		{"systemd cri-o besteffort", "1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8dbc5577_d0e2_4706_8787_57d52c03ddf2.slice/crio-" + cid + ".scope\n", Pod{uid, cid}},
		{"kind node", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod8dbc5577_d0e2_4706_8787_57d52c03ddf2.slice/cri-containerd-" + cid + ".scope\n", Pod{uid, cid}},
		{"pod cgroup itself", "0::/kubepods/burstable/pod" + uid + "\n", Pod{UID: uid}},
		{"not a pod", "12:memory:/user.slice/user-1000.slice/session-3.scope\n0::/system.slice/kubelet.service\n", Pod{}},
		{"kubepods but no UID", "0::/kubepods/burstable/podnot-a-uid/" + cid + "\n", Pod{}},
		{"garbage", "no colons here\n::\n", Pod{}},
	} {
		if got := ParsePod(tc.cgroup); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestSocketOwners finds this process as the owner of its own listening
// socket, by inode.
func TestSocketOwners(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	socks, err := Sockets(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]bool{}
	for _, s := range socks {
		if s.Local.String() == ln.Addr().String() {
			want[s.Inode] = true
		}
	}
	if len(want) != 1 {
		t.Fatalf("the listener's socket: %v", socks)
	}
	got, err := SocketOwners(want)
	if err != nil {
		t.Fatal(err)
	}
	for ino := range want {
		if got[ino].PID != os.Getpid() {
			t.Errorf("socket %d: %+v, want pid %d", ino, got[ino], os.Getpid())
		}
	}
}
