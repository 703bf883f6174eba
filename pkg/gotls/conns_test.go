package gotls

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"
)

// connsPeer is a running testdata/tlsconns.
type connsPeer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	dir    string
	conns  []peerConn
	sent   int // the sum of the rw commands' N
}

// peerConn is one connection a tlsconns holds, as it printed it.
type peerConn struct {
	name          string
	version       string
	local, remote string
	ekm           string // ExportKeyingMaterial("EXPERIMENTAL kwatch", nil, 32), hex
	client        uint64 // the client's crypto/tls.Conn in the process
	server        uint64 // the server's
}

// startConnsPeer runs the tlsconns at path, with env added to its
// environment, and reads its connections.
func startConnsPeer(t *testing.T, path string, env ...string) *connsPeer {
	t.Helper()
	p := &connsPeer{dir: t.TempDir()}
	p.cmd = exec.Command(path, "-keylog", p.dir)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = os.Stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdout = bufio.NewReader(out)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stdin.Close(); p.cmd.Process.Kill(); p.cmd.Wait() })
	for {
		line, err := p.stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		f := strings.Fields(line)
		if len(f) == 1 && f[0] == "ready" {
			break
		}
		if len(f) != 8 || f[0] != "conn" {
			t.Fatalf("%s printed %q", path, line)
		}
		var client, server uint64
		if _, err := fmt.Sscanf(f[6]+" "+f[7], "%v %v", &client, &server); err != nil {
			t.Fatalf("%s printed %q: %v", path, line, err)
		}
		p.conns = append(p.conns, peerConn{f[1], f[2], f[3], f[4], f[5], client, server})
	}
	return p
}

func (p *connsPeer) pid() int { return p.cmd.Process.Pid }

// rw makes each connection's client write n records and read 2n.
func (p *connsPeer) rw(t *testing.T, n int) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "rw "+strconv.Itoa(n)+"\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := p.stdout.ReadString('\n'); line != "done\n" {
		t.Fatalf("rw %d: %q, %v", n, line, err)
	}
	p.sent += n
}

// collectConns reads reports until want distinct connections of pid came
// (or 10 s passed), and returns them by pointer.
func collectConns(t *testing.T, p *Probe, pid, want int) map[uint64]ConnUse {
	t.Helper()
	got := map[uint64]ConnUse{}
	p.SetConnDeadline(time.Now().Add(10 * time.Second))
	for len(got) < want {
		u, err := p.ReadConn()
		if err != nil {
			t.Fatalf("after %d of %d connections: %v", len(got), want, err)
		}
		if int(u.PID) != pid || u.TID == 0 {
			t.Fatalf("a report %+v, from pid %d", u, pid)
		}
		got[u.Conn] = u
	}
	return got
}

// TestConnProbe: a process's connections are reported at their use, each
// once, and again after ConnReportInterval; on both outputs.
func TestConnProbe(t *testing.T) {
	for _, perf := range []bool{false, true} {
		name := "ring"
		if perf {
			name = "perf"
		}
		t.Run(name, func(t *testing.T) {
			path := testProgram(t, "conns-stripped")
			p := openProbe(t, options{perf: perf})
			pr := startConnsPeer(t, path)
			locs, err := p.AttachConns(path, pr.pid())
			if err != nil {
				t.Fatal(err)
			}
			if len(locs) != 2 || locs[0].Method != ByPclntab || locs[0].Offset == locs[1].Offset {
				t.Fatalf("locations %+v", locs)
			}
			// Three connections, client and server side each.
			want := 2 * len(pr.conns)
			start := time.Now()
			pr.rw(t, 3)
			collectConns(t, p, pr.pid(), want)
			// Used again at once: not reported again.
			pr.rw(t, 1)
			p.SetConnDeadline(time.Now().Add(300 * time.Millisecond))
			u, err := p.ReadConn()
			if time.Since(start) < ConnReportInterval && err == nil {
				t.Errorf("reported again within %v: %+v", ConnReportInterval, u)
			}
			// After the interval: each again.
			time.Sleep(ConnReportInterval)
			pr.rw(t, 1)
			collectConns(t, p, pr.pid(), want)
			if p.ConnsLost() != 0 || p.Skipped() != 0 {
				t.Errorf("lost %d, skipped %d", p.ConnsLost(), p.Skipped())
			}
		})
	}
}

// TestConnKnownAndDetach: a connection ConnKnown was told of is not
// reported again, however long after; DetachConns removes the process's
// two uprobes, and its calls are reported no more.
func TestConnKnownAndDetach(t *testing.T) {
	path := testProgram(t, "conns-stripped")
	p := openProbe(t, options{})
	pr := startConnsPeer(t, path)
	if _, err := p.AttachConns(path, pr.pid()); err != nil {
		t.Fatal(err)
	}
	if n := p.ConnProbes(); n != 2 {
		t.Fatalf("%d connection uprobes in place, want 2", n)
	}
	pr.rw(t, 1)
	got := collectConns(t, p, pr.pid(), 2*len(pr.conns))
	// All but one are known: only that one is reported after the
	// interval.
	var left uint64
	for conn, u := range got {
		if left == 0 {
			left = conn
			continue
		}
		if err := p.ConnKnown(u.PID, conn); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ConnReportInterval)
	pr.rw(t, 1)
	again := collectConns(t, p, pr.pid(), 1)
	if _, ok := again[left]; !ok || len(again) != 1 {
		t.Errorf("after ConnKnown for all but %#x, reported %v", left, again)
	}
	p.SetConnDeadline(time.Now().Add(300 * time.Millisecond))
	if u, err := p.ReadConn(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection ConnKnown was told of was reported: %+v, %v", u, err)
	}
	n, err := p.DetachConns(pr.pid())
	if n != 2 || err != nil || p.ConnProbes() != 0 {
		t.Fatalf("DetachConns: %d, %v; %d left", n, err, p.ConnProbes())
	}
	time.Sleep(ConnReportInterval)
	pr.rw(t, 1)
	p.SetConnDeadline(time.Now().Add(300 * time.Millisecond))
	if u, err := p.ReadConn(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("reported after DetachConns: %+v, %v", u, err)
	}
}

