package gotls

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/kwatch/kwatch/pkg/keylog"
)

// helperEnv, when set, makes the test binary run helper instead of the
// tests: "open" opens a probe, prints Open's error on stderr and exits 3 for
// ErrNotPermitted, 1 for another error, 0 when it opened.
const helperEnv = "GOTLS_TEST_HELPER"

func helper() int {
	if os.Getenv(helperEnv) != "open" {
		return 2
	}
	p, err := Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, ErrNotPermitted) {
			return 3
		}
		return 1
	}
	p.Close()
	return 0
}

// openProbe opens a probe, closed at the end of the test. It skips only
// where the machine cannot have one (not root, no BPF, no uprobe PMU).
func openProbe(t *testing.T, o options) *Probe {
	t.Helper()
	p, err := open(o)
	switch {
	case errors.Is(err, ErrNotPermitted), errors.Is(err, ErrNoBPF), errors.Is(err, ErrNoUprobes):
		t.Skipf("this machine cannot run the probe: %v", err)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// peer is a running testdata/tlspeer.
type peer struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	keylog string
}

// startPeer starts the program at path, waiting for a line on stdin before
// it handshakes when wait is set.
func startPeer(t *testing.T, path string, wait bool, more ...string) *peer {
	t.Helper()
	p := &peer{keylog: filepath.Join(t.TempDir(), "keylog")}
	args := append([]string{"-keylog", p.keylog}, more...)
	if wait {
		args = append(args, "-wait")
	}
	p.cmd = exec.Command(path, args...)
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
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	if wait {
		if line, err := p.stdout.ReadString('\n'); line != "ready\n" {
			t.Fatalf("%s: %q, %v; want ready", path, line, err)
		}
	}
	return p
}

func (p *peer) pid() int { return p.cmd.Process.Pid }

// release lets a peer started with wait handshake.
func (p *peer) release(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
}

// finish waits for the peer to end and returns the lines of its key log,
// checking that they are those of one handshake of each version.
func (p *peer) finish(t *testing.T) []string {
	t.Helper()
	lines := p.lines(t)
	t.Helper()
	// One TLS 1.3 and one TLS 1.2 handshake, each side logging: four
	// traffic secrets a side, and the master secret once a side.
	labels := map[string]int{}
	for _, l := range lines {
		labels[strings.Fields(l)[0]]++
	}
	want := map[string]int{
		"CLIENT_HANDSHAKE_TRAFFIC_SECRET": 2, "SERVER_HANDSHAKE_TRAFFIC_SECRET": 2,
		"CLIENT_TRAFFIC_SECRET_0": 2, "SERVER_TRAFFIC_SECRET_0": 2, "CLIENT_RANDOM": 2,
	}
	if !maps.Equal(labels, want) {
		t.Fatalf("the peer's own key log has labels %v, want %v", labels, want)
	}
	return lines
}

// lines waits for the peer to end and returns the lines of its key log.
func (p *peer) lines(t *testing.T) []string {
	t.Helper()
	rest, _ := io.ReadAll(p.stdout)
	if err := p.cmd.Wait(); err != nil || string(rest) != "done\n" {
		t.Fatalf("peer: %v, printed %q", err, rest)
	}
	b, err := os.ReadFile(p.keylog)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		lines = append(lines, l)
	}
	return lines
}

// collect reads n secrets, then checks that no more come.
func collect(t *testing.T, p *Probe, n int) []Secret {
	t.Helper()
	p.SetDeadline(time.Now().Add(20 * time.Second))
	var got []Secret
	for len(got) < n {
		s, err := p.Read()
		if err != nil {
			t.Fatalf("after %d of %d secrets: %v (lost %d, skipped %d)", len(got), n, err, p.Lost(), p.Skipped())
		}
		got = append(got, s)
	}
	p.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if s, err := p.Read(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("secret %d of %d: %s from pid %d (err %v)", n+1, n, s.Label, s.PID, err)
	}
	if p.Lost() != 0 || p.Skipped() != 0 {
		t.Errorf("lost %d, skipped %d", p.Lost(), p.Skipped())
	}
	return got
}

