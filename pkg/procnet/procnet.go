// Package procnet reads what Linux's /proc says of processes and their TCP
// sockets (proc(5)): which processes run a program (by name, as pgrep
// matches, or by executable file), their network namespace, and the TCP
// connections and listening sockets that are theirs: those of
// /proc/PID/net/tcp and tcp6 whose inode is one of the process's
// socket:[INODE] file descriptors. kwatch attach uses it to know which
// packets belong to the processes it attached to.
package procnet

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// Root is where proc(5) is mounted.
var Root = "/proc"

// Process is one running process.
type Process struct {
	PID int
	// Comm is its command name (/proc/PID/comm: at most 15 bytes).
	Comm string
	// Exe is the path of its executable as the kernel gives it
	// (readlink /proc/PID/exe): in its own mount namespace for a process
	// in a container; open the file through ExePath.
	Exe string
}

// ExePath is the path through which the process's executable can be
// opened from kwatch's mount namespace too: /proc/PID/exe.
func (p Process) ExePath() string { return filepath.Join(Root, strconv.Itoa(p.PID), "exe") }

// Name is the process's name as kwatch shows it: its executable's base
// name (whole, where comm is cut at 15 bytes), else its comm, as Shown
// prints it.
func (p Process) Name() string { return Shown(p.name()) }

// name is Name as it is, for matching.
func (p Process) name() string {
	if p.Exe != "" {
		return filepath.Base(strings.TrimSuffix(p.Exe, " (deleted)"))
	}
	return p.Comm
}

// Shown returns s, a name or path a process chose, as kwatch prints it:
// s itself, or, when it holds a control character or is not UTF-8,
// quoted as Go quotes a string. A program may name itself or its file so
// as to write escape sequences to the terminal of whoever runs kwatch, or
// a line break that would forge a line of kwatch's.
func Shown(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// Get returns the process pid; the error wraps os.ErrNotExist when there
// is none.
func Get(pid int) (Process, error) {
	dir := filepath.Join(Root, strconv.Itoa(pid))
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, err)
	}
	p := Process{PID: pid, Comm: strings.TrimSuffix(string(comm), "\n")}
	p.Exe, _ = os.Readlink(filepath.Join(dir, "exe")) // kernel threads have none
	return p, nil
}

// All returns every process there is, in PID order.
func All() ([]Process, error) {
	ents, err := os.ReadDir(Root)
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if p, err := Get(pid); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// ByName returns the processes named name, as pgrep -x matches it: their
// comm (cut at 15 bytes, so a longer name matches on its first 15), or
// their executable's base name. self is left out (kwatch itself).
func ByName(name string, self int) ([]Process, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, p := range all {
		if p.PID == self || p.Exe == "" {
			continue
		}
		if p.Comm == name || len(p.Comm) == 15 && strings.HasPrefix(name, p.Comm) && p.name() == name || p.name() == name {
			out = append(out, p)
		}
	}
	return out, nil
}

// ByExe returns the processes whose executable is the file at path (the
// same device and inode, however it was named).
func ByExe(path string) ([]Process, error) {
	want, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	all, err := All()
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, p := range all {
		if fi, err := os.Stat(p.ExePath()); err == nil && os.SameFile(fi, want) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Alive reports whether process pid still runs (and is not a zombie).
func Alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join(Root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// NetNS returns the path of process pid's network namespace file and its
// inode (two processes are in the same namespace when the inodes are
// equal).
func NetNS(pid int) (path string, inode uint64, err error) {
	path = filepath.Join(Root, strconv.Itoa(pid), "ns", "net")
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", 0, errors.New("network namespace: no inode")
	}
	return path, st.Ino, nil
}

// TCP states of /proc/net/tcp (include/net/tcp_states.h).
const (
	StateEstablished = 1
	StateSynSent     = 2
	StateListen      = 10
)

// Socket is one TCP socket of a process.
type Socket struct {
	Local, Remote netip.AddrPort
	// State is the TCP state as /proc/net/tcp numbers it (StateListen,
	// StateEstablished, …).
	State int
	Inode uint64
}

// Sockets returns the TCP sockets (IPv4 and IPv6) of process pid: those
// of its network namespace whose inode is one of its file descriptors.
// Reading another user's process needs root (CAP_SYS_PTRACE).
func Sockets(pid int) ([]Socket, error) {
	mine, err := SocketInodes(pid)
	if err != nil {
		return nil, err
	}
	all, err := Table(pid)
	if err != nil {
		return nil, err
	}
	return Mine(all, mine), nil
}

// Mine returns the sockets of table whose inode is in inodes.
func Mine(table []Socket, inodes map[uint64]bool) []Socket {
	var out []Socket
	for _, s := range table {
		if inodes[s.Inode] {
			out = append(out, s)
		}
	}
	return out
}

// SocketInodes returns the inodes of process pid's sockets: its
// socket:[INODE] file descriptors.
func SocketInodes(pid int) (map[uint64]bool, error) {
	dir := filepath.Join(Root, strconv.Itoa(pid))
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return nil, err
	}
	mine := make(map[uint64]bool, len(fds))
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if s, ok := strings.CutPrefix(l, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				mine[n] = true
			}
		}
	}
	return mine, nil
}

