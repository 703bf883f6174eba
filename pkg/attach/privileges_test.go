package attach

import (
	"errors"
	"testing"
)

func TestMissing(t *testing.T) {
	if err := missing(1<<21 | 1<<13 | 1<<19); err != nil {
		t.Errorf("all needed: %v", err)
	}
	err := missing(1 << 13)
	want := "kwatch attach needs root with CAP_SYS_ADMIN, CAP_NET_RAW, CAP_SYS_PTRACE: this process (root) lacks CAP_SYS_ADMIN, CAP_SYS_PTRACE"
	if !errors.Is(err, ErrPermission) || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}
