package attach

import (
	"errors"
	"testing"
)

func TestMissing(t *testing.T) {
	all := uint64(1<<39 | 1<<38 | 1<<13 | 1<<19)
	if err := missing(all); err != nil {
		t.Errorf("all needed: %v", err)
	}
	if err := missing(1<<21 | 1<<13 | 1<<19); err != nil {
		t.Errorf("CAP_SYS_ADMIN for CAP_BPF and CAP_PERFMON: %v", err)
	}
	err := missing(1 << 13)
	want := "kwatch attach needs root (or CAP_BPF, CAP_PERFMON, CAP_NET_RAW, CAP_SYS_PTRACE): this process lacks CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE"
	if !errors.Is(err, ErrPermission) || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}
