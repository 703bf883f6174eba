package live

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNetNS captures in another network namespace (a pod's, say): a
// process of its own holds it (unshare --net), the test brings its
// loopback up and opens a connection in it, and the capture there sees
// the connection's bytes once, where one in kwatch's namespace sees none.
func TestNetNS(t *testing.T) {
	needRoot(t)
	holder := exec.Command("unshare", "--net", "sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatalf("unshare (util-linux): %v", err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	path := fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)
	// unshare has made the namespace once its sleep runs: wait for the
	// namespace to differ from this one.
	for {
		a, _ := exec.Command("readlink", path).Output()
		b, _ := exec.Command("readlink", "/proc/self/ns/net").Output()
		if len(a) > 0 && string(a) != string(b) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var ln net.Listener
	if err := inNetNS(path, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			return err
		}
		ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	there, err := Open(Options{NetNS: path, Filter: Filter{Ports: []uint16{port}}})
	if err != nil {
		t.Fatal(err)
	}
	defer there.Close()
	here, err := Open(Options{Filter: Filter{Ports: []uint16{port}}})
	if err != nil {
		t.Fatal(err)
	}
	defer here.Close()
	payload := []byte("hello from another namespace")
	go func() {
		if s, err := ln.Accept(); err == nil {
			s.Write(payload)
			s.Close()
		}
	}()
	var conn net.Conn
	if err := inNetNS(path, func() error {
		var err error
		conn, err = net.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	conn.Close()
	if err != nil || string(got) != string(payload) {
		t.Fatalf("transfer: %q, %v", got, err)
	}
	var n, fins int
	for fins < 2 {
		data, _, _, err := there.ReadPacket()
		if err != nil || data == nil {
			t.Fatalf("capture in the namespace: %d payload bytes, then %v (idle %v)", n, err, data == nil)
		}
		ihl := int(data[0]&0x0f) * 4
		tcp := data[ihl:]
		n += len(tcp) - int(tcp[12]>>4)*4
		if tcp[13]&0x01 != 0 {
			fins++
		}
	}
	if n != len(payload) {
		t.Errorf("the capture in the namespace holds %d payload bytes, want %d (once)", n, len(payload))
	}
	if data, _, _, err := here.ReadPacket(); err != nil || data != nil {
		t.Errorf("the capture in kwatch's own namespace got a packet of the other one (%d bytes, %v)", len(data), err)
	}
}
