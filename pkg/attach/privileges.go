package attach

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kwatch/kwatch/pkg/procnet"
)

// ErrPermission is wrapped by Run's error when kwatch may not attach: not
// root, or root without a capability it needs; the message names them.
var ErrPermission = errors.New("kwatch attach needs root")

// needed are the capabilities (capabilities(7)) kwatch attach uses, with
// what for. CAP_BPF and CAP_PERFMON alone do not open a uprobe perf event
// on Linux 6.18 for a process that is not root (measured: permission
// denied), so CAP_SYS_ADMIN is asked for.
var needed = []struct {
	bit  uint
	name string
}{
	{21, "CAP_SYS_ADMIN"},  // load the uprobe's program, open its perf event
	{13, "CAP_NET_RAW"},    // open packet sockets
	{19, "CAP_SYS_PTRACE"}, // read other processes' /proc/PID/fd, exe and memory
}

// checkPrivileges returns an error wrapping ErrPermission when this process
// is not root, or is root without a capability it needs (a container's
// root), or nil; nil too when the capabilities cannot be read (the kernel
// will then say).
func checkPrivileges() error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("%w: it loads a BPF program, places uprobes, opens packet sockets and reads other processes' /proc files; this process runs as uid %d", ErrPermission, uid)
	}
	eff, err := procnet.Capabilities(os.Getpid())
	if err != nil {
		return nil
	}
	return missing(eff)
}

// missing is checkPrivileges' test of root's effective capability set eff.
func missing(eff uint64) error {
	var lacks []string
	for _, c := range needed {
		if eff&(1<<c.bit) == 0 {
			lacks = append(lacks, c.name)
		}
	}
	if len(lacks) == 0 {
		return nil
	}
	return fmt.Errorf("%w with %s: this process (root) lacks %s", ErrPermission, capList(), strings.Join(lacks, ", "))
}

func capList() string {
	var names []string
	for _, c := range needed {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}
