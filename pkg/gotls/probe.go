package gotls

// The probe: the loaded program, its maps, the uprobes placed, the reader.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
)

// RingBufferSize is the size of the BPF ring buffer (Linux 5.8) that the
// probe's records wait in until Read takes them, in bytes: 256 KiB, about
// 1,360 secrets (a record is 184 bytes, plus the ring's 8-byte header), so
// about 170 TLS 1.3 handshakes seen from both sides (8 secrets each) if
// nothing reads. A record that finds it full is dropped and counted (Lost).
// It is the probe's only buffer in the kernel, whatever it is attached to.
const RingBufferSize = 256 << 10

// PerfBufferSize is the size of each CPU's buffer in the perf event array
// used instead of a ring buffer on kernels without one, in bytes: 64 KiB per
// CPU (about 320 records each: 200 bytes with the perf headers).
const PerfBufferSize = 64 << 10

// Probe is the loaded uprobe program and its buffer. Its methods may be
// called from several goroutines, but Read from one at a time.
type Probe struct {
	out      output
	prog     *ebpf.Program
	events   *ebpf.Map
	counters *ebpf.Map
	keys     buffer        // events' reading end
	bad      atomic.Uint64 // records decode refused
	repeats  atomic.Uint64 // records Read dropped as a call's second report
	recent   [recentCalls]call
	next     int // where in recent the next call goes

	// The connections probe (conns.go), loaded by the first AttachConns:
	// conns is set once, under mu, and read without it.
	conns        atomic.Pointer[connProbe]
	connDeadline atomic.Int64 // SetConnDeadline's, kept until conns is loaded

	mu     sync.Mutex
	closed bool
	links  map[attachment]link.Link
	final  [numCounters]uint64 // the counters as Close read them
}

// attachment is one uprobe placed: an executable file, a process (0 for
// all) and the function (probeKeyLog, probeConnRead, probeConnWrite).
type attachment struct {
	dev, ino uint64
	pid      int
	fn       int
}

// The functions probed, as attachment.fn.
const (
	probeKeyLog = iota
	probeConnRead
	probeConnWrite
)

// recentCalls is how many of the last calls Read remembers to recognise a
// call reported twice. A repeat follows its first report at once on its
// thread, and the ring buffer keeps the order records were written in, so
// only the records other threads wrote meanwhile come between. In the perf
// fallback, if the thread moved to another CPU between the two, the
// repeat can come further away: more than 64 records on, it is reported.
const recentCalls = 64

// call identifies one writeKeyLog call: crypto/tls never logs the same
// label of the same connection twice from one goroutine.
type call struct {
	pid    uint32
	g      uint64
	label  string
	random [32]byte
}

// options are Open's choices that tests make.
type options struct {
	perf bool // write to a perf event array even if the kernel has ring buffers
}

// Open loads the probe's BPF program and maps into the kernel; nothing is
// attached yet (Attach). It writes to a ring buffer of RingBufferSize bytes,
// or, on kernels without ring buffers (cilium/ebpf's features package asks
// the kernel), to a perf event array of PerfBufferSize bytes per CPU.
//
// It needs root, or CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN before Linux
// 5.8), and a kernel with BPF and a uprobe PMU. On kernels before 5.11 it
// lifts the process's RLIMIT_MEMLOCK (cilium/ebpf's rlimit.RemoveMemlock),
// which they charge BPF maps to. Errors are one line: they
// wrap ErrNotPermitted, ErrNoBPF or ErrNoUprobes when one of those is
// missing, and say which.
func Open() (*Probe, error) {
	return open(options{})
}

func open(o options) (*Probe, error) {
	if err := checkProcess("/proc/self/status", uprobePMU); err != nil {
		return nil, err
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later
	// ones to the memory cgroup, and this does nothing. If the limit
	// cannot be lifted (no CAP_SYS_RESOURCE), loading may still fit in it.
	_ = rlimit.RemoveMemlock()
	if err := features.HaveProgramType(ebpf.Kprobe); err != nil {
		return nil, bpfError("probing for kprobe programs", err)
	}
	insns, err := program(runtime.GOARCH, toRing)
	if err != nil {
		return nil, err
	}
	p := &Probe{out: toRing, links: map[attachment]link.Link{}}
	p.keys.what = "secrets"
	events := &ebpf.MapSpec{Name: "gotls_events", Type: ebpf.RingBuf, MaxEntries: RingBufferSize}
	if o.perf || features.HaveMapType(ebpf.RingBuf) != nil {
		p.out = toPerf
		events = &ebpf.MapSpec{Name: "gotls_events", Type: ebpf.PerfEventArray} // one entry per possible CPU
		if insns, err = program(runtime.GOARCH, toPerf); err != nil {
			return nil, err
		}
	}
	coll, err := ebpf.NewCollection(&ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			mapEvents:   events,
			mapCounters: countersSpec(),
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"gotls": {
				Name:         "gotls_keylog",
				Type:         ebpf.Kprobe,
				Instructions: insns,
				// GPL-compatible, as bpf_probe_read_user and
				// bpf_perf_event_output require.
				License: "Dual MIT/GPL",
			},
		},
	})
	if err != nil {
		return nil, bpfError("loading the uprobe program", err)
	}
	p.prog, p.events, p.counters = coll.DetachProgram("gotls"), coll.DetachMap(mapEvents), coll.DetachMap(mapCounters)
	coll.Close()
	if p.out == toRing {
		p.keys.ring, err = ringbuf.NewReader(p.events)
	} else {
		p.keys.perf, err = perf.NewReader(p.events, PerfBufferSize)
	}
	if err != nil {
		p.closeBPF()
		return nil, fmt.Errorf("opening the probe's buffer: %w", err)
	}
	return p, nil
}

