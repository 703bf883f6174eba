// Package attach follows the watches of running processes, live and
// decrypted, with no key log and no restart (kwatch attach): the TLS
// secrets come from the processes themselves, through an eBPF uprobe on Go's
// crypto/tls (pkg/gotls), and the packets from a live capture (pkg/live) in
// each process's network namespace, kept to the processes' own connections:
// which process owns a connection comes from the kernel as it opens
// (pkg/sockowner, whose socket filter drops every other packet in the
// kernel), or, where the kernel cannot tell, from the processes' sockets in
// /proc (pkg/procnet), re-read as connections come and go. Both go through
// the path of kwatch pcap (pcap.ReadLive): decrypt, HTTP/1.1 or HTTP/2,
// gzip, watch events with their chunks or DATA frames.
package attach

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/kwatch/kwatch/pkg/gotls"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/live"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/pcapwriter"
	"github.com/kwatch/kwatch/pkg/phrase"
	"github.com/kwatch/kwatch/pkg/procnet"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/sockowner"
)

// Options say what to attach to and how to decode.
type Options struct {
	// Targets are processes by PID or by name (as pgrep -x matches).
	Targets []string
	// Exes are executables: every process of each, running now or
	// started later (the uprobe is on the file, for any process).
	Exes []string
	// Containers are containers by their ID as the container runtime
	// names it (crictl ps; a pod's status.containerStatuses[].containerID
	// without its scheme), or a unique prefix of 12 hex digits or more:
	// their Go processes now, found by their cgroup (procnet.PodOf); the
	// others are left out, and said.
	Containers []string
	// Ready, when set, is called once the processes are attached and the
	// captures open, before the first record.
	Ready func()
	// Read tunes the decoding (its Keys, WaitForKeys, Name and Owner are
	// set by Run).
	Read pcap.Options
	// Record, when set, gives the writer that receives a pcapng of the
	// packets captured and the secrets taken (Decryption Secrets Blocks),
	// so that TShark, Wireshark and kwatch pcap decrypt it with no key
	// log. It is called once, after the processes are attached to and
	// their captures open, so that a run that cannot attach leaves an
	// existing file as it was; its error ends Run.
	Record func() (io.Writer, error)
	// Notice, when set, is told what attach does and meets, one line at a
	// time, without a trailing newline: processes attached and exited.
	Notice func(line string)
	// Ports are server ports whose connections are captured from the
	// start besides DefaultPorts and those the processes are seen to use,
	// with the /proc fallback (the kernel's owners need none).
	Ports []uint16
	// RingBytes is the size of each capture's ring, in bytes
	// (live.Options.RingBytes); DefaultRingBytes when 0.
	RingBytes int
	// Rescan is how often attach looks at the processes (those that
	// exited, a replaced executable of Exes; with /proc scans, also their
	// sockets and new processes of Exes, besides when a packet of an
	// unknown connection comes); 1 s when 0.
	Rescan time.Duration
	// ProcOwners makes attach learn which process owns a connection from
	// /proc scans even where the kernel could tell (pkg/sockowner): the
	// fallback, chosen.
	ProcOwners bool
}

// Result says what a Run did.
type Result struct {
	// Stats are the live capture's, as pcap.ReadLive counts them.
	Stats *pcap.Stats
	// Processes are the processes attached to, in the order they were.
	Processes []procnet.Process
	// Secrets counts the secrets taken from the processes; Lost those
	// the kernel could not hand over (its ring buffer was full).
	Secrets, Lost uint64
	// SecretsBy counts the secrets by the process that derived them,
	// named "NAME (pid N)".
	SecretsBy map[string]uint64
	// Exited says that every process attached to exited (the run ended
	// by itself), rather than that ctx was cancelled.
	Exited bool
	// Joined counts the TLS connections whose state was read from the
	// processes' memory (those opened before attach are decrypted so).
	Joined int
	// Before counts the connections that were open when kwatch attached
	// and carried packets since: their handshakes came before (each has a
	// "process" note that says so); TLS ones are decrypted from the state
	// read from the process (Joined).
	Before int
	// OpenAtAttach counts the TCP connections the attached processes had
	// established when kwatch attached (what each one's line at attach
	// says, summed), of which Before carried packets since; 0 when not
	// counted.
	OpenAtAttach int
	// Unheld counts the secrets taken for connections the capture never
	// held (not kept: keyStore), of Secrets.
	Unheld int
}

// DefaultPorts are the ports captured whatever the processes were seen to
// use, with the /proc fallback (where the kernel tells connection owners,
// every connection of the processes is captured from its first packet,
// whatever its port): the API server's usual ones (kubeadm 6443, managed
// clusters 443, some 8443). The first packet of every connection (its SYN)
// is captured too: when a process's connection goes to another port, that
// port is captured from then on, and the packets of that connection which
// the kernel filtered out before are said to be lost.
var DefaultPorts = []uint16{443, 6443, 8443}

// DefaultRingBytes is the size of the ring of each of attach's captures
// (one per network namespace): 32 MiB, 128 blocks, which hold 1.3 s and
// more of a stream below 25 MB/s (a 10 000 events/s watch of 1 KB events
// is about 12 MB/s). Half of kwatch pcap -i's: attach's kernel filter
// keeps the processes' own connections only, and a node agent runs under
// a pod's memory limit, where all of a ring counts from the start.
const DefaultRingBytes = 32 << 20

