package gotls

// What Open needs from the process and the kernel, checked before anything
// is loaded so that a missing piece is named in one line.

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kwatch/kwatch/pkg/procnet"
)

// Errors of Open. Each is returned wrapped, in a one-line message that says
// what is missing; test for them with errors.Is.
var (
	// ErrNotPermitted: the process may not load BPF programs or open
	// uprobes: it is not root and lacks CAP_BPF or CAP_PERFMON (and
	// CAP_SYS_ADMIN, which kernels before 5.8 require instead), or the
	// kernel refused bpf(2) anyway (a user namespace, a seccomp profile).
	ErrNotPermitted = errors.New("not permitted to load BPF programs and place uprobes")
	// ErrNoBPF: the kernel has no bpf(2) (CONFIG_BPF_SYSCALL) or cannot
	// load programs for kprobes and uprobes (CONFIG_BPF_EVENTS).
	ErrNoBPF = errors.New("the kernel has no BPF for uprobes")
	// ErrNoUprobes: the kernel has no uprobe PMU
	// (/sys/bus/event_source/devices/uprobe: CONFIG_UPROBE_EVENTS, Linux
	// 4.17 or later).
	ErrNoUprobes = errors.New("the kernel has no uprobe PMU")
)

// Capability numbers (include/uapi/linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38 // Linux 5.8
	capBPF      = 39 // Linux 5.8
)

// uprobePMU is where the kernel lists its uprobe PMU (a perf event source).
const uprobePMU = "/sys/bus/event_source/devices/uprobe"

// capEff returns the effective capability set from the text of
// /proc/self/status (procnet.ParseCapEff).
var capEff = procnet.ParseCapEff

// checkCaps returns an error wrapping ErrNotPermitted, naming what is
// missing, unless the effective set holds CAP_BPF and CAP_PERFMON, or
// CAP_SYS_ADMIN.
func checkCaps(eff uint64) error {
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	if has(capSysAdmin) || has(capBPF) && has(capPerfmon) {
		return nil
	}
	var lacks []string
	if !has(capBPF) {
		lacks = append(lacks, "CAP_BPF")
	}
	if !has(capPerfmon) {
		lacks = append(lacks, "CAP_PERFMON")
	}
	return fmt.Errorf("%w: run as root, or with CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8); this process lacks %s and CAP_SYS_ADMIN", ErrNotPermitted, strings.Join(lacks, " and "))
}

// checkProcess checks this process's capabilities in status
// (/proc/self/status; when it cannot be read, the kernel will say) and the
// kernel's uprobe PMU (uprobePMU).
func checkProcess(status, pmu string) error {
	if status, err := os.ReadFile(status); err == nil {
		if eff, err := capEff(string(status)); err == nil {
			if err := checkCaps(eff); err != nil {
				return err
			}
		}
	}
	if _, err := os.Stat(pmu); err != nil {
		return fmt.Errorf("%w: no %s (CONFIG_UPROBE_EVENTS, Linux 4.17 or later)", ErrNoUprobes, pmu)
	}
	return nil
}