// countersSpec is the counters map: an array of numCounters uint64s.
func countersSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: "gotls_counters", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: numCounters}
}

// bpfError names what a failed bpf(2) step lacks.
func bpfError(doing string, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%w: %s: the kernel refused (a user namespace, a seccomp profile, or kernel.unprivileged_bpf_disabled?): %v", ErrNotPermitted, doing, err)
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, syscall.ENOSYS):
		return fmt.Errorf("%w: %s: %v (CONFIG_BPF_SYSCALL, CONFIG_BPF_EVENTS)", ErrNoBPF, doing, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// Attach places the probe on the entry of writeKeyLog in the executable at
// path, found by Find, and returns where. With pid > 0 the probe fires in
// that process alone (its threads included): path must be the executable it
// runs, or a file it maps; an empty path means /proc/PID/exe, which is also
// the path to give for a process in a container (another mount namespace),
// since the kernel resolves it to the file the process runs. With pid 0 it
// fires in every process that runs the executable, now and later. Negative
// pids are refused. PIDs are those of the caller's PID namespace.
//
// The probe is an entry uprobe (perf_event_open(2) on the uprobe PMU, via
// cilium/ebpf's link.Executable.Uprobe) at the function's file offset;
// never a return probe. One executable can be attached for several pids,
// each its own uprobe; attaching the same file and pid again does nothing
// more. Attachments that overlap (pid 0 and a pid of the same file) make
// both uprobes fire for each call in that process; Read drops the repeat.
//
// Errors are those of Find, ErrUnsupportedArch for an executable of another
// architecture than this program's, os.ErrClosed after Close, and the
// kernel's.
func (p *Probe) Attach(path string, pid int) (Location, error) {
	path, err := targetPath(path, pid)
	if err != nil {
		return Location{}, err
	}
	loc, err := Find(path)
	if err != nil {
		return Location{}, err
	}
	key, err := target(loc, pid)
	if err != nil {
		return loc, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return loc, fmt.Errorf("attaching %s: %w", path, os.ErrClosed)
	}
	return loc, p.uprobe(key, loc, p.prog)
}

// targetPath returns the executable to attach to for Attach's path and
// pid: path, or /proc/PID/exe when path is "".
func targetPath(path string, pid int) (string, error) {
	switch {
	case pid < 0:
		return "", fmt.Errorf("pid %d: give a process ID, or 0 for every process of the executable", pid)
	case path == "" && pid == 0:
		return "", errors.New("no executable given, and no pid to take it from (/proc/PID/exe)")
	case path == "":
		path = "/proc/" + strconv.Itoa(pid) + "/exe"
	}
	return path, nil
}

// target checks that the executable of loc is for this architecture and,
// for pid > 0, that the process runs it (see runs), and returns its
// attachment (fn probeKeyLog).
func target(loc Location, pid int) (attachment, error) {
	path := loc.Path
	if loc.Arch != runtime.GOARCH {
		return attachment{}, fmt.Errorf("%s: %w: built for %s, and this is %s", path, ErrUnsupportedArch, loc.Arch, runtime.GOARCH)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return attachment{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return attachment{}, fmt.Errorf("%s: no device and inode", path)
	}
	if pid > 0 {
		if err := runs(pid, path, fi); err != nil {
			return attachment{}, err
		}
	}
	return attachment{dev: st.Dev, ino: st.Ino, pid: pid}, nil
}

// uprobe places prog at loc's entry for key's process, unless it is there
// already. p.mu must be held.
func (p *Probe) uprobe(key attachment, loc Location, prog *ebpf.Program) error {
	if _, ok := p.links[key]; ok {
		return nil
	}
	ex, err := link.OpenExecutable(loc.Path)
	if err != nil {
		return err
	}
	// Address is a file offset and bypasses cilium/ebpf's own symbol
	// lookup, which knows only .symtab and .dynsym.
	l, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: loc.Offset, PID: key.pid})
	if err != nil {
		return fmt.Errorf("%s: placing the uprobe at file offset %#x: %w", loc.Path, loc.Offset, err)
	}
	p.links[key] = l
	return nil
}