// Table returns the TCP sockets (IPv4 and IPv6) of process pid's network
// namespace: every process's there. Reading it costs the kernel a walk of
// its whole TCP hash tables (about 5 ms for each of tcp and tcp6 on a
// 24 GiB machine, however few sockets there are): read it once for all
// the processes of one namespace.
func Table(pid int) ([]Socket, error) {
	dir := filepath.Join(Root, strconv.Itoa(pid))
	var out []Socket
	read := false
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join(dir, "net", f))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // no IPv6
			}
			return nil, err
		}
		read = true
		all, err := ParseTCP(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "net", f), err)
		}
		out = append(out, all...)
	}
	if !read {
		// Neither: the process is gone (an empty table would say
		// its namespace has no socket).
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "net", "tcp"), os.ErrNotExist)
	}
	return out, nil
}

// ParseTCP parses the text of /proc/net/tcp or tcp6: a header line, then
// one socket a line ("sl local_address rem_address st … inode …", the
// addresses in hex as the kernel holds them: IPv4 a little-endian word,
// IPv6 four of them).
func ParseTCP(b []byte) ([]Socket, error) {
	var out []Socket
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		local, err1 := parseAddr(f[1])
		remote, err2 := parseAddr(f[2])
		state, err3 := strconv.ParseUint(f[3], 16, 8)
		inode, err4 := strconv.ParseUint(f[9], 10, 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		out = append(out, Socket{Local: local, Remote: remote, State: int(state), Inode: inode})
	}
	return out, sc.Err()
}

// parseAddr parses "0100007F:1F90" (127.0.0.1:8080) or its IPv6 form.
func parseAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || len(raw) != 4 && len(raw) != 16 {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	// Each 32-bit word is in the host's byte order: little-endian on
	// amd64 and arm64.
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	ip, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
}