// ErrNoTarget is wrapped by Run's error when a name matches no process.
var ErrNoTarget = errors.New("no such process")

// Run attaches to the processes of opt, decodes their watches until ctx is
// cancelled or every process attached to exited (with no Exes), and sends
// records to sink as pcap.ReadLive does. Errors (before any record): a
// target that is not running or not a Go program that links crypto/tls
// (gotls.ErrNotGo, gotls.ErrNoCryptoTLS), missing privileges
// (ErrPermission, gotls.ErrNotPermitted, live.ErrPermission), a kernel
// without uprobes (gotls.ErrNoUprobes).
func Run(ctx context.Context, opt Options, sink record.Sink) (*Result, error) {
	if opt.Rescan <= 0 {
		opt.Rescan = time.Second
	}
	if opt.RingBytes <= 0 {
		opt.RingBytes = DefaultRingBytes
	}
	if opt.Notice == nil {
		opt.Notice = func(string) {}
	}
	if err := checkPrivileges(); err != nil {
		return nil, err
	}
	procs, named, err := resolve(opt.Targets)
	if err != nil {
		return nil, err
	}
	inContainer, err := containerProcesses(opt.Containers)
	if err != nil {
		return nil, err
	}
	var notGo []string
	for _, p := range inContainer {
		if _, err := gotls.Find(p.ExePath()); err != nil {
			if procnet.Alive(p.PID) {
				notGo = append(notGo, fmt.Sprintf("%s (pid %d) of container %s: %v: left out", p.Name(), p.PID, shortID(p.Container), err))
			}
			continue
		}
		if !slices.ContainsFunc(procs, func(q procnet.Process) bool { return q.PID == p.PID }) {
			procs = append(procs, p.Process)
			named[p.PID] = true
		}
	}
	if len(opt.Containers) > 0 && len(procs) == 0 && len(opt.Targets) == 0 && len(opt.Exes) == 0 {
		return nil, fmt.Errorf("%w: no Go program in container %s (%s)", ErrNoTarget, strings.Join(opt.Containers, ", "), strings.Join(notGo, "; "))
	}
	// A process found by name that exits before kwatch attaches to it
	// (a short-lived kubectl beside the kubectl proxy of the same name)
	// is left out, and said; one given by PID is an error.
	var gone []string
	vanished := func(p procnet.Process) bool {
		if named[p.PID] && !procnet.Alive(p.PID) {
			gone = append(gone, fmt.Sprintf("%s (pid %d) exited before kwatch attached to it", p.Name(), p.PID))
			return true
		}
		return false
	}
	kept := procs[:0]
	for _, p := range procs {
		if _, err := gotls.Find(p.ExePath()); err != nil {
			if vanished(p) {
				continue
			}
			return nil, fmt.Errorf("%s (pid %d): %w", p.Name(), p.PID, err)
		}
		kept = append(kept, p)
	}
	procs = kept
	for _, exe := range opt.Exes {
		if _, err := os.Stat(exe); errors.Is(err, fs.ErrNotExist) && !strings.Contains(exe, "/") {
			if path, err := exec.LookPath(exe); err == nil {
				return nil, fmt.Errorf("--exe %s: no such file here; --exe takes the executable's path (the one on PATH: --exe %s), and a running process is named without it (kwatch attach %s)", exe, path, exe)
			}
			return nil, fmt.Errorf("--exe %s: no such file; --exe takes the executable's path, and a running process is named without it (kwatch attach %s)", exe, exe)
		}
		if _, err := gotls.Find(exe); err != nil {
			return nil, err
		}
	}
	probe, err := gotls.Open()
	if err != nil {
		return nil, err
	}
	defer probe.Close()
	a := &attacher{opt: opt, probe: probe, names: map[uint32]string{}, secretsBy: map[string]uint64{}, attached: map[int]bool{}, scanGap: minScanGap, exeFiles: map[string]string{}}
	a.keys = keyStore(a.admitted)
	j := newJoiner(a)
	a.joiner = j
	// What was attached is said once the captures are open too: from
	// then on, a connection is seen from its first packet.
	var attached []string
	if line := a.openOwners(); line != "" {
		attached = append(attached, line)
	}
	if a.owners != nil {
		defer a.owners.Close()
	}
	for _, exe := range opt.Exes {
		loc, err := probe.Attach(exe, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", exe, err)
		}
		a.exeFiles[exe] = fileID(exe)
		if a.owners != nil {
			if err := a.owners.FollowExe(exe); err != nil {
				return nil, err
			}
		}
		attached = append(attached, fmt.Sprintf("attached to every process of %s, now and later (crypto/tls found by %s)", exe, loc.Method))
		running, _ := procnet.ByExe(exe)
		for _, p := range running {
			if p.PID != os.Getpid() && !a.attached[p.PID] {
				a.remember(p)
				attached = append(attached, fmt.Sprintf("%s (pid %d) runs it already: followed", p.Name(), p.PID))
				if line := j.watch(p); line != "" {
					attached = append(attached, line)
				}
			}
		}
	}
	for _, p := range procs {
		line, err := a.attach(p)
		if err != nil {
			if vanished(p) {
				continue
			}
			return nil, err
		}
		attached = append(attached, line)
		if line := j.watch(p); line != "" {
			attached = append(attached, line)
		}
	}
	if len(opt.Targets)+len(opt.Containers) > 0 && len(a.procs) == 0 && len(opt.Exes) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoTarget, strings.Join(gone, "; "))
	}
	attached = append(attached, gone...)
	attached = append(attached, notGo...)
	if err := a.openCaptures(); err != nil {
		return nil, err
	}
	defer a.closeCaptures()
	for _, line := range attached {
		opt.Notice(line)
	}
	if opt.Ready != nil {
		opt.Ready()
	}
	// Only the attached processes' packets are recorded.
	a.merged = live.Merge(a.captures()...)
	var src live.Source = &tracked{a: a, src: a.merged}
	if opt.Record != nil {
		out, err := opt.Record()
		if err != nil {
			return nil, fmt.Errorf("--record: %w", err)
		}
		w, err := pcapwriter.NewNgPackets(out, layers.LinkTypeRaw, live.SnapLen)
		if err != nil {
			return nil, fmt.Errorf("--record: %w", err)
		}
		a.rec = live.Record(src, w)
		src = a.rec
	}
	var wg sync.WaitGroup
	wg.Go(a.readSecrets)
	wg.Go(j.run)
	ro := opt.Read
	ro.Keys, ro.WaitForKeys, ro.Owner = a.keys, true, a.owner
	ro.HTTP.Joins, ro.Detach = true, true
	// Secrets come some milliseconds after the handshake (gotls reads
	// its ring buffer every 20 ms): a direction holds up to 4 MiB while
	// waiting (a large LIST at 10 000 events/s sends 64 KiB in 6 ms).
	ro.HTTP.MaxWaitBytes = attachMaxWait
	ro.HTTP.KeySource = "the processes attached (a handshake of another process, or a secret the kernel's ring buffer lost)"
	ro.HTTP.Missed = "TLS records of a connection whose handshake came before kwatch attached: encrypted, not decoded"
	if ro.Name == "" {
		ro.Name = "attach"
	}
	stats := pcap.ReadLive(ctx, src, ro, sink)
	_ = probe.Close() // ends readSecrets
	wg.Wait()
	if a.rec != nil {
		if err := a.rec.Close(); err != nil {
			opt.Notice(fmt.Sprintf("--record: %v", err))
		}
	}
	a.mu.Lock()
	by := maps.Clone(a.secretsBy)
	a.mu.Unlock()
	waiting, _, forgotten := a.keys.StageStats()
	res := &Result{Stats: stats, Processes: a.order, Secrets: a.secrets.Load(), SecretsBy: by, Lost: probe.Lost(), Exited: a.exited, Before: a.before, OpenAtAttach: j.openAtAttach(), Joined: j.count(),
		Unheld: waiting + forgotten}
	return res, nil
}

