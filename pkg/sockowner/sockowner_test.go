package sockowner

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/kwatch/kwatch/pkg/live"
	"github.com/kwatch/kwatch/pkg/procnet"
)

// TestMain runs the helper processes the tests start (this binary again,
// with SOCKOWNER_HELPER set), else the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("SOCKOWNER_HELPER"); mode != "" {
		os.Exit(helper(mode, os.Args[len(os.Args)-1]))
	}
	os.Exit(m.Run())
}

// helper is a process other than the test's: "serve" listens on
// 127.0.0.1, prints its port, and reads each connection to its end;
// "dial" connects to arg (ADDR,N: N times one after another), writes
// "foreign" and closes each.
func helper(mode, arg string) int {
	switch mode {
	case "serve":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		for {
			c, err := ln.Accept()
			if err != nil {
				return 1
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	case "dial":
		addr, n, _ := strings.Cut(arg, ",")
		count, _ := strconv.Atoi(n)
		for range max(count, 1) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			_, _ = c.Write([]byte("foreign"))
			c.Close()
		}
		return 0
	}
	return 2
}

// startHelper runs bin (this test binary or a copy) as a helper.
func startHelper(t *testing.T, bin, mode, arg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$", arg)
	cmd.Env = append(os.Environ(), "SOCKOWNER_HELPER="+mode)
	cmd.Stderr = os.Stderr
	return cmd
}

// serve starts a "serve" helper and returns its port.
func serve(t *testing.T) (uint16, *exec.Cmd) {
	t.Helper()
	cmd := startHelper(t, os.Args[0], "serve", "")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the serving helper: %v", err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return uint16(port), cmd
}

// open opens the Source, or skips where it cannot be (not root). As root on
// this machine it must open.
func open(t *testing.T) *Source {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	s, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// netns returns this process's network namespace inode.
func netns(t *testing.T) uint64 {
	t.Helper()
	_, ino, err := procnet.NetNS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// collect reads events until cond holds on those read (or fails after
// 30 s: a bound on a wait, not a measurement).
func collect(t *testing.T, s *Source, what string, cond func([]Event) bool) []Event {
	t.Helper()
	var evs []Event
	deadline := time.Now().Add(30 * time.Second)
	for !cond(evs) {
		e, err := s.Read(deadline)
		if err != nil {
			t.Fatalf("waiting for %s: %v; events: %+v", what, err, evs)
		}
		evs = append(evs, e)
	}
	return evs
}

// find returns the first event of evs of kind k with local and remote.
func find(evs []Event, k Kind, local, remote netip.AddrPort) (Event, bool) {
	for _, e := range evs {
		if e.Kind == k && e.Local == local && e.Remote == remote {
			return e, true
		}
	}
	return Event{}, false
}

func addrs(c net.Conn) (local, remote netip.AddrPort) {
	return netip.MustParseAddrPort(c.LocalAddr().String()), netip.MustParseAddrPort(c.RemoteAddr().String())
}

// TestConnectAccept follows this test process and opens connections to a
// listener of its own over IPv4, IPv6 and IPv4 to a dual-stack IPv6
// listener (an IPv4-mapped socket): the listen, the connect and the accept
// are reported with this process's pid, its command name (for those in its
// context), its network namespace and the four-tuple as the sockets see it
// (IPv4 unmapped); the connections map holds both directions; closing
// both ends reports each closed.
func TestConnectAccept(t *testing.T) {
	s := open(t)
	if err := s.Follow(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	self, ns := uint32(os.Getpid()), netns(t)
	for _, tc := range []struct{ name, listen, dial string }{
		{"ipv4", "127.0.0.1:0", "127.0.0.1"},
		{"ipv6", "[::1]:0", "::1"},
		{"ipv4-mapped", "[::]:0", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			port := uint16(ln.Addr().(*net.TCPAddr).Port)
			accepted := make(chan net.Conn, 1)
			go func() {
				c, _ := ln.Accept()
				accepted <- c
			}()
			c, err := net.Dial("tcp", net.JoinHostPort(tc.dial, strconv.Itoa(int(port))))
			if err != nil {
				t.Fatal(err)
			}
			sc := <-accepted
			if sc == nil {
				t.Fatal("accept failed")
			}
			local, remote := addrs(c)
			evs := collect(t, s, "the listen, connect and accept", func(evs []Event) bool {
				_, l := find(evs, Connect, local, remote)
				_, a := find(evs, Accept, remote, local)
				return l && a && slices.ContainsFunc(evs, func(e Event) bool { return e.Kind == Listen && e.Local.Port() == port })
			})
			for _, e := range evs {
				if e.Kind == Listen && e.Local.Port() == port {
					if e.PID != self || e.Comm != strings.TrimSpace(string(comm)) || e.NetNS != ns {
						t.Errorf("listen: %+v, want pid %d, comm %q, netns %d", e, self, comm, ns)
					}
				}
			}
			cn, _ := find(evs, Connect, local, remote)
			if cn.PID != self || cn.TID == 0 || cn.Comm != strings.TrimSpace(string(comm)) || cn.NetNS != ns || cn.ByExe {
				t.Errorf("connect: %+v, want pid %d, comm %q, netns %d", cn, self, comm, ns)
			}
			ac, _ := find(evs, Accept, remote, local)
			if ac.PID != self || ac.NetNS != ns {
				t.Errorf("accept: %+v, want pid %d, netns %d", ac, self, ns)
			}
			// Both ends are this process's: the map holds the
			// accept's, which came last.
			for _, d := range [][2]netip.AddrPort{{local, remote}, {remote, local}} {
				if o, ok := s.Lookup(ns, d[0], d[1]); !ok || o.PID != os.Getpid() || o.Local != remote || o.Client {
					t.Errorf("Lookup %s -> %s: %+v, %v; want pid %d, the accepting end %s", d[0], d[1], o, ok, os.Getpid(), remote)
				}
			}
			c.Close()
			sc.Close()
			collect(t, s, "both ends closed", func(evs []Event) bool {
				_, a := find(evs, Close, local, remote)
				_, b := find(evs, Close, remote, local)
				return a && b
			})
		})
	}
}

// TestForeignNotDelivered follows this test process as the client of a
// server in another process, while a third process makes 50 connections to
// the same server port: a capture filtered by the Source's socket filter
// holds this process's connection from its SYN on and not one packet of the
// others' (which a capture of the port, beside it, holds), and no event
// names the other process.
func TestForeignNotDelivered(t *testing.T) {
	s := open(t)
	ns := netns(t)
	if err := s.Follow(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	port, _ := serve(t)
	prog, err := s.Filter(ns, live.SnapLen)
	if err != nil {
		t.Fatal(err)
	}
	filtered, err := live.Open(live.Options{Interface: "lo", Program: prog, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer filtered.Close()
	all, err := live.Open(live.Options{Interface: "lo", Filter: live.Filter{Ports: []uint16{port}}, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()

	dialer := startHelper(t, os.Args[0], "dial", fmt.Sprintf("127.0.0.1:%d,50", port))
	if err := dialer.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	mine, server := addrs(c)
	if _, err := c.Write([]byte("mine")); err != nil {
		t.Fatal(err)
	}
	if err := dialer.Wait(); err != nil {
		t.Fatalf("the other process: %v", err)
	}
	c.Close()
	// The other process's connections are all made and closed, and
	// this one's too: what the captures hold is read to its end (two
	// idle turns in a row).
	read := func(c *live.Capture) (ours, others int, syn bool) {
		idle := 0
		for idle < 2 {
			data, _, _, err := c.ReadPacket()
			if err != nil {
				t.Fatal(err)
			}
			if data == nil {
				idle++
				continue
			}
			idle = 0
			src, dst, flags, ok := tcpOf(data)
			if !ok || src.Port() != port && dst.Port() != port {
				continue
			}
			if src == mine || dst == mine {
				ours++
				syn = syn || flags&0x12 == 0x02 && src == mine
			} else {
				others++
			}
		}
		return ours, others, syn
	}
	ours, others, syn := read(filtered)
	allOurs, allOthers, _ := read(all)
	t.Logf("filtered: %d packets of this process's connection, %d of the other's; the port's capture: %d and %d", ours, others, allOurs, allOthers)
	if others != 0 {
		t.Errorf("the socket filter passed %d packets of the other process's connections", others)
	}
	if !syn || ours == 0 {
		t.Errorf("the socket filter passed %d packets of this process's connection %s -> %s (its SYN: %v)", ours, mine, server, syn)
	}
	if allOthers < 50*3 {
		t.Errorf("the port's capture holds %d packets of the other process's 50 connections: they were not made as the test means", allOthers)
	}
	for {
		e, ok := s.Next()
		if !ok {
			break
		}
		if e.PID == uint32(dialer.Process.Pid) {
			t.Errorf("an event of the other process: %+v", e)
		}
	}
}

// tcpOf reads a raw IPv4 or IPv6 TCP packet's endpoints and flags.
func tcpOf(p []byte) (src, dst netip.AddrPort, flags byte, ok bool) {
	if len(p) < 40 {
		return
	}
	var tcp []byte
	var sa, da netip.Addr
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0x0f) * 4
		if p[9] != 6 || len(p) < ihl+20 {
			return
		}
		sa, da, tcp = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20])), p[ihl:]
	case 6:
		if p[6] != 6 || len(p) < 60 {
			return
		}
		sa, da, tcp = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40])), p[40:]
	default:
		return
	}
	return netip.AddrPortFrom(sa, uint16(tcp[0])<<8|uint16(tcp[1])), netip.AddrPortFrom(da, uint16(tcp[2])<<8|uint16(tcp[3])), tcp[13], true
}