// Capabilities returns the effective capability set of process pid, as
// /proc/PID/status gives it (CapEff, ParseCapEff).
func Capabilities(pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(Root, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	return ParseCapEff(string(b))
}

// ParseCapEff returns the effective capability set in the text of a
// /proc/PID/status file (proc(5): "CapEff:\t<64-bit hex mask>"; bit N is
// capability N of capabilities(7)). The error is for a text without it.
func ParseCapEff(status string) (uint64, error) {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff line")
}

// SocketOwners returns, by inode, the process of every socket of inodes
// that some process holds open (a socket:[INODE] file descriptor): one walk
// of every process's /proc/PID/fd, for the sockets a socket table shows
// (Table) when their processes are not known. A socket held by several
// processes (inherited across fork) is given the lowest PID's. Processes
// whose descriptors cannot be read (they exited, or another user's without
// CAP_SYS_PTRACE) are passed over.
func SocketOwners(inodes map[uint64]bool) (map[uint64]Process, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	out := map[uint64]Process{}
	for _, p := range all {
		mine, err := SocketInodes(p.PID)
		if err != nil {
			continue
		}
		for ino := range mine {
			if _, taken := out[ino]; inodes[ino] && !taken {
				out[ino] = p
			}
		}
		if len(out) == len(inodes) {
			break
		}
	}
	return out, nil
}

// Pod is where a process runs in Kubernetes, from its cgroup: the pod's
// UID and the container's ID (as the container runtime names it: 64 hex
// digits for containerd, CRI-O and Docker); both "" for a process in no
// pod.
type Pod struct {
	UID, Container string
}

// PodOf returns the pod and container of process pid, from
// /proc/PID/cgroup (ParsePod); the zero Pod for a process in no pod.
func PodOf(pid int) (Pod, error) {
	b, err := os.ReadFile(filepath.Join(Root, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return Pod{}, err
	}
	return ParsePod(string(b)), nil
}

// ParsePod reads the pod and container of a process from the text of its
// /proc/PID/cgroup (cgroups(7): one "ID:CONTROLLERS:PATH" line per
// hierarchy). The kubelet puts a pod's containers under a cgroup named for
// the pod's UID, below kubepods (its QoS class between):
//
//	cgroupfs driver:  /kubepods/burstable/pod<UID>/<CONTAINER ID>
//	systemd driver:   /kubepods.slice/kubepods-burstable.slice/
//	                  kubepods-burstable-pod<UID, '_' for '-'>.slice/
//	                  cri-containerd-<CONTAINER ID>.scope
//	                  (crio-<ID>.scope for CRI-O, docker-<ID>.scope)
//
// (kubelet's pkg/kubelet/cm/cgroup_manager_linux.go and the runtimes'
// cgroup naming), possibly under a node's own prefix (kind: /kubelet.slice/
// …, or a container's /docker/<id>/…). The first line that shows a pod
// wins; the container is the path element after the pod's, when it reads
// as an ID.
func ParsePod(cgroup string) Pod {
	for line := range strings.Lines(cgroup) {
		_, rest, ok := strings.Cut(strings.TrimRight(line, "\n"), ":")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, ":")
		if !ok || !strings.Contains(path, "kubepods") {
			continue
		}
		elems := strings.Split(path, "/")
		for i, e := range elems {
			uid, ok := podUID(e)
			if !ok {
				continue
			}
			p := Pod{UID: uid}
			if i+1 < len(elems) {
				p.Container = containerID(elems[i+1])
			}
			return p
		}
	}
	return Pod{}
}

// podUID reads a pod's UID from a cgroup path element: "pod<UID>" or
// "kubepods[-QOS]-pod<UID with '_'>.slice". A UID is 36 characters, hex
// digits and dashes (RFC 4122's text form).
func podUID(e string) (string, bool) {
	e = strings.TrimSuffix(e, ".slice")
	i := strings.LastIndex(e, "pod")
	if i < 0 {
		return "", false
	}
	uid := strings.ReplaceAll(e[i+3:], "_", "-")
	if len(uid) != 36 || strings.Count(uid, "-") != 4 {
		return "", false
	}
	for _, c := range uid {
		if c != '-' && !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return uid, true
}

// containerID reads a container's ID from the path element after its
// pod's: the ID itself, or "<runtime>-<ID>.scope"; "" when it is no ID (64
// hex digits).
func containerID(e string) string {
	e = strings.TrimSuffix(e, ".scope")
	if i := strings.LastIndexByte(e, '-'); i >= 0 {
		e = e[i+1:]
	}
	if len(e) != 64 {
		return ""
	}
	for _, c := range e {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
	}
	return e
}