// checkSecrets checks that the secrets of pid are the lines of its key log,
// each once.
func checkSecrets(t *testing.T, got []Secret, pid int, want []string) {
	t.Helper()
	var lines []string
	for _, s := range got {
		if int(s.PID) != pid {
			continue
		}
		if s.TID == 0 {
			t.Errorf("pid %d: %s with thread ID 0", pid, s.Label)
		}
		lines = append(lines, string(s.KeyLogLine()))
	}
	slices.Sort(lines)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(lines, want) {
		t.Errorf("pid %d: the probe gave %d lines, the key log holds %d:\n%s\nwant:\n%s", pid, len(lines), len(want), redact(lines), redact(want))
	}
	// And keylog reads them as the file they equal.
	l := keylog.New()
	l.Add([]byte(strings.Join(lines, "")), "probe")
	if conns, _, errs, _ := l.Stats(); conns != 2 || len(errs) != 0 {
		t.Errorf("pid %d: keylog holds %d connections, errors %v", pid, conns, errs)
	}
}

// redact keeps labels and the first bytes of randoms: test output holds no
// secrets.
func redact(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		f := strings.Fields(l)
		fmt.Fprintf(&b, "  %s %.16s… (%d hex digits)\n", f[0], f[1], len(f[2]))
	}
	return b.String()
}

// TestProbe: for each build, a probe attached to a waiting process gives
// every secret its key log holds, client and server side, TLS 1.3 and 1.2,
// with its pid; the perf event array path as well as the ring buffer's.
func TestProbe(t *testing.T) {
	for _, c := range []struct {
		build  string
		perf   bool
		method Method
	}{
		{"plain", false, BySymbolTable},
		{"stripped", false, ByPclntab},
		{"pie-stripped", false, ByPclntab},
		{"external-stripped", false, ByPclntab},
		{"stripped", true, ByPclntab},
	} {
		name := c.build
		if c.perf {
			name += "/perf"
		}
		t.Run(name, func(t *testing.T) {
			path := testProgram(t, c.build)
			p := openProbe(t, options{perf: c.perf})
			if c.perf != (p.out == toPerf) {
				t.Fatalf("output %d", p.out)
			}
			pr := startPeer(t, path, true)
			loc, err := p.Attach(path, pr.pid())
			if err != nil {
				t.Fatal(err)
			}
			if loc.Method != c.method {
				t.Errorf("found by %v, want %v", loc.Method, c.method)
			}
			pr.release(t)
			want := pr.finish(t)
			checkSecrets(t, collect(t, p, len(want)), pr.pid(), want)
		})
	}
}

// TestLost: secrets that find the buffer full are counted, and the others
// still come; on both outputs.
func TestLost(t *testing.T) {
	path := testProgram(t, "stripped")
	for _, perf := range []bool{false, true} {
		p := openProbe(t, options{perf: perf})
		// 150 handshakes of each version, 1,500 secrets: more than the
		// ring buffer (RingBufferSize / 192 bytes) or two CPUs' perf
		// buffers (2 × PerfBufferSize / 200 bytes) hold.
		pr := startPeer(t, path, true, "-n", "150")
		if _, err := p.Attach(path, pr.pid()); err != nil {
			t.Fatal(err)
		}
		pr.release(t)
		want := pr.lines(t)
		lines := map[string]bool{}
		for _, l := range want {
			lines[l] = true
		}
		n := 0
		for {
			p.SetDeadline(time.Now().Add(300 * time.Millisecond))
			s, err := p.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !lines[string(s.KeyLogLine())] {
				t.Fatalf("perf %v: a secret not in the key log", perf)
			}
			n++
		}
		// A call reported twice (see Read) and lost once is counted
		// lost, though its first report came.
		t.Logf("perf %v: %d secrets, %d read, %d lost, %d repeats dropped", perf, len(want), n, p.Lost(), p.repeats.Load())
		if sum := uint64(n) + p.Lost(); p.Lost() == 0 || sum < uint64(len(want)) || sum > uint64(len(want))+10 || p.Skipped() != 0 {
			t.Errorf("perf %v: %d secrets, %d read, %d lost, %d skipped", perf, len(want), n, p.Lost(), p.Skipped())
		}
		p.Close()
		if p.Lost() == 0 {
			t.Errorf("perf %v: Lost is 0 after Close", perf)
		}
	}
}

