package gotls

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
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
}

func startConnsPeer(t *testing.T, path string) *connsPeer {
	t.Helper()
	p := &connsPeer{dir: t.TempDir()}
	p.cmd = exec.Command(path, "-keylog", p.dir)
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
		if len(f) != 6 || f[0] != "conn" {
			t.Fatalf("%s printed %q", path, line)
		}
		p.conns = append(p.conns, peerConn{f[1], f[2], f[3], f[4], f[5]})
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
