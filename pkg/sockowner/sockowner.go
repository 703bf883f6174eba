// Package sockowner tells, from the kernel, which process owns each TCP
// connection: the pid, command name, network namespace and four-tuple of a
// connection as it opens (the client side in the connecting process's
// context, before its SYN leaves; the server side as its handshake to a
// listening socket completes, owned by the listening process) and as it
// closes, for the processes it follows: by process (Follow) or by
// executable file (FollowExe: processes started later included, each found
// at its first connection or listen). It also names the client of a
// followed server when that client is a process on this node (Peer),
// followed or not.
//
// The filtering is done in the kernel, in BPF maps the programs share: the
// followed processes (by tgid), their executables, their listening ports,
// and the connections they own, each direction by four-tuple and network
// namespace. A connection of another process costs a map lookup or two in
// the kernel and nothing in user space. The same maps drive the socket
// filter a packet capture runs (Source.Filter): it keeps the packets of
// the followed processes' connections, from the SYN on, and of connections
// to their listening ports, and drops every other packet in the kernel.
//
// The programs (written with cilium/ebpf's asm package: no C compiler) are
// a cgroup sock_ops program, attached to the root of the cgroup v2
// hierarchy, whose BPF_SOCK_OPS_TCP_CONNECT_CB runs inside tcp_connect in
// the connecting process's context once the source port is chosen, and
// the raw tracepoint inet_sock_set_state for closes. Neither needs tracefs,
// kprobes or BPF trampolines: fentry on tcp_connect would serve as well,
// but some kernels refuse trampolines (Linux 6.18 as built for this
// project's test machines answers EPERM, and has no kprobes). The struct
// offsets they read (struct sock_common: addresses, ports, family,
// network namespace; inet_sock's source port; the current task's
// executable) come from the running kernel's BTF (/sys/kernel/btf/vmlinux)
// at load time. Open says in its error what the kernel lacks (no BTF, no
// cgroup BPF, no ring buffer, not permitted, a PID or cgroup namespace of
// its own); the caller then learns owners from /proc instead
// (pkg/procnet).
package sockowner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// RingBufferSize is the size of the ring buffer the events wait in until
// Next takes them, in bytes: 256 KiB, about 3,200 events (80 bytes each,
// plus the ring's 8-byte header). An event that finds it full is dropped
// and counted (Lost); the connections map still holds its connection
// (Lookup).
const RingBufferSize = 256 << 10

// Bounds of the maps, in entries.
const (
	// MaxConns bounds the connections map: 32,768 directions, 16,384
	// connections of the followed processes at once (each 40-byte key
	// and 16-byte value). A connection that finds it full is counted
	// (Full) and its packets are not kept.
	MaxConns = 32 << 10
	// MaxPorts bounds the listening ports map (each twice: in its
	// namespace and in any).
	MaxPorts = 4096
	// MaxPIDs bounds the followed processes.
	MaxPIDs = 16 << 10
	// MaxExes bounds the executables followed.
	MaxExes = 256
)

// Grace is how long after a connection closed (TCP_CLOSE) the socket
// filter still keeps its packets: on loopback the last ACK is received
// after the sender's state changed, and a retransmitted FIN may come in
// TIME_WAIT. Sweep forgets the connections closed longer ago.
const Grace = 2 * time.Second

// ErrUnsupported is wrapped by Open's error when the kernel lacks what the
// programs need; the message says what.
var ErrUnsupported = errors.New("the kernel cannot report connection owners")

// ErrNotPermitted is wrapped by Open's error when this process may not
// load or attach the programs.
var ErrNotPermitted = errors.New("not permitted to load BPF tracing programs")

// Source is the loaded programs and their maps. Its methods may be called
// from several goroutines, but Next and Read from one at a time.
type Source struct {
	o        *offsets
	progs    []*ebpf.Program
	links    []link.Link
	events   *ebpf.Map
	conns    *ebpf.Map
	ports    *ebpf.Map
	pids     *ebpf.Map
	exes     *ebpf.Map
	config   *ebpf.Map
	counters *ebpf.Map
	ring     *ringbuf.Reader
	rec      ringbuf.Record
	bad      atomic.Uint64

	mu      sync.Mutex
	closed  bool
	filters []*ebpf.Program
}