// TestProbeProcesses: one executable attached for two processes (one by
// its path, one by /proc/PID/exe as for a container), not for a third; and
// for every process (pid 0), one running before and one started after.
func TestProbeProcesses(t *testing.T) {
	path := testProgram(t, "pie-stripped")
	t.Run("two pids", func(t *testing.T) {
		p := openProbe(t, options{})
		a, b, c := startPeer(t, path, true), startPeer(t, path, true), startPeer(t, path, true)
		for _, at := range []struct {
			path string
			pid  int
		}{{path, a.pid()}, {"/proc/" + strconv.Itoa(b.pid()) + "/exe", b.pid()}, {path, a.pid()}, {"", b.pid()}} {
			if _, err := p.Attach(at.path, at.pid); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(p.links); n != 2 {
			t.Errorf("%d uprobes, want 2 (attaching again does nothing)", n)
		}
		for _, pr := range []*peer{a, b, c} {
			pr.release(t)
		}
		wantA, wantB := a.finish(t), b.finish(t)
		c.finish(t)
		got := collect(t, p, len(wantA)+len(wantB))
		checkSecrets(t, got, a.pid(), wantA)
		checkSecrets(t, got, b.pid(), wantB)
	})
	t.Run("overlapping", func(t *testing.T) {
		p := openProbe(t, options{})
		pr := startPeer(t, path, true)
		for _, pid := range []int{0, pr.pid()} {
			if _, err := p.Attach(path, pid); err != nil {
				t.Fatal(err)
			}
		}
		pr.release(t)
		want := pr.finish(t)
		checkSecrets(t, collect(t, p, len(want)), pr.pid(), want)
		if n := p.repeats.Load(); n != uint64(len(want)) {
			t.Errorf("%d repeats dropped, want %d (one a call)", n, len(want))
		}
	})
	t.Run("every process", func(t *testing.T) {
		p := openProbe(t, options{})
		before := startPeer(t, path, true)
		if _, err := p.Attach(path, 0); err != nil {
			t.Fatal(err)
		}
		after := startPeer(t, path, false)
		before.release(t)
		wantBefore, wantAfter := before.finish(t), after.finish(t)
		got := collect(t, p, len(wantBefore)+len(wantAfter))
		checkSecrets(t, got, before.pid(), wantBefore)
		checkSecrets(t, got, after.pid(), wantAfter)
	})
}

// TestAttachErrors: what Attach refuses, and a closed probe.
func TestAttachErrors(t *testing.T) {
	p := openProbe(t, options{})
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	plain := testProgram(t, "plain")
	for _, c := range []struct {
		name string
		path string
		pid  int
		want error
		says string
	}{
		{"no crypto/tls", testProgram(t, "notls"), 0, ErrNoCryptoTLS, "SSLKEYLOGFILE"},
		{"another arch", testProgram(t, "arm64-stripped"), 0, ErrUnsupportedArch, "built for arm64"},
		{"not the process's executable", plain, sleep.Process.Pid, nil, "/exe"},
		{"no such process", plain, 1 << 30, nil, "no such process"},
		{"negative pid", plain, -1, nil, "0 for every process"},
		{"nothing given", "", 0, nil, "no executable"},
		{"a C program's /proc/PID/exe", "", sleep.Process.Pid, ErrNotGo, "SSLKEYLOGFILE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Attach(c.path, c.pid)
			if err == nil || c.want != nil && !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("err %v, want %v saying %q", err, c.want, c.says)
			}
		})
	}
	if len(p.links) != 0 {
		t.Errorf("%d uprobes after errors only", len(p.links))
	}

	// Close interrupts a blocked Read; then Read and Attach say closed.
	done := make(chan error)
	go func() {
		_, err := p.Read()
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("blocked Read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt Read")
	}
	if _, err := p.Read(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	if _, err := p.Attach(plain, 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Attach after Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestOpenUnprivileged: a copy of this test binary, run as nobody with no
// capabilities, gets ErrNotPermitted in one line that names what it lacks.
func TestOpenUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to nobody")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv (util-linux)")
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(buildDir, "gotls.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", bin)
	cmd.Env = append(os.Environ(), helperEnv+"=open")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("%v; stderr %q; want exit status 3 (ErrNotPermitted)", err, stderr.String())
	}
	msg := stderr.String()
	want := "not permitted to load BPF programs and place uprobes: run as root, or with CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8); this process lacks CAP_BPF and CAP_PERFMON and CAP_SYS_ADMIN\n"
	if msg != want {
		t.Errorf("stderr %q, want %q", msg, want)
	}
}