// runs checks that process pid runs or maps the file fi (at path): it is
// its /proc/PID/exe, or its inode is in /proc/PID/maps (inodes only: under
// overlayfs the device numbers there are the layer's). A probe on a file
// the process does not map would never fire.
func runs(pid int, path string, fi os.FileInfo) error {
	proc := "/proc/" + strconv.Itoa(pid)
	if _, err := os.Stat(proc); err != nil {
		return fmt.Errorf("pid %d: no such process", pid)
	}
	if exe, err := os.Stat(proc + "/exe"); err == nil && os.SameFile(exe, fi) {
		return nil
	}
	f, err := os.Open(proc + "/maps")
	if err != nil {
		return nil // the kernel may still allow the probe; nothing to check with
	}
	defer f.Close()
	ino := strconv.FormatUint(fi.Sys().(*syscall.Stat_t).Ino, 10)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode pathname (proc(5))
		if fields := strings.Fields(sc.Text()); len(fields) >= 5 && fields[4] == ino {
			return nil
		}
	}
	exe, _ := os.Readlink(proc + "/exe")
	return fmt.Errorf("pid %d does not run %s (it runs %s); for a process in a container give /proc/%d/exe", pid, path, exe, pid)
}

// Read blocks until the probe has a secret, and returns it. Secrets come in
// the order the kernel wrote them (in the perf fallback, in order per CPU
// only), up to 20 ms (pollInterval) after the call: the program wakes Read
// only when the ring buffer is a quarter full (the perf fallback wakes it
// for every secret), and Read looks at the buffer every 20 ms. Records that are not well-formed (see decode) are
// skipped and counted (Skipped).
//
// A call whose entry ran twice is reported once. Go's runtime restarts a
// function from its entry after growing the goroutine's stack (the
// prologue's morestack call jumps back to the entry), and the kernel
// executes the probed instruction again when a signal interrupts the
// uprobe's single step; each time the probe fires. Read drops a record with
// the process, goroutine, label and client random of one of the last 64.
//
// After Close it returns an error wrapping os.ErrClosed; past a deadline
// (SetDeadline), one wrapping os.ErrDeadlineExceeded.
func (p *Probe) Read() (Secret, error) {
	for {
		raw, err := p.keys.read()
		if err != nil {
			return Secret{}, err
		}
		s, g, err := decode(raw)
		if err != nil {
			p.bad.Add(1)
			continue
		}
		c := call{pid: s.PID, g: g, label: s.Label, random: s.ClientRandom}
		if p.seen(c) {
			p.repeats.Add(1)
			continue
		}
		return s, nil
	}
}

// pollInterval is how often Read looks at the ring buffer when the kernel
// has not woken it: the program wakes it only when the ring is filling up
// (wakeAt), so a secret can wait this long before Read returns it.
const pollInterval = 20 * time.Millisecond

// seen reports whether c is one of the recent calls, and remembers it.
func (p *Probe) seen(c call) bool {
	for _, r := range p.recent {
		if r == c {
			return true
		}
	}
	p.recent[p.next] = c
	p.next = (p.next + 1) % recentCalls
	return false
}

// SetDeadline makes a Read that is blocked, or a later one, return an error
// wrapping os.ErrDeadlineExceeded once t has passed (a blocked Read notices
// a new deadline within pollInterval, 20 ms); the zero time removes the
// deadline.
func (p *Probe) SetDeadline(t time.Time) { p.keys.setDeadline(t) }

// Lost returns how many secrets the probe saw but could not hand on because
// its buffer was full (Read did not keep up): the kernel's count, kept in
// the probe's counters map. Those connections cannot be decrypted.
func (p *Probe) Lost() uint64 { return p.counter(counterLost) }

// Skipped returns how many calls the probe skipped: arguments out of bounds
// (a label over 64 bytes, a client random of other than 32 bytes, a secret
// over 64 bytes), memory the kernel could not read, and records Read or
// ReadConn refused as malformed. Go's crypto/tls makes none of these.
func (p *Probe) Skipped() uint64 { return p.counter(counterSkipped) + p.bad.Load() }

func (p *Probe) counter(i uint32) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return p.final[i]
	}
	var v uint64
	if err := p.counters.Lookup(i, &v); err != nil {
		return 0
	}
	return v
}

// Close detaches every uprobe, interrupts Read and frees the program and
// its maps. Lost and Skipped keep their last counts. Closing twice does
// nothing.
func (p *Probe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	var errs []error
	for k, l := range p.links {
		errs = append(errs, l.Close())
		delete(p.links, k)
	}
	for i := range p.final {
		_ = p.counters.Lookup(uint32(i), &p.final[i])
	}
	p.closed = true
	errs = append(errs, p.keys.close(), p.closeBPF())
	if c := p.conns.Load(); c != nil {
		errs = append(errs, c.close())
	}
	return errors.Join(errs...)
}

func (p *Probe) closeBPF() error {
	return errors.Join(p.prog.Close(), p.events.Close(), p.counters.Close())
}