// keyStore returns the key store of a Run. The uprobe gives the secrets
// of every handshake of the processes, those of connections the capture
// never holds too (another network namespace's, a port the kernel filter
// leaves out, or made-up client randoms of a process that calls
// writeKeyLog itself): they wait, bounded (keylog.StageOptions: 16 Ki
// lines, 30 s), for the capture's TLS follower to ask for their client
// random, and only then enter the store and are given to admitted (each
// line, and each joined connection's state line, as it enters). What
// enters is bounded in turn by maxKeyLines.
func keyStore(admitted func(line []byte)) *keylog.Log {
	l := keylog.New()
	l.SetMaxLines(maxKeyLines)
	l.SetStaging(keylog.StageOptions{Admitted: admitted})
	return l
}

// admitted writes a secret that entered the key store to the recording
// (--record), as a Decryption Secrets Block ahead of the packets still
// held (live.RecordLag): the recording holds the secrets of the
// connections it holds, and no other.
func (a *attacher) admitted(line []byte) {
	if a.rec == nil {
		return
	}
	if line[len(line)-1] != '\n' {
		line = append(line[:len(line):len(line)], '\n')
	}
	_ = a.rec.Secrets(line)
}

// maxKeyLines bounds the secrets kept for connections the capture held
// (keylog.Log.SetMaxLines): 32 Ki lines, the handshakes of 8 Ki TLS 1.3
// connections seen from one side, about 13 MiB; the oldest are forgotten
// first. A connection's TLS follower derives its keys from them once, at
// its handshake.
const maxKeyLines = 1 << 15

// resolve finds the processes of targets: PIDs, or names (each must match
// at least one process); named holds the PIDs found by name.
func resolve(targets []string) (out []procnet.Process, named map[int]bool, err error) {
	seen := map[int]bool{}
	named = map[int]bool{}
	for _, t := range targets {
		var ps []procnet.Process
		if pid, err := strconv.Atoi(t); err == nil {
			p, err := procnet.Get(pid)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: pid %d", ErrNoTarget, pid)
			}
			ps = []procnet.Process{p}
		} else {
			found, err := procnet.ByName(t, os.Getpid())
			if err != nil {
				return nil, nil, err
			}
			if len(found) == 0 {
				return nil, nil, fmt.Errorf("%w named %s (as pgrep -x %s finds them)", ErrNoTarget, t, t)
			}
			ps = found
			for _, p := range found {
				named[p.PID] = true
			}
		}
		for _, p := range ps {
			if !seen[p.PID] {
				seen[p.PID] = true
				out = append(out, p)
			}
		}
	}
	return out, named, nil
}