// TestConnProgram: the connections program reads the receiver from its
// register's place in pt_regs (RAX on amd64, X0 on arm64: arm64's is
// checked here only), and nothing else from the context; for both outputs
// and both functions.
func TestConnProgram(t *testing.T) {
	for arch, recv := range map[string]int16{"amd64": 80, "arm64": 0} {
		for _, out := range []output{toRing, toPerf} {
			for _, op := range []int32{connOpRead, connOpWrite} {
				insns, err := connProgram(arch, out, op)
				if err != nil {
					t.Fatal(err)
				}
				var got []int16
				for _, ins := range insns {
					if ins.OpCode.Class() == asm.LdXClass && ins.Src == asm.R6 {
						got = append(got, ins.Offset)
					}
				}
				if len(got) != 1 || got[0] != recv {
					t.Errorf("%s, output %d: loads from the context at %v, want [%d]", arch, out, got, recv)
				}
				var b bytes.Buffer
				if err := insns.Marshal(&b, binary.LittleEndian); err != nil {
					t.Errorf("%s, output %d: %v", arch, out, err)
				}
			}
		}
	}
	if _, err := connProgram("riscv64", toRing, connOpRead); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("riscv64: %v", err)
	}
}

func TestDecodeConn(t *testing.T) {
	rec := func(pid, tid uint32, conn uint64, op uint32) []byte {
		b := make([]byte, connRecordSize)
		binary.NativeEndian.PutUint64(b[connRecPIDTGID:], uint64(pid)<<32|uint64(tid))
		binary.NativeEndian.PutUint64(b[connRecConn:], conn)
		binary.NativeEndian.PutUint32(b[connRecOp:], op)
		return b
	}
	u, err := decodeConn(rec(1234, 1240, 0xc000123400, connOpWrite))
	if err != nil || u != (ConnUse{PID: 1234, TID: 1240, Conn: 0xc000123400, Write: true}) {
		t.Errorf("%+v, %v", u, err)
	}
	for _, c := range []struct {
		name string
		rec  []byte
		says string
	}{
		{"short", rec(1, 1, 1, connOpRead)[:connRecordSize-1], "record of 23 bytes"},
		{"nil receiver", rec(1, 1, 0, connOpRead), "receiver 0x0"},
		{"no operation", rec(1, 1, 8, 0), "operation 0"},
	} {
		if _, err := decodeConn(c.rec); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want one saying %q", c.name, err, c.says)
		}
	}
}

// TestConnErrors: ReadConn before AttachConns and after Close, AttachConns
// after Close and on what Attach refuses.
func TestConnErrors(t *testing.T) {
	p := openProbe(t, options{})
	if _, err := p.ReadConn(); err == nil || !strings.Contains(err.Error(), "call AttachConns first") {
		t.Errorf("ReadConn before AttachConns: %v", err)
	}
	if _, err := p.AttachConns(testProgram(t, "notls"), 0); !errors.Is(err, ErrNoCryptoTLS) || !strings.Contains(err.Error(), ConnReadFunc) {
		t.Errorf("no crypto/tls: %v", err)
	}
	if _, err := p.AttachConns("", -1); err == nil {
		t.Error("pid -1: no error")
	}
	path := testProgram(t, "conns-stripped")
	if _, err := p.AttachConns(path, 0); err != nil {
		t.Fatal(err)
	}
	if n := len(p.links); n != 2 {
		t.Errorf("%d uprobes, want 2", n)
	}
	if _, err := p.AttachConns(path, 0); err != nil || len(p.links) != 2 {
		t.Errorf("attached again: %v, %d uprobes", err, len(p.links))
	}
	done := make(chan error)
	go func() {
		_, err := p.ReadConn()
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("blocked ReadConn: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt ReadConn")
	}
	if _, err := p.ReadConn(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("ReadConn after Close: %v", err)
	}
	if _, err := p.AttachConns(path, 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("AttachConns after Close: %v", err)
	}
}

// TestConnFuncsNotInlined: the compiler says it cannot inline crypto/tls's
// (*Conn).Read and (*Conn).Write (each holds a defer), so that every call
// runs the code the probe is on; the stripped test program has both in its
// function table.
func TestConnFuncsNotInlined(t *testing.T) {
	cmd := exec.Command("go", "build", "-o", os.DevNull, "-gcflags=crypto/tls=-m=2", "./testdata/tlsconns")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, fn := range []string{"Read", "Write"} {
		if !bytes.Contains(out, []byte("cannot inline (*Conn)."+fn+":")) {
			t.Errorf("the compiler does not say it cannot inline (*Conn).%s", fn)
		}
	}
	if _, err := findFuncs(testProgram(t, "conns-stripped"), ConnReadFunc, ConnWriteFunc); err != nil {
		t.Error(err)
	}
}