// TestFollowExe follows a copy of this test binary by its file: a process
// of it started afterwards is reported at its first connect (ByExe), with
// its pid and command name, and from then on by pid; this test process,
// which runs another file, is not.
func TestFollowExe(t *testing.T) {
	s := open(t)
	bin := filepath.Join(t.TempDir(), "exe-followed")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.FollowExe(bin); err != nil {
		t.Fatal(err)
	}
	port, _ := serve(t)
	// This process connects first: not followed.
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	dialer := startHelper(t, bin, "dial", fmt.Sprintf("127.0.0.1:%d,2", port))
	if err := dialer.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(dialer.Process.Pid)
	evs := collect(t, s, "the followed executable's two connects", func(evs []Event) bool {
		n := 0
		for _, e := range evs {
			if e.Kind == Connect && e.PID == pid {
				n++
			}
		}
		return n == 2
	})
	var connects []Event
	for _, e := range evs {
		if e.Kind == Connect {
			connects = append(connects, e)
		}
		if e.PID == uint32(os.Getpid()) {
			t.Errorf("an event of this process, which is not followed: %+v", e)
		}
	}
	if len(connects) != 2 || !connects[0].ByExe || connects[1].ByExe || connects[0].Comm != "exe-followed" || connects[0].Remote.Port() != port {
		t.Errorf("connects %+v: want two of pid %d, comm exe-followed, to port %d, the first found by its executable", connects, pid, port)
	}
}