// containerProcess is a process of a container given (Options.Containers).
type containerProcess struct {
	procnet.Process
	Container string
}

// containerProcesses returns the processes whose cgroup is one of the
// containers' (IDs, or prefixes of 12 hex digits or more), kwatch itself
// left out; a container with none is an error wrapping ErrNoTarget.
func containerProcesses(ids []string) ([]containerProcess, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	for _, id := range ids {
		if len(id) < 12 {
			return nil, fmt.Errorf("container ID %q: give 12 hex digits or more (crictl ps shows 13)", id)
		}
	}
	all, err := procnet.All()
	if err != nil {
		return nil, err
	}
	var out []containerProcess
	found := map[string]bool{}
	for _, p := range all {
		if p.PID == os.Getpid() {
			continue
		}
		pod, err := procnet.PodOf(p.PID)
		if err != nil || pod.Container == "" {
			continue
		}
		for _, id := range ids {
			if strings.HasPrefix(pod.Container, id) {
				found[id] = true
				out = append(out, containerProcess{p, pod.Container})
				break
			}
		}
	}
	for _, id := range ids {
		if !found[id] {
			return nil, fmt.Errorf("%w in container %s (no process's cgroup names it on this node)", ErrNoTarget, shortID(id))
		}
	}
	return out, nil
}

// shortID is a container ID as crictl ps shows it: its first 13 hex
// digits.
func shortID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

// attacher is one Run's state.
type attacher struct {
	opt   Options
	probe *gotls.Probe
	keys  *keylog.Log
	rec   *live.Recording
	// merged reads the captures, those opened later too (Add).
	merged *live.Merged

	// owners is the kernel's account of which process owns each
	// connection (pkg/sockowner); nil where /proc scans stand in for it.
	owners *sockowner.Source
	// byPID holds the processes attached to, by PID; listeners their
	// listening ports (kernel mode); peers the processes of this node
	// that connected to them, and pods the pods of attached processes,
	// by PID (read once each).
	byPID     map[int]procnet.Process
	listeners map[portAt]listener
	peers     map[int]peerEnd
	pods      map[int]procnet.Pod
	// seeded says that the first scan's sockets are in the kernel's maps:
	// from then on no socket table is read (kernel mode).
	seeded bool

	// mu guards names, which readSecrets reads, and newPIDs.
	mu    sync.Mutex
	names map[uint32]string
	// secretsBy counts the secrets by process name (Result.SecretsBy).
	secretsBy map[string]uint64
	newPIDs   []uint32 // PIDs that gave secrets and are not attached (Exes)
	secrets   atomic.Uint64
	attached  map[int]bool
	// joiner reads the state of connections opened before attach.
	joiner *joiner
	// exeFiles holds, by Exes path, the file the uprobe is on (its device
	// and inode: fileID), to see when the path is replaced (a rebuild).
	exeFiles map[string]string
	order    []procnet.Process
	procs    []procnet.Process // attached and still running
	exited   bool

	// The reader goroutine's own (tracked.ReadPacket, owner):
	caps     map[uint64]*live.Capture // by network namespace inode
	nsOf     map[int]uint64           // PID → its network namespace
	socks    map[uint64]*sockets      // by network namespace
	verdicts map[tuple]verdict
	lastScan time.Time
	scanGap  time.Duration // minScanGap (tests change it)
	// open holds the connections open when kwatch attached (the first
	// scan), true once one carried a packet; before counts those.
	open   map[tuple]bool
	before int
	// filtered is the ports the kernel filters keep (sorted); learned the
	// server ports of the processes' connections seen from their SYN.
	filtered []uint16
	learned  []uint16
}

// attach puts the uprobe on process p and remembers it; it returns the
// line that says so.
func (a *attacher) attach(p procnet.Process) (string, error) {
	loc, err := a.probe.Attach(p.ExePath(), p.PID)
	if err != nil {
		return "", fmt.Errorf("%s (pid %d): %w", p.Name(), p.PID, err)
	}
	a.remember(p)
	return fmt.Sprintf("attached to %s (pid %d, %s): crypto/tls found by %s", p.Name(), p.PID, procnet.Shown(p.Exe), loc.Method), nil
}

// remember adds p to the processes followed (and to the kernel's).
func (a *attacher) remember(p procnet.Process) {
	a.attached[p.PID] = true
	a.order = append(a.order, p)
	a.procs = append(a.procs, p)
	if a.byPID == nil {
		a.byPID = map[int]procnet.Process{}
	}
	a.byPID[p.PID] = p
	if a.owners != nil {
		if err := a.owners.Follow(p.PID); err != nil {
			a.opt.Notice(err.Error())
		}
	}
	a.mu.Lock()
	a.names[uint32(p.PID)] = fmt.Sprintf("%s (pid %d)", p.Name(), p.PID)
	a.mu.Unlock()
}