// Open loads the programs and maps into the kernel and attaches the
// programs; nothing is followed yet (Follow, FollowExe). The sock_ops
// program is attached to the root of the cgroup v2 hierarchy, so that it
// sees every TCP socket: where cgroup2 is mounted (/proc/self/mountinfo),
// or, on a machine with cgroup v1 only, on a cgroup2 mount of its own that
// Open makes in a temporary folder and removes once the program is
// attached (the BPF link holds the cgroup). It needs root (CAP_SYS_ADMIN,
// CAP_BPF, CAP_PERFMON), kernel BTF, cgroup BPF (CONFIG_CGROUP_BPF), ring
// buffers (Linux 5.8) and bpf_get_current_pid_tgid in sock_ops programs
// (6.10). Errors wrap ErrUnsupported or ErrNotPermitted, in one line.
func Open() (*Source, error) {
	if err := initialNamespaces("/proc/self/ns"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	_ = rlimit.RemoveMemlock() // kernels before 5.11 charge BPF maps to it
	o, err := loadOffsets()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			mapEvents:   {Name: "so_events", Type: ebpf.RingBuf, MaxEntries: RingBufferSize},
			mapConns:    {Name: "so_conns", Type: ebpf.Hash, KeySize: keySize, ValueSize: valueSize, MaxEntries: MaxConns},
			mapPorts:    {Name: "so_ports", Type: ebpf.Hash, KeySize: portKeySize, ValueSize: 8, MaxEntries: 2 * MaxPorts},
			mapPIDs:     {Name: "so_pids", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: MaxPIDs},
			mapExes:     {Name: "so_exes", Type: ebpf.Hash, KeySize: exeKeySize, ValueSize: 8, MaxEntries: MaxExes},
			mapConfig:   {Name: "so_config", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: numConfig},
			mapCounters: {Name: "so_counters", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: numCounters},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			// GPL-compatible, as bpf_probe_read_kernel requires.
			"sockops": {Name: "so_sockops", Type: ebpf.SockOps, AttachType: ebpf.AttachCGroupSockOps, Instructions: sockopsProgram(o), License: "Dual MIT/GPL"},
			"state":   {Name: "so_state", Type: ebpf.RawTracepoint, Instructions: stateProgram(o), License: "Dual MIT/GPL"},
		},
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, loadError("loading the programs", err)
	}
	s := &Source{o: o}
	s.events, s.conns, s.ports = coll.DetachMap(mapEvents), coll.DetachMap(mapConns), coll.DetachMap(mapPorts)
	s.pids, s.exes, s.config, s.counters = coll.DetachMap(mapPIDs), coll.DetachMap(mapExes), coll.DetachMap(mapConfig), coll.DetachMap(mapCounters)
	sockops, state := coll.DetachProgram("sockops"), coll.DetachProgram("state")
	s.progs = append(s.progs, sockops, state)
	coll.Close()
	if s.ring, err = ringbuf.NewReader(s.events); err != nil {
		s.Close()
		return nil, fmt.Errorf("opening the events ring buffer: %w", err)
	}
	// The close tracepoint first: a connection put in the map is then
	// always seen to close.
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "inet_sock_set_state", Program: state})
	if err != nil {
		s.Close()
		return nil, loadError("attaching the raw tracepoint inet_sock_set_state", err)
	}
	s.links = append(s.links, l)
	if l, err = attachRoot(sockops); err != nil {
		s.Close()
		return nil, err
	}
	s.links = append(s.links, l)
	return s, nil
}

// The inode numbers of the initial PID and cgroup namespaces
// (include/linux/proc_ns.h: PROC_PID_INIT_INO, PROC_CGROUP_INIT_INO), the
// same on every machine.
const (
	pidInitIno    = 0xEFFFFFFC
	cgroupInitIno = 0xEFFFFFFB
)

