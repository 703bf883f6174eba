package gotls

// The BPF program placed on writeKeyLog's entry, written with cilium/ebpf's
// asm package, and the record it hands to user space.

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// Bounds of what one record carries, in bytes. Go's labels are 13-31 bytes
// (crypto/tls/common.go's keyLog* constants), its client randoms 32 and its
// secrets 32 or 48 (SHA-256 and SHA-384 suites; a TLS 1.2 master secret is
// 48). A call outside these bounds is skipped and counted (Probe.Skipped),
// never cut short: a cut secret would decrypt nothing.
const (
	maxLabel  = 64
	randomLen = 32
	maxSecret = 64
)

// The record, in the host's byte order (amd64 and arm64 are little-endian):
//
//	offset  size
//	     0     8  bpf_get_current_pid_tgid(): tgid<<32 | thread id
//	     8     8  the current goroutine (the runtime's g pointer)
//	    16     4  label length
//	    20     4  secret length
//	    24    64  label
//	    88    32  client random
//	   120    64  secret
const (
	recPIDTGID    = 0
	recG          = 8
	recLabelLen   = 16
	recSecretLen  = 20
	recLabel      = 24
	recRandom     = recLabel + maxLabel
	recSecret     = recRandom + randomLen
	recordSize    = recSecret + maxSecret // 184
	recordOnStack = -8 - recordSize       // the perf path's record, under the counter key
)

// Slots of the counters map (an array of uint64).
const (
	counterLost     = 0 // a record could not be reserved or written: the buffer was full
	counterSkipped  = 1 // lengths out of bounds, or argument memory unreadable
	counterConnLost = 2 // a connection's record could not be written (conns.go)
	numCounters     = 3
)

// Flags of bpf_ringbuf_query and bpf_ringbuf_submit (include/uapi/linux/bpf.h).
const (
	rbNoWakeup    = 1 // BPF_RB_NO_WAKEUP
	rbForceWakeup = 2 // BPF_RB_FORCE_WAKEUP
	rbAvailData   = 0 // BPF_RB_AVAIL_DATA: bytes written, not yet read
)

// wakeAt is how full the ring buffer gets, in bytes, before a record wakes
// the reader: a quarter (about 340 records). Below it the reader finds the
// records when it next looks (pollInterval). Waking it for every record
// cost 18 µs a call against 15 on a quiet 2-core machine, and 39 with a
// load of 4-5 (BenchmarkHandshake, bench/RESULTS.md).
const wakeAt = RingBufferSize / 4

// Names the program's map references resolve against.
const (
	mapEvents   = "events"
	mapCounters = "counters"
)

// output is where the program writes its records.
type output int

const (
	// toRing: a BPF ring buffer (Linux 5.8): bpf_ringbuf_reserve, the
	// arguments copied into the reserved record, bpf_ringbuf_submit.
	toRing output = iota
	// toPerf: a perf event array, for kernels without ring buffers: the
	// record is built on the BPF stack and copied by bpf_perf_event_output
	// into this CPU's buffer.
	toPerf
)