// readSecrets hands each secret the uprobe takes to the key store and the
// recording, until the probe is closed.
func (a *attacher) readSecrets() {
	for {
		s, err := a.probe.Read()
		if err != nil {
			return
		}
		line := s.KeyLogLine()
		a.mu.Lock()
		name, ok := a.names[s.PID]
		if !ok {
			// A process of an --exe that started since the last scan.
			name = fmt.Sprintf("pid %d", s.PID)
			if p, err := procnet.Get(int(s.PID)); err == nil {
				name = fmt.Sprintf("%s (pid %d)", p.Name(), p.PID)
			}
			a.names[s.PID] = name
			if len(a.newPIDs) < 64 {
				a.newPIDs = append(a.newPIDs, s.PID)
			}
		}
		a.mu.Unlock()
		// Kept for a connection the capture holds: see attacher.keyStore.
		a.keys.Stage(line, "the uprobe on "+name)
		a.secrets.Add(1)
		a.mu.Lock()
		if len(a.secretsBy) < 1024 {
			a.secretsBy[name]++
		}
		a.mu.Unlock()
	}
}

// openCaptures opens a capture in the network namespace of every process
// (kwatch's own when there is none yet), filtered in the kernel: by the
// kernel's socket filter (kernel mode), which the first scan's sockets
// are put in the maps of, or to the sockets' ports.
func (a *attacher) openCaptures() error {
	a.caps, a.nsOf, a.socks, a.verdicts = map[uint64]*live.Capture{}, map[int]uint64{}, map[uint64]*sockets{}, map[tuple]verdict{}
	a.listeners, a.peers, a.pods = map[portAt]listener{}, map[int]peerEnd{}, map[int]procnet.Pod{}
	if a.byPID == nil {
		a.byPID = map[int]procnet.Process{}
	}
	if len(a.procs) == 0 {
		a.seeded = a.owners != nil
		_, ino, err := procnet.NetNS(os.Getpid())
		if err != nil {
			return err
		}
		return a.openCapture("", ino)
	}
	for _, p := range a.procs {
		if err := a.netns(p); err != nil {
			return err
		}
	}
	if err := a.scan(); err != nil {
		return err
	}
	a.open = map[tuple]bool{}
	for _, s := range a.socks {
		for c := range s.conns {
			if len(a.open) < maxVerdicts {
				a.open[newTuple(c[0], c[1])] = false
			}
		}
	}
	if a.owners != nil {
		a.seed()
		a.seeded = true
		clear(a.socks) // read once: from now on the kernel tells
	}
	return nil
}

// netns opens the capture of process p's network namespace if there is
// none yet.
func (a *attacher) netns(p procnet.Process) error {
	path, ino, err := procnet.NetNS(p.PID)
	if err != nil {
		return fmt.Errorf("%s (pid %d): %w", p.Name(), p.PID, err)
	}
	a.nsOf[p.PID] = ino
	if _, ok := a.caps[ino]; ok {
		return nil
	}
	if _, self, err := procnet.NetNS(os.Getpid()); err == nil && self == ino {
		path = "" // kwatch's own: no thread need switch
	}
	return a.openCapture(path, ino)
}

func (a *attacher) openCapture(path string, ino uint64) error {
	var c *live.Capture
	var err error
	if a.owners != nil {
		c, err = a.kernelCapture(path, ino)
	} else {
		c, err = live.Open(live.Options{NetNS: path, RingBytes: a.opt.RingBytes})
	}
	if err != nil {
		return err
	}
	a.caps[ino] = c
	if a.merged != nil {
		// A namespace met once packets flow: its capture is read too,
		// filtered as the others from the next scan on.
		a.merged.Add(c)
		a.filtered = nil
	}
	return nil
}