// initialNamespaces checks that this process is in the initial PID and
// cgroup namespaces (dir is /proc/self/ns): the programs report PIDs as
// that PID namespace numbers them, and a sock_ops program attached to the
// cgroup v2 root of another cgroup namespace would see only that
// namespace's sockets (a container without hostPID, or with a cgroup
// namespace of its own).
func initialNamespaces(dir string) error {
	for _, ns := range []struct {
		name string
		ino  uint64
		how  string
	}{{"pid", pidInitIno, "hostPID"}, {"cgroup", cgroupInitIno, "the host's cgroup namespace"}} {
		var st unix.Stat_t
		if err := unix.Stat(dir+"/"+ns.name, &st); err != nil {
			return fmt.Errorf("%s namespace: %v", ns.name, err)
		}
		if st.Ino != ns.ino {
			return fmt.Errorf("kwatch runs in a %s namespace of its own (a container without %s): the kernel's view of processes and sockets is not its own", ns.name, ns.how)
		}
	}
	return nil
}

// attachRoot attaches the sock_ops program to the root of the cgroup v2
// hierarchy (a BPF link: it is detached when closed, or when kwatch ends).
func attachRoot(p *ebpf.Program) (link.Link, error) {
	dir, err := cgroup2Mount("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if dir == "" {
		// cgroup v1 only: a cgroup2 mount of its own, for as long as
		// the attach takes.
		if dir, err = os.MkdirTemp("", "kwatch-cgroup2-"); err != nil {
			return nil, fmt.Errorf("%w: a folder to mount cgroup2 on: %v", ErrUnsupported, err)
		}
		defer os.Remove(dir)
		if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return nil, loadError("mounting cgroup2 to attach the sock_ops program", err)
		}
		defer unix.Unmount(dir, unix.MNT_DETACH)
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: dir, Attach: ebpf.AttachCGroupSockOps, Program: p})
	if err != nil {
		return nil, loadError("attaching the sock_ops program to the cgroup v2 root "+dir, err)
	}
	return l, nil
}

// cgroup2Mount returns where the root of the cgroup v2 hierarchy is
// mounted, as the mountinfo file at path (proc(5)) lists it, "" when it is
// not mounted.
func cgroup2Mount(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return parseCgroup2Mount(string(b)), nil
}

// parseCgroup2Mount is cgroup2Mount's reading of a mountinfo text: lines
// "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE
// SUPEROPTIONS" (proc(5)); the first cgroup2 mount of the hierarchy's
// root ("/"). Octal escapes in the mount point (\040 for a space) are
// read back.
func parseCgroup2Mount(mountinfo string) string {
	for line := range strings.Lines(mountinfo) {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 5 || sep+1 >= len(f) || f[sep+1] != "cgroup2" || f[3] != "/" {
			continue
		}
		return unescapeMount(f[4])
	}
	return ""
}

// unescapeMount reads back the octal escapes (\NNN) the kernel writes in
// mountinfo paths for space, tab, newline and backslash.
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// loadError names what a failed load or attach lacks.
func loadError(doing string, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%w: %s: %v", ErrNotPermitted, doing, err)
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, syscall.ENOTSUP), errors.Is(err, syscall.EOPNOTSUPP),
		errors.Is(err, syscall.ENOSYS), errors.Is(err, syscall.EINVAL), errors.Is(err, os.ErrNotExist),
		errors.Is(err, syscall.E2BIG), errors.Is(err, syscall.ESRCH):
		return fmt.Errorf("%w: %s: %v (BPF trampolines need CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS, ring buffers Linux 5.8)", ErrUnsupported, doing, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrUnsupported, doing, err)
}

