package gotls

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"
)

// TestProgramRegisters: the program reads each argument from its
// register's place in pt_regs, for both architectures (arm64's is checked
// here only: the machine running the tests is amd64), and for both outputs.
func TestProgramRegisters(t *testing.T) {
	// In the order the program reads them: the random's, label's and
	// secret's lengths, the goroutine, then the label's, random's and
	// secret's pointers.
	want := map[string][]int16{
		// rsi, rcx, r10; r14; rbx, rdi, r9 (arch/x86/include/asm/ptrace.h)
		"amd64": {104, 88, 56, 8, 40, 112, 64},
		// x4, x2, x7; x28; x1, x3, x6 (user_pt_regs.regs[i] at 8*i)
		"arm64": {8 * 4, 8 * 2, 8 * 7, 8 * 28, 8 * 1, 8 * 3, 8 * 6},
	}
	for arch, offsets := range want {
		for _, out := range []output{toRing, toPerf} {
			insns, err := program(arch, out)
			if err != nil {
				t.Fatal(err)
			}
			var got []int16
			for _, ins := range insns {
				if ins.OpCode.Class() == asm.LdXClass && ins.Src == asm.R6 {
					if ins.OpCode.Size() != asm.DWord {
						t.Errorf("%s: %v: a register is 8 bytes", arch, ins)
					}
					got = append(got, ins.Offset)
				}
			}
			if !slices.Equal(got, offsets) {
				t.Errorf("%s, output %d: loads from the context at %v, want %v", arch, out, got, offsets)
			}
			var b bytes.Buffer
			if err := insns.Marshal(&b, binary.LittleEndian); err != nil {
				t.Errorf("%s, output %d: %v", arch, out, err)
			}
		}
	}
	if _, err := program("riscv64", toRing); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("riscv64: %v", err)
	}
}

// record builds what the program writes.
func record(pid, tid uint32, label string, random [32]byte, secret []byte) []byte {
	b := make([]byte, recordSize)
	binary.NativeEndian.PutUint64(b[recPIDTGID:], uint64(pid)<<32|uint64(tid))
	binary.NativeEndian.PutUint64(b[recG:], 0xc000001234)
	binary.NativeEndian.PutUint32(b[recLabelLen:], uint32(len(label)))
	binary.NativeEndian.PutUint32(b[recSecretLen:], uint32(len(secret)))
	copy(b[recLabel:recLabel+maxLabel], label)
	copy(b[recRandom:], random[:])
	copy(b[recSecret:recSecret+maxSecret], secret)
	return b
}

func TestDecode(t *testing.T) {
	var random [32]byte
	for i := range random {
		random[i] = byte(i)
	}
	secret := bytes.Repeat([]byte{0xab}, 48)
	s, g, err := decode(record(1234, 1240, "CLIENT_TRAFFIC_SECRET_0", random, secret))
	if err != nil {
		t.Fatal(err)
	}
	if s.PID != 1234 || s.TID != 1240 || s.Label != "CLIENT_TRAFFIC_SECRET_0" || s.ClientRandom != random || !bytes.Equal(s.Secret, secret) || g != 0xc000001234 {
		t.Errorf("decoded %+v, goroutine %#x", s, g)
	}

	for _, c := range []struct {
		name string
		rec  []byte
		says string
	}{
		{"short", record(1, 1, "CLIENT_RANDOM", random, secret)[:recordSize-1], "record of 183 bytes"},
		{"empty label", record(1, 1, "", random, secret), "0-byte label"},
		{"empty secret", record(1, 1, "CLIENT_RANDOM", random, nil), "0-byte secret"},
		{"label too long", func() []byte {
			b := record(1, 1, "CLIENT_RANDOM", random, secret)
			binary.NativeEndian.PutUint32(b[recLabelLen:], maxLabel+1)
			return b
		}(), "65-byte label"},
		{"secret too long", func() []byte {
			b := record(1, 1, "CLIENT_RANDOM", random, secret)
			binary.NativeEndian.PutUint32(b[recSecretLen:], maxSecret+1)
			return b
		}(), "65-byte secret"},
		{"space in label", record(1, 1, "CLIENT RANDOM", random, secret), "byte 0x20"},
		{"newline in label", record(1, 1, "CLIENT_RANDOM\n", random, secret), "byte 0xa"},
		{"lower case", record(1, 1, "client_random", random, secret), "byte 0x63"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := decode(c.rec); err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("err %v, want one saying %q", err, c.says)
			}
		})
	}
}

func TestKeyLogLine(t *testing.T) {
	var random [32]byte
	random[0], random[31] = 0x01, 0xfe
	s := Secret{Label: "CLIENT_RANDOM", ClientRandom: random, Secret: []byte{0xde, 0xad, 0xbe, 0xef}}
	want := "CLIENT_RANDOM 01000000000000000000000000000000000000000000000000000000000000fe deadbeef\n"
	if got := string(s.KeyLogLine()); got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// TestSeen: a call is recognised as reported again among the last
// recentCalls, and forgotten after.
func TestSeen(t *testing.T) {
	var p Probe
	first := call{pid: 1, g: 0xc000002000, label: "CLIENT_RANDOM", random: [32]byte{1}}
	if p.seen(first) {
		t.Fatal("a first call seen before")
	}
	for _, c := range []call{
		{pid: 2, g: first.g, label: first.label, random: first.random},      // another process
		{pid: 1, g: 0xc000003000, label: first.label, random: first.random}, // another goroutine: the other side
		{pid: 1, g: first.g, label: "SERVER_TRAFFIC_SECRET_0", random: first.random},
		{pid: 1, g: first.g, label: first.label, random: [32]byte{2}},
	} {
		if p.seen(c) {
			t.Errorf("%+v: seen", c)
		}
	}
	if !p.seen(first) {
		t.Error("a call reported twice: not seen")
	}
	for i := range recentCalls {
		p.seen(call{pid: 3, g: uint64(i)})
	}
	if p.seen(first) {
		t.Errorf("remembered after %d other calls", recentCalls)
	}
}