func (a *attacher) captures() []*live.Capture {
	keys := make([]uint64, 0, len(a.caps))
	for k := range a.caps {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	out := make([]*live.Capture, 0, len(keys))
	for _, k := range keys {
		out = append(out, a.caps[k])
	}
	return out
}

func (a *attacher) closeCaptures() {
	for _, c := range a.caps {
		c.Close()
	}
}

// scan re-reads the sockets of every process followed, looks for new
// processes (of Exes, or that gave secrets), notes those that exited, and
// sets each capture's kernel filter. Once the kernel tells the owners
// (seeded), it reads no socket: light.
//
// It returns the first error of reading a process's sockets (said as a
// notice too, but for the first scan, whose error ends the run).
func (a *attacher) scan() error {
	if a.seeded {
		a.light()
		return nil
	}
	a.lastScan = time.Now()
	a.findNew()
	byNS := map[uint64][]procnet.Process{}
	alive := a.procs[:0]
	for _, p := range a.procs {
		if !procnet.Alive(p.PID) {
			a.opt.Notice(fmt.Sprintf("%s (pid %d) exited", p.Name(), p.PID))
			continue
		}
		alive = append(alive, p)
		byNS[a.nsOf[p.PID]] = append(byNS[a.nsOf[p.PID]], p)
	}
	a.procs = alive
	ports := slices.Concat(DefaultPorts, a.opt.Ports, a.learned)
	var first error
	for ino := range a.caps {
		s, err := index(byNS[ino])
		if err != nil {
			if first == nil && a.socks[ino] != nil {
				a.opt.Notice(err.Error())
			}
			first = cmp.Or(first, err)
		}
		a.socks[ino] = s
		ports = append(ports, s.ports...)
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	if a.owners != nil || slices.Equal(ports, a.filtered) {
		return first // the kernel's socket filter needs no ports
	}
	a.filtered = ports
	f := live.Filter{Ports: ports, SYN: true}
	if len(ports) > live.MaxPorts {
		f = live.Filter{} // every TCP segment
	}
	for _, c := range a.caps {
		if c == nil {
			continue // a namespace followed without a capture (tests)
		}
		if err := c.SetFilter(f); err != nil {
			a.opt.Notice(fmt.Sprintf("capture filter: %v", err))
		}
	}
	return first
}

// filters says whether the kernel filter keeps the segments of port.
func (a *attacher) filters(port uint16) bool {
	_, ok := slices.BinarySearch(a.filtered, port)
	return ok || len(a.filtered) > live.MaxPorts
}

// findNew attaches to the processes of Exes started since the last scan,
// and remembers those of them that gave secrets already.
func (a *attacher) findNew() {
	var found []procnet.Process
	for _, exe := range a.opt.Exes {
		if id := fileID(exe); id != "" && id != a.exeFiles[exe] {
			// Rebuilt or replaced: the uprobe is on the old file.
			if _, err := a.probe.Attach(exe, 0); err != nil {
				a.opt.Notice(fmt.Sprintf("%s was replaced, and its new file cannot be attached to: %v", exe, err))
			} else {
				a.opt.Notice(fmt.Sprintf("%s was replaced: attached to the new file too", exe))
			}
			if a.owners != nil {
				if err := a.owners.FollowExe(exe); err != nil {
					a.opt.Notice(err.Error())
				}
			}
			a.exeFiles[exe] = id
		}
		if a.owners != nil {
			continue // the kernel finds its processes at their first connection
		}
		ps, err := procnet.ByExe(exe)
		if err == nil {
			found = append(found, ps...)
		}
	}
	a.mu.Lock()
	pids := a.newPIDs
	a.newPIDs = nil
	a.mu.Unlock()
	for _, pid := range pids {
		if p, err := procnet.Get(int(pid)); err == nil {
			found = append(found, p)
		}
	}
	for _, p := range found {
		if a.attached[p.PID] {
			continue
		}
		// The uprobe on the file covers it already.
		a.remember(p)
		a.opt.Notice(fmt.Sprintf("%s (pid %d) started: followed", p.Name(), p.PID))
		if err := a.netns(p); err != nil {
			a.opt.Notice(err.Error())
		}
	}
}

// decide returns what is known of the connection between src and dst,
// and whether it is decided. A connection is the processes' when their
// sockets show it; it is other processes' once a scan made after its packet
// was captured (at) did not find it. Scans for unknown connections come at
// most every minScanGap, so that a flood of other processes' connections
// costs a bounded number of them: until the next one, a connection not
// known is not decided (tracked holds its packets).
func (a *attacher) decide(src, dst netip.AddrPort, syn bool, at time.Time) (verdict, bool) {
	if a.owners != nil {
		return a.decideKernel(src, dst), true
	}
	t := newTuple(src, dst)
	if v, ok := a.verdicts[t]; ok && !(syn && len(v.ends) == 0) {
		return v, true
	}
	v := a.lookup(src, dst)
	if len(v.ends) == 0 && !a.lastScan.After(at) {
		// At most one scan every scanGap: each reads the namespace's
		// whole socket table (about 5 ms here), and a busy machine opens
		// many connections of other processes (bench/RESULTS.md).
		if time.Since(a.lastScan) < a.scanGap {
			return v, false
		}
		a.scan()
		v = a.lookup(src, dst)
	}
	if _, ok := a.open[t]; ok && len(v.ends) > 0 {
		v.before = true
	}
	if len(a.verdicts) >= maxVerdicts {
		clear(a.verdicts)
	}
	a.verdicts[t] = v
	if syn && len(v.ends) > 0 && !a.filters(src.Port()) && !a.filters(dst.Port()) {
		// A connection to a port the kernel filter leaves out: its
		// SYN came through (Filter.SYN), what follows did not.
		a.learned = append(a.learned, dst.Port())
		a.opt.Notice(fmt.Sprintf("%s connects to port %d, which was not captured: the packets of %s -> %s after its SYN may be lost (--port %d captures it from the start); port %d is captured from now on",
			v.ends[0].proc.Name(), dst.Port(), src, dst, dst.Port(), dst.Port()))
		a.scan()
	}
	return v, true
}

func (a *attacher) lookup(src, dst netip.AddrPort) verdict {
	var v verdict
	for _, s := range a.socks {
		v.ends = append(v.ends, s.ends(src, dst)...)
	}
	return v
}

// owner is pcap.Options.Owner: the attached processes at a connection's
// ends, and the client of an attached server when the kernel (or the
// first scan) named it, with their pods; written to the recording
// (--record) as a process line (keylog.ProcessLine).
func (a *attacher) owner(client, server netip.AddrPort) (string, []record.ConnProcess) {
	t := newTuple(client, server)
	v, ok := a.verdicts[t]
	if !ok {
		return "", nil
	}
	if v.before && !a.open[t] {
		// Counted once it carries bytes: when it gets its note.
		a.open[t] = true
		a.before++
		a.joiner.carriedBytes(t)
	}
	if a.pods != nil {
		v.ends = slices.Clone(v.ends)
		for i := range v.ends {
			v.ends[i].pod = a.podOf(v.ends[i].proc.PID)
		}
	}
	msg, procs := describe(v, client)
	if a.rec != nil && msg != "" {
		// The recording names them too, ahead of the connection's
		// packets still held, for kwatch pcap to read back.
		_ = a.rec.Secrets(keylog.ProcessLine(keylog.Processes{Client: client, Server: server, Message: msg, Processes: procs}))
	}
	return msg, procs
}

// tracked is the Source ReadLive reads: the captures' packets of the
// attached processes' connections only.
type tracked struct {
	a   *attacher
	src live.Source
	// held are packets of connections not decided yet, in the order
	// captured (copies), heldBytes their size; ready those of them found
	// to be the processes', to be returned first.
	held      []heldPacket
	heldBytes int
	undecided map[tuple]bool
	ready     []heldPacket
	cur       heldPacket // the ready packet returned last
	// closing are the packets of connections that end, waiting closeLag
	// from their arrival; ending counts them by connection, whose later
	// packets wait behind them.
	closing      []heldPacket
	closingBytes int
	ending       map[tuple]int
}

type heldPacket struct {
	data     []byte
	ci       gopacket.CaptureInfo
	src, dst netip.AddrPort
	syn      bool
	at       time.Time // when it came (closing)
}

// closeLag is how long the packets that end a connection of the
// processes (FIN, RST), and those of it after them, wait before they are
// handed on. A process's secrets come a little after the packets that need
// them (the probe's buffer is read every 20 ms, the capture's blocks handed
// over every 10 ms), and a connection that ends with records still waiting
// for keys is given up: of 1 ms connections, 500 a second, one in ten was
// "no TLS key" without this (measured on the hostile-input trial).
const closeLag = 200 * time.Millisecond

// maxClosing bounds the bytes of the packets waiting so; past it the
// oldest are handed on at once.
const maxClosing = 4 << 20

// ends reports whether the TCP segment p (a raw IP packet that
// packetTuple read) has FIN or RST set.
func ends(p []byte) bool {
	off := 40
	if p[0]>>4 == 4 {
		off = int(p[0]&0x0f) * 4
	}
	return p[off+13]&0x05 != 0
}

// pass queues p, a packet of the processes' connection tp, for closeLag
// when it ends the connection or follows such a packet; it reports
// whether it did (else p is handed on now).
func (t *tracked) pass(tp tuple, p heldPacket) bool {
	if t.ending[tp] == 0 && !ends(p.data) {
		return false
	}
	if t.ending == nil {
		t.ending = map[tuple]int{}
	}
	t.ending[tp]++
	p.data = append([]byte(nil), p.data...) // the capture's until its next read
	if p.at.IsZero() {
		p.at = time.Now()
	}
	t.closing = append(t.closing, p)
	t.closingBytes += len(p.data)
	return true
}

// nextClosing returns the first packet of closing once it is due (or at
// once, with all), removing it.
func (t *tracked) nextClosing(all bool) (heldPacket, bool) {
	if len(t.closing) == 0 || !all && time.Since(t.closing[0].at) < closeLag && t.closingBytes <= maxClosing {
		return heldPacket{}, false
	}
	p := t.closing[0]
	t.closing[0] = heldPacket{}
	t.closing = t.closing[1:]
	t.closingBytes -= len(p.data)
	tp := newTuple(p.src, p.dst)
	if t.ending[tp]--; t.ending[tp] <= 0 {
		delete(t.ending, tp)
	}
	return p, true
}

// attachMaxWait is what a TLS direction holds while it waits for secrets
// from the process (tlsconn.Options.MaxWaitBytes), bytes.
const attachMaxWait = 4 << 20

// Bounds of tracked.
const (
	// minScanGap is the least time between two scans made for packets of
	// connections not known yet (decide).
	minScanGap = 20 * time.Millisecond
	// maxHeldBytes bounds the packets held while their connections are
	// not decided; past it the oldest are dropped.
	maxHeldBytes = 4 << 20
	// idleAfter is how long tracked.ReadPacket goes on past packets of
	// other processes' connections before it returns an idle turn:
	// ReadLive looks at its context (Ctrl-C) and at the time (data behind
	// a lost segment, records waiting for keys) only when ReadPacket
	// returns, and the captures' filters keep other processes' packets
	// too (the default ports, every SYN).
	idleAfter = 100 * time.Millisecond
)

// ReadPacket returns the next packet of a connection of an attached
// process, or no packet (an idle turn, with the time now) when none came
// for idleAfter; io.EOF once every process attached to exited (and no Exes
// may start more).
func (t *tracked) ReadPacket() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	a := t.a
	start := time.Now()
	for {
		if len(t.ready) > 0 {
			t.cur, t.ready = t.ready[0], t.ready[1:]
			return t.cur.data, t.cur.ci, layers.LinkTypeRaw, nil
		}
		if p, ok := t.nextClosing(false); ok {
			t.cur = p
			return p.data, p.ci, layers.LinkTypeRaw, nil
		}
		if len(t.held) > 0 && time.Since(a.lastScan) >= a.scanGap {
			t.release()
			continue
		}
		if time.Since(a.lastScan) >= a.opt.Rescan {
			a.scan()
		}
		// Looked at after every scan, including those decide makes for
		// a new connection: when they come faster than Rescan (SYNs of
		// other processes), the periodic scan never comes.
		if len(a.procs) == 0 && len(a.opt.Exes) == 0 {
			// The packets that wait go first: they are the ends of
			// the connections.
			if p, ok := t.nextClosing(true); ok {
				t.cur = p
				return p.data, p.ci, layers.LinkTypeRaw, nil
			}
			a.exited = true
			return nil, gopacket.CaptureInfo{}, layers.LinkTypeRaw, io.EOF
		}
		data, ci, link, err := t.src.ReadPacket()
		if err != nil || data == nil {
			return data, ci, link, err
		}
		src, dst, syn, ok := packetTuple(data)
		if !ok {
			continue
		}
		if t.undecided[newTuple(src, dst)] {
			t.hold(data, ci, src, dst, syn) // behind its connection's first
			continue
		}
		v, decided := a.decide(src, dst, syn, ci.Timestamp)
		switch {
		case !decided:
			t.hold(data, ci, src, dst, syn)
			continue
		case len(v.ends) > 0:
			if t.pass(newTuple(src, dst), heldPacket{data: data, ci: ci, src: src, dst: dst}) {
				continue
			}
			return data, ci, link, nil
		}
		if now := time.Now(); now.Sub(start) >= idleAfter {
			return nil, gopacket.CaptureInfo{Timestamp: now}, layers.LinkTypeRaw, nil
		}
	}
}

// Dropped is the packets the kernel dropped of the captures read, for
// ReadLive's "packets dropped by the kernel" problem.
func (t *tracked) Dropped() uint64 {
	if d, ok := t.src.(interface{ Dropped() uint64 }); ok {
		return d.Dropped()
	}
	return 0
}

// hold keeps a copy of a packet whose connection is not decided yet.
func (t *tracked) hold(data []byte, ci gopacket.CaptureInfo, src, dst netip.AddrPort, syn bool) {
	if t.undecided == nil {
		t.undecided = map[tuple]bool{}
	}
	t.undecided[newTuple(src, dst)] = true
	t.held = append(t.held, heldPacket{data: append([]byte(nil), data...), ci: ci, src: src, dst: dst, syn: syn})
	t.heldBytes += len(data)
	for t.heldBytes > maxHeldBytes && len(t.held) > 0 {
		t.heldBytes -= len(t.held[0].data)
		t.held = t.held[1:]
	}
}

// release scans, decides the held packets' connections (every one of them
// now, since the scan came after them) and queues those of the processes.
func (t *tracked) release() {
	t.a.scan()
	for _, p := range t.held {
		if v, _ := t.a.decide(p.src, p.dst, p.syn, p.ci.Timestamp); len(v.ends) > 0 && !t.pass(newTuple(p.src, p.dst), p) {
			t.ready = append(t.ready, p)
		}
	}
	t.held, t.heldBytes = nil, 0
	clear(t.undecided)
}

// Describe sums up a Result for the end of a run: "8 TLS secrets taken:
// 4 from kubectl (pid 31), 4 from kubectl (pid 40)".
func (r *Result) Describe() string {
	var by []string
	for name, n := range r.SecretsBy {
		by = append(by, fmt.Sprintf("%d from %s", n, name))
	}
	slices.Sort(by)
	s := fmt.Sprintf("%s taken", phrase.Count(int(r.Secrets), "TLS secret", "TLS secrets"))
	if len(by) > 0 {
		s += ": " + strings.Join(by, ", ")
	}
	if len(r.Processes) == 0 {
		s += "; no process attached"
	}
	if r.Unheld > 0 {
		s += fmt.Sprintf("; %d of them for connections not captured, not kept", r.Unheld)
	}
	if r.Lost > 0 {
		s += fmt.Sprintf("; %d lost (the kernel's ring buffer was full)", r.Lost)
	}
	if r.Joined > 0 {
		s += "; the state of " + phrase.Count(r.Joined, "TLS connection", "TLS connections") + " read from the processes' memory"
	}
	switch {
	case r.OpenAtAttach == 1 && r.Before == 1:
		s += "; the TCP connection open at attach carried packets since"
	case r.OpenAtAttach == 1 && r.Before == 0:
		s += "; the TCP connection open at attach carried no packet since"
	case r.OpenAtAttach > 0:
		s += fmt.Sprintf("; %d of the %d TCP connections open at attach carried packets since", r.Before, r.OpenAtAttach)
	case r.Before > 0:
		s += "; " + phrase.Count(r.Before, "TCP connection", "TCP connections") + " open at attach carried packets since"
	}
	return s
}

// fileID names the file at path by its device and inode, "" when it
// cannot be read.
func fileID(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	}
	return ""
}