// TestOpenErrors: what Open says of a kernel without a uprobe PMU or BPF,
// which this machine cannot show: each a one-line error wrapping its
// sentinel.
func TestOpenErrors(t *testing.T) {
	status := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(status, []byte("Name:\tx\nCapEff:\t000001ffffffffff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pmu := filepath.Join(t.TempDir(), "uprobe")
	for _, c := range []struct {
		name string
		err  error
		want error
		says string
	}{
		{"no uprobe PMU", checkProcess(status, pmu), ErrNoUprobes, "the kernel has no uprobe PMU: no " + pmu + " (CONFIG_UPROBE_EVENTS"},
		{"no bpf(2)", bpfError("probing for kprobe programs", fmt.Errorf("detect support: %w", syscall.ENOSYS)), ErrNoBPF, "the kernel has no BPF for uprobes: probing for kprobe programs"},
		{"no kprobe programs", bpfError("probing for kprobe programs", ebpf.ErrNotSupported), ErrNoBPF, "(CONFIG_BPF_SYSCALL, CONFIG_BPF_EVENTS)"},
		{"refused", bpfError("loading the uprobe program", fmt.Errorf("load: %w", syscall.EPERM)), ErrNotPermitted, "the kernel refused"},
		{"other", bpfError("loading the uprobe program", errors.New("verifier says no")), nil, "loading the uprobe program: verifier says no"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil || c.want != nil && !errors.Is(c.err, c.want) || !strings.Contains(c.err.Error(), c.says) || strings.Contains(c.err.Error(), "\n") {
				t.Errorf("%v; want one line wrapping %v, saying %q", c.err, c.want, c.says)
			}
		})
	}
	if err := checkProcess(status, t.TempDir()); err != nil {
		t.Errorf("with a PMU: %v", err)
	}
}

// TestCaps: the capability check, on status texts.
func TestCaps(t *testing.T) {
	status := func(eff string) string {
		return "Name:\tkwatch\nUmask:\t0022\nState:\tR (running)\nCapInh:\t0000000000000000\nCapPrm:\t" + eff + "\nCapEff:\t" + eff + "\nCapBnd:\t000001ffffffffff\n"
	}
	for _, c := range []struct {
		name, eff string
		lacks     string // "" for permitted
	}{
		{"root", "000001ffffffffff", ""},
		{"CAP_BPF and CAP_PERFMON", "000000c000000000", ""},
		{"CAP_SYS_ADMIN", "0000000000200000", ""},
		{"none", "0000000000000000", "lacks CAP_BPF and CAP_PERFMON and CAP_SYS_ADMIN"},
		{"CAP_BPF only", "0000008000000000", "lacks CAP_PERFMON and CAP_SYS_ADMIN"},
		{"CAP_PERFMON only", "0000004000000000", "lacks CAP_BPF and CAP_SYS_ADMIN"},
		{"CAP_NET_ADMIN", "0000000000001000", "lacks CAP_BPF and CAP_PERFMON and CAP_SYS_ADMIN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			eff, err := capEff(status(c.eff))
			if err != nil {
				t.Fatal(err)
			}
			err = checkCaps(eff)
			if c.lacks == "" {
				if err != nil {
					t.Errorf("%v", err)
				}
				return
			}
			if !errors.Is(err, ErrNotPermitted) || !strings.HasSuffix(err.Error(), c.lacks) {
				t.Errorf("%v; want ErrNotPermitted ending %q", err, c.lacks)
			}
		})
	}
	if _, err := capEff("Name:\tx\n"); err == nil {
		t.Error("no CapEff line: no error")
	}
}
