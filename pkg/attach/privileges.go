package attach

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kwatch/kwatch/pkg/procnet"
)

// ErrPermission is wrapped by Run's error when kwatch lacks a capability
// it needs; the message names every one missing.
var ErrPermission = errors.New("kwatch attach needs root")

// needed are the capabilities (capabilities(7)) kwatch attach uses, with
// what for.
var needed = []struct {
	bit  uint
	name string
}{
	{39, "CAP_BPF"},        // load the uprobe's program and maps
	{38, "CAP_PERFMON"},    // open the uprobe perf event
	{13, "CAP_NET_RAW"},    // open packet sockets
	{19, "CAP_SYS_PTRACE"}, // read other users' /proc/PID/fd and exe
}

// capSysAdmin stands for CAP_BPF and CAP_PERFMON on kernels before 5.8.
const capSysAdmin = 21

// checkPrivileges returns an error wrapping ErrPermission that names the
// capabilities this process lacks, or nil; nil too when they cannot be
// read (the kernel will then say).
func checkPrivileges() error {
	eff, err := procnet.Capabilities(os.Getpid())
	if err != nil {
		return nil
	}
	return missing(eff)
}

// missing is checkPrivileges for the effective capability set eff.
func missing(eff uint64) error {
	var lacks []string
	for _, c := range needed {
		if eff&(1<<c.bit) != 0 || eff&(1<<capSysAdmin) != 0 && (c.name == "CAP_BPF" || c.name == "CAP_PERFMON") {
			continue
		}
		lacks = append(lacks, c.name)
	}
	if len(lacks) == 0 {
		return nil
	}
	return fmt.Errorf("%w (or %s): this process lacks %s", ErrPermission, capList(), strings.Join(lacks, ", "))
}

func capList() string {
	var names []string
	for _, c := range needed {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}