// Follow makes the programs report the connections of process pid (its
// thread group ID, in the kernel's initial PID namespace) from now on.
func (s *Source) Follow(pid int) error {
	if err := s.pids.Update(uint32(pid), uint64(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("following pid %d: %w", pid, err)
	}
	return nil
}

// Unfollow forgets process pid (it exited: its number may be given to
// another).
func (s *Source) Unfollow(pid int) error {
	if err := s.pids.Delete(uint32(pid)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// FollowExe makes the programs follow every process whose executable is
// the file at path (its device and inode, as the kernel's dev_t and inode
// number: a process's /proc/PID/exe, a path in another mount namespace's
// view, is the same file), from its next connect, accept or listen on: it
// is then followed by pid too, and its event has ByExe set. A file on
// overlayfs may be seen by its real inode rather than stat(2)'s: such a
// process is found by the caller's other means (its TLS secrets).
func (s *Source) FollowExe(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var key [exeKeySize]byte
	binary.NativeEndian.PutUint32(key[0:], kernelDev(st.Dev))
	binary.NativeEndian.PutUint64(key[8:], st.Ino)
	if err := s.exes.Update(key, uint64(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("following %s: %w", path, err)
	}
	if err := s.config.Update(uint32(configFlags), uint64(cfgExes), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("following %s: %w", path, err)
	}
	return nil
}

// kernelDev converts a device number as stat(2) gives it (glibc's and Go's
// encoding: major in bits 8-19 and 32-43, minor in bits 0-7 and 20-31) to
// the kernel's internal dev_t that struct super_block's s_dev holds: major
// << 20 | minor (include/linux/kdev_t.h, MINORBITS 20).
func kernelDev(dev uint64) uint32 {
	return unix.Major(dev)<<20 | unix.Minor(dev)
}

// AddListener puts a listening port of process pid in network namespace
// netns into the ports map (a listener that was there before Follow: the
// listen program sees only those that start listening later).
func (s *Source) AddListener(netns uint64, port uint16, pid int) error {
	for _, ns := range []uint64{netns, 0} {
		if err := s.ports.Update(portKey(ns, port), uint64(pid), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("listening port %d: %w", port, err)
		}
	}
	return nil
}

// RemoveListener takes a listening port of network namespace netns (0:
// the entry for any namespace, which the listen program adds but does not
// take back) out of the ports map.
func (s *Source) RemoveListener(netns uint64, port uint16) error {
	if err := s.ports.Delete(portKey(netns, port)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// AddConn puts a connection of process pid, between local (its end) and
// remote in network namespace netns, into the connections map (a
// connection open before Follow).
func (s *Source) AddConn(netns uint64, local, remote netip.AddrPort, pid int) error {
	for _, d := range []struct {
		k     [keySize]byte
		flags uint32
	}{{connKey(netns, local, remote), connProc | connLocalSrc}, {connKey(netns, remote, local), connProc}} {
		if err := s.conns.Update(d.k, connValue{TGID: uint32(pid), Flags: d.flags}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("connection %s - %s: %w", local, remote, err)
		}
	}
	return nil
}

// Owner is what the connections map holds of one direction of a
// connection: the process it is kept for, that process's end (Local), and
// whether it connected (Client) or accepted.
type Owner struct {
	PID    int
	Local  netip.AddrPort
	Client bool
}

// Lookup returns the owner the connections map holds for the direction
// src → dst of network namespace netns; ok is false when it holds none, or
// one that closed longer than Grace ago.
func (s *Source) Lookup(netns uint64, src, dst netip.AddrPort) (o Owner, ok bool) {
	var v connValue
	if err := s.conns.Lookup(connKey(netns, src, dst), &v); err != nil {
		return Owner{}, false
	}
	if v.Closed != 0 && monotonic()-v.Closed > uint64(Grace) {
		return Owner{}, false
	}
	o = Owner{PID: int(v.TGID), Local: dst, Client: v.Flags&connClient != 0}
	if v.Flags&connLocalSrc != 0 {
		o.Local = src
	}
	return o, true
}

// Pending reports whether events wait to be read (Next), without a system
// call.
func (s *Source) Pending() bool { return s.ring.AvailableBytes() > 0 }

// monotonic is CLOCK_MONOTONIC in nanoseconds, bpf_ktime_get_ns's clock.
func monotonic() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// Sweep forgets the connections that closed longer than Grace ago, and
// returns how many directions it forgot. A connection's entry is read
// again just before it is deleted, so that one opened meanwhile on the
// same four-tuple (its close time 0 again) stays.
func (s *Source) Sweep() int {
	now := monotonic()
	var old [][keySize]byte
	var k [keySize]byte
	var v connValue
	it := s.conns.Iterate()
	for it.Next(&k, &v) {
		if v.Closed != 0 && now-v.Closed > uint64(Grace) {
			old = append(old, k)
		}
	}
	n := 0
	for _, k := range old {
		if err := s.conns.Lookup(k, &v); err != nil || v.Closed == 0 {
			continue
		}
		if s.conns.Delete(k) == nil {
			n++
		}
	}
	return n
}

// Next returns the next event if one is waiting, without blocking.
func (s *Source) Next() (Event, bool) {
	for s.ring.AvailableBytes() > 0 {
		s.ring.SetDeadline(time.Now().Add(-time.Second))
		if err := s.ring.ReadInto(&s.rec); err != nil {
			return Event{}, false
		}
		e, err := decode(s.rec.RawSample)
		if err != nil {
			s.bad.Add(1)
			continue
		}
		return e, true
	}
	return Event{}, false
}

// Read blocks until an event comes, or until deadline (the error wraps
// os.ErrDeadlineExceeded), or until Close (os.ErrClosed).
func (s *Source) Read(deadline time.Time) (Event, error) {
	for {
		s.ring.SetDeadline(deadline)
		if err := s.ring.ReadInto(&s.rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return Event{}, fmt.Errorf("reading connection events: %w", os.ErrClosed)
			}
			return Event{}, fmt.Errorf("reading connection events: %w", err)
		}
		e, err := decode(s.rec.RawSample)
		if err != nil {
			s.bad.Add(1)
			continue
		}
		return e, nil
	}
}

// Filter returns the socket filter (BPF_PROG_TYPE_SOCKET_FILTER) of a
// packet socket in network namespace netns (its inode number) that gets
// packets from their IP header on (SOCK_DGRAM): it keeps, up to snap bytes
// each, the TCP segments of the connections map (those of the followed
// processes, from their SYN on, until Grace after they closed) and those
// to or from a followed process's listening port in netns, and drops the
// rest, and on loopback the outgoing copy of each packet (see
// filterProgram). Attach it with SO_ATTACH_BPF; it is closed with the
// Source.
func (s *Source) Filter(netns uint64, snap uint32) (*ebpf.Program, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("socket filter: %w", os.ErrClosed)
	}
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			mapConns: {Type: ebpf.Hash, KeySize: keySize, ValueSize: valueSize, MaxEntries: MaxConns},
			mapPorts: {Type: ebpf.Hash, KeySize: portKeySize, ValueSize: 8, MaxEntries: 2 * MaxPorts},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"filter": {Name: "so_filter", Type: ebpf.SocketFilter, Instructions: filterProgram(uint32(netns), snap, int64(Grace)), License: "Dual MIT/GPL"},
		},
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{mapConns: s.conns, mapPorts: s.ports}})
	if err != nil {
		return nil, loadError("loading the socket filter", err)
	}
	p := coll.DetachProgram("filter")
	coll.Close()
	s.filters = append(s.filters, p)
	return p, nil
}

// Lost returns how many events found the ring buffer full (Next did not
// keep up): their connections are still in the connections map.
func (s *Source) Lost() uint64 { return s.counter(counterLost) }

// Full returns how many connections or listening ports found their map
// full: their packets are not kept.
func (s *Source) Full() uint64 { return s.counter(counterFull) }

// Skipped returns how many records Next or Read refused as malformed.
func (s *Source) Skipped() uint64 { return s.bad.Load() }

func (s *Source) counter(i uint32) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0
	}
	var v uint64
	_ = s.counters.Lookup(i, &v)
	return v
}

// Close detaches the programs and frees them, their maps and the socket
// filters made (a packet socket that runs one keeps its own reference).
// Closing twice does nothing.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	if s.ring != nil {
		errs = append(errs, s.ring.Close())
	}
	for _, p := range append(s.progs, s.filters...) {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	for _, m := range []*ebpf.Map{s.events, s.conns, s.ports, s.pids, s.exes, s.config, s.counters} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}