// program returns the instructions of the probe for arch's registers,
// writing to out. On entry it reads writeKeyLog's label, clientRandom and
// secret (pointer and length each) and the current goroutine from the
// context, skips the call unless
// the label is at most maxLabel bytes, the random exactly randomLen and the
// secret at most maxSecret, copies the three with bpf_probe_read_user into a
// record with bpf_get_current_pid_tgid, the goroutine and the two lengths,
// and hands the record on (to the ring buffer waking the reader only past
// wakeAt); a record that finds its buffer full is counted in
// counters[counterLost], a skipped call in counters[counterSkipped]. Helper
// semantics: the kernel's include/uapi/linux/bpf.h.
func program(arch string, out output) (asm.Instructions, error) {
	r, err := regsFor(arch)
	if err != nil {
		return nil, err
	}
	// R6 the context, R7 the record, R8 the label length, R9 the secret
	// length: the registers helpers preserve.
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, r.randomLen, asm.DWord),
		asm.JNE.Imm(asm.R2, randomLen, "skipped"),
		asm.LoadMem(asm.R8, asm.R6, r.labelLen, asm.DWord),
		asm.JGT.Imm(asm.R8, maxLabel, "skipped"),
		asm.LoadMem(asm.R9, asm.R6, r.secretLen, asm.DWord),
		asm.JGT.Imm(asm.R9, maxSecret, "skipped"),
	}
	unreadable := "skipped"
	switch out {
	case toRing:
		unreadable = "discard"
		insns = append(insns,
			asm.LoadMapPtr(asm.R1, 0).WithReference(mapEvents),
			asm.Mov.Imm(asm.R2, recordSize),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnRingbufReserve.Call(),
			asm.JEq.Imm(asm.R0, 0, "lost"),
			asm.Mov.Reg(asm.R7, asm.R0),
		)
	case toPerf:
		// Zeroed first: the verifier lets bpf_perf_event_output read
		// only stack it has seen written.
		insns = append(insns, asm.Mov.Imm(asm.R1, 0))
		for off := 0; off < recordSize; off += 8 {
			insns = append(insns, asm.StoreMem(asm.RFP, int16(recordOnStack+off), asm.R1, asm.DWord))
		}
		insns = append(insns,
			asm.Mov.Reg(asm.R7, asm.RFP),
			asm.Add.Imm(asm.R7, recordOnStack),
		)
	default:
		return nil, fmt.Errorf("output %d", out)
	}
	insns = append(insns,
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.R7, recPIDTGID, asm.R0, asm.DWord),
		asm.LoadMem(asm.R1, asm.R6, r.g, asm.DWord),
		asm.StoreMem(asm.R7, recG, asm.R1, asm.DWord),
		asm.StoreMem(asm.R7, recLabelLen, asm.R8, asm.Word),
		asm.StoreMem(asm.R7, recSecretLen, asm.R9, asm.Word),
	)
	read := func(dst int32, size asm.Instruction, src int16) {
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.R7),
			asm.Add.Imm(asm.R1, dst),
			size,
			asm.LoadMem(asm.R3, asm.R6, src, asm.DWord),
			asm.FnProbeReadUser.Call(),
			asm.JNE.Imm(asm.R0, 0, unreadable),
		)
	}
	read(recLabel, asm.Mov.Reg(asm.R2, asm.R8), r.labelPtr)
	read(recRandom, asm.Mov.Imm(asm.R2, randomLen), r.randomPtr)
	read(recSecret, asm.Mov.Reg(asm.R2, asm.R9), r.secretPtr)
	switch out {
	case toRing:
		// Submitted without waking the reader, which looks every
		// pollInterval, unless the ring holds more than wakeAt bytes.
		insns = append(insns,
			asm.LoadMapPtr(asm.R1, 0).WithReference(mapEvents),
			asm.Mov.Imm(asm.R2, rbAvailData),
			asm.FnRingbufQuery.Call(),
			asm.Mov.Imm(asm.R2, rbNoWakeup),
			asm.JLE.Imm(asm.R0, wakeAt, "submit"),
			asm.Mov.Imm(asm.R2, rbForceWakeup),
			asm.Mov.Reg(asm.R1, asm.R7).WithSymbol("submit"),
			asm.FnRingbufSubmit.Call(),
			asm.Ja.Label("exit"),
			asm.Mov.Reg(asm.R1, asm.R7).WithSymbol("discard"),
			asm.Mov.Imm(asm.R2, 0),
			asm.FnRingbufDiscard.Call(),
			asm.Ja.Label("skipped"),
		)
	case toPerf:
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, 0).WithReference(mapEvents),
			asm.LoadImm(asm.R3, 0xffffffff, asm.DWord), // BPF_F_CURRENT_CPU
			asm.Mov.Reg(asm.R4, asm.R7),
			asm.Mov.Imm(asm.R5, recordSize),
			asm.FnPerfEventOutput.Call(),
			asm.JNE.Imm(asm.R0, 0, "lost"),
			asm.Ja.Label("exit"),
		)
	}
	// counters[key]++, the key (a uint32) at R10-4.
	insns = append(insns,
		asm.StoreImm(asm.RFP, -4, counterLost, asm.Word).WithSymbol("lost"),
		asm.Ja.Label("count"),
		asm.StoreImm(asm.RFP, -4, counterSkipped, asm.Word).WithSymbol("skipped"),
		asm.Mov.Reg(asm.R2, asm.RFP).WithSymbol("count"),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, 0).WithReference(mapCounters),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	)
	return insns, nil
}

// decode reads a record the program wrote, and returns its secret and the
// goroutine that made the call. Records are checked again here, as bytes
// from another process: lengths within bounds, a label of upper-case
// letters, digits and underscores (every label crypto/tls writes), so that a
// key log line made from it is one well-formed line.
func decode(b []byte) (Secret, uint64, error) {
	if len(b) < recordSize {
		return Secret{}, 0, fmt.Errorf("record of %d bytes, want %d", len(b), recordSize)
	}
	bo := binary.NativeEndian
	pidTGID := bo.Uint64(b[recPIDTGID:])
	labelLen, secretLen := bo.Uint32(b[recLabelLen:]), bo.Uint32(b[recSecretLen:])
	if labelLen == 0 || labelLen > maxLabel || secretLen == 0 || secretLen > maxSecret {
		return Secret{}, 0, fmt.Errorf("record with a %d-byte label and a %d-byte secret", labelLen, secretLen)
	}
	label := b[recLabel : recLabel+labelLen]
	for _, c := range label {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return Secret{}, 0, fmt.Errorf("record whose label holds the byte %#x", c)
		}
	}
	s := Secret{
		PID:    uint32(pidTGID >> 32),
		TID:    uint32(pidTGID),
		Label:  string(label),
		Secret: append([]byte(nil), b[recSecret:recSecret+secretLen]...),
	}
	copy(s.ClientRandom[:], b[recRandom:recRandom+randomLen])
	return s, bo.Uint64(b[recG:]), nil
}