// TestPeer follows this test process, which listens: another process's
// connection to that port is reported (Peer) with the other process's pid
// and command name, and this process's accept of it (Accept).
func TestPeer(t *testing.T) {
	s := open(t)
	if err := s.Follow(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	dialer := startHelper(t, os.Args[0], "dial", ln.Addr().String()+",1")
	if err := dialer.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(dialer.Process.Pid)
	evs := collect(t, s, "the other process's connect and this one's accept", func(evs []Event) bool {
		var peer *Event
		for i, e := range evs {
			if e.Kind == Peer && e.PID == pid {
				peer = &evs[i]
			}
		}
		if peer == nil {
			return false
		}
		_, ok := find(evs, Accept, peer.Remote, peer.Local)
		return ok
	})
	for _, e := range evs {
		if e.Kind == Peer && e.PID == pid {
			if e.Comm != filepath.Base(os.Args[0])[:min(15, len(filepath.Base(os.Args[0])))] || e.Remote.String() != ln.Addr().String() {
				t.Errorf("peer %+v: want comm %s, remote %s", e, filepath.Base(os.Args[0]), ln.Addr())
			}
		}
	}
}

// TestDecode reads a record as the programs write it, and refuses short
// ones and unknown kinds.
func TestDecode(t *testing.T) {
	b := make([]byte, recordSize)
	b[evKind] = byte(Connect)
	b[evFlags] = 1
	copy(b[evComm:], "kubectl")
	b[evPIDTGID+4] = 42 // tgid 42
	b[evPIDTGID] = 43   // tid 43
	b[evNetNS] = 7
	l, r := netip.MustParseAddr("10.0.0.1").As16(), netip.MustParseAddr("fd00::1").As16()
	copy(b[evLocal:], l[:])
	copy(b[evRemote:], r[:])
	b[evLPort], b[evLPort+1] = 0xc3, 0x50 // 50000
	b[evRPort], b[evRPort+1] = 0x19, 0x2b // 6443
	e, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Event{Kind: Connect, PID: 42, TID: 43, Comm: "kubectl", NetNS: 7, ByExe: true,
		Local: netip.MustParseAddrPort("10.0.0.1:50000"), Remote: netip.MustParseAddrPort("[fd00::1]:6443")}
	if e != want {
		t.Errorf("decode: %+v, want %+v", e, want)
	}
	if _, err := decode(b[:recordSize-1]); err == nil {
		t.Error("a short record decoded")
	}
	b[evKind] = 0
	if _, err := decode(b); err == nil {
		t.Error("a record of kind 0 decoded")
	}
}

// TestKeys: the map keys are laid out as the programs build them.
func TestKeys(t *testing.T) {
	k := connKey(0x01020304, netip.MustParseAddrPort("127.0.0.1:50000"), netip.MustParseAddrPort("[::1]:443"))
	want := []byte{4, 3, 2, 1, 0xc3, 0x50, 0x01, 0xbb,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	if string(k[:]) != string(want) {
		t.Errorf("connKey % x\nwant    % x", k, want)
	}
	if p := portKey(5, 6443); string(p[:]) != string([]byte{5, 0, 0, 0, 0x19, 0x2b, 0, 0}) {
		t.Errorf("portKey % x", p)
	}
	// 259:7 (major 259, minor 7) as stat(2) gives it, as the kernel
	// holds it.
	if d := kernelDev(259<<8 | 7); d != 259<<20|7 {
		t.Errorf("kernelDev: %#x", d)
	}
}

// TestCgroup2Mount reads the cgroup2 mount from mountinfo texts.
func TestCgroup2Mount(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n", ""},
		{"35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n", "/sys/fs/cgroup"},
		{"40 30 0:35 / /sys/fs/cgroup/unified rw,nosuid shared:12 master:3 - cgroup2 cgroup2 rw\n", "/sys/fs/cgroup/unified"},
		{"41 30 0:35 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", ""}, // not the root
		{"42 30 0:35 / /tmp/a\\040b rw - cgroup2 cgroup2 rw\n", "/tmp/a b"},
	} {
		if got := parseCgroup2Mount(tc.text); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.text, got, tc.want)
		}
	}
}

// TestPrograms assembles every program against this kernel's BTF offsets
// (or, without BTF, fails to say so): each fits the kernel's limits.
func TestPrograms(t *testing.T) {
	o, err := loadOffsets()
	if err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	for name, insns := range map[string]asm.Instructions{
		"sockops": sockopsProgram(o), "state": stateProgram(o), "filter": filterProgram(1, live.SnapLen, int64(Grace)),
	} {
		if n := insns.Size() / 8; n > 4096 {
			t.Errorf("%s: %d instructions", name, n)
		}
	}
}

// TestInitialNamespaces: this test runs in the machine's initial PID and
// cgroup namespaces (CI's too); a folder whose files are other inodes is
// refused, naming the namespace.
func TestInitialNamespaces(t *testing.T) {
	if err := initialNamespaces("/proc/self/ns"); err != nil {
		t.Errorf("this process: %v", err)
	}
	dir := t.TempDir()
	for _, n := range []string{"pid", "cgroup"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := initialNamespaces(dir); err == nil || !strings.Contains(err.Error(), "pid namespace of its own") {
		t.Errorf("a PID namespace of its own: %v", err)
	}
}
