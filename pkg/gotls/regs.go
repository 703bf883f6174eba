package gotls

// Where writeKeyLog's arguments are when the probe fires: in registers, by
// Go's internal register ABI ($(go env GOROOT)/src/cmd/compile/abi-internal.md),
// as the kernel saved them in the struct pt_regs a uprobe's BPF program gets
// as its context.

import "fmt"

// argRegs holds the offsets, in bytes into the BPF context (struct pt_regs),
// of the registers that hold writeKeyLog's arguments on entry, and of the
// one that holds the current goroutine (g). The receiver (*Config) comes
// first and is not read by that probe; each string is a pointer and a
// length; each slice a pointer, a length and a capacity (the capacity is
// not read). recv is the first integer argument register, which holds a
// method's pointer receiver: the *Conn of (*Conn).Read and (*Conn).Write
// for the connections probe (conns.go).
type argRegs struct {
	recv                 int16
	labelPtr, labelLen   int16
	randomPtr, randomLen int16
	secretPtr, secretLen int16
	g                    int16
}

// argRegsByArch is the table, by GOARCH.
//
// amd64: integer arguments go in RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11
// (abi-internal.md, "amd64 architecture"): receiver RAX, label RBX/RCX,
// clientRandom RDI/RSI/R8, secret R9/R10/R11; the current goroutine is in
// R14 ("amd64 architecture", fixed registers). The offsets are those of
// struct pt_regs in the kernel's arch/x86/include/asm/ptrace.h (r15 0, r14 8,
// r13 16, r12 24, bp 32, bx 40, r11 48, r10 56, r9 64, r8 72, ax 80, cx 88,
// dx 96, si 104, di 112).
//
// arm64: integer arguments go in R0-R15 (abi-internal.md, "arm64
// architecture"): receiver X0, label X1/X2, clientRandom X3/X4/X5, secret
// X6/X7/X8; the current goroutine is in R28. struct pt_regs starts with struct user_pt_regs, whose regs[31]
// put Xi at 8*i (arch/arm64/include/uapi/asm/ptrace.h).
var argRegsByArch = map[string]argRegs{
	"amd64": {
		recv:     80,               // rax
		labelPtr: 40, labelLen: 88, // rbx, rcx
		randomPtr: 112, randomLen: 104, // rdi, rsi
		secretPtr: 64, secretLen: 56, // r9, r10
		g: 8, // r14
	},
	"arm64": {
		recv:     8 * 0,
		labelPtr: 8 * 1, labelLen: 8 * 2,
		randomPtr: 8 * 3, randomLen: 8 * 4,
		secretPtr: 8 * 6, secretLen: 8 * 7,
		g: 8 * 28,
	},
}

// regsFor returns the table of arch, or an error wrapping ErrUnsupportedArch.
func regsFor(arch string) (argRegs, error) {
	r, ok := argRegsByArch[arch]
	if !ok {
		return argRegs{}, fmt.Errorf("%w: %s (amd64 and arm64 are supported)", ErrUnsupportedArch, arch)
	}
	return r, nil
}
