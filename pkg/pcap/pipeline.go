package pcap

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// Read runs on three goroutines, one stage each, so that two cores share
// the work: the reader (capture reading, packet decoding, TCP reassembly),
// the decoder (the switchboard and its followers: pkg/wire), and the
// printer (the caller's sink). Each stage hands the next one batches, in
// order, through a fixed number of buffers, so the output is the same as
// on one goroutine, whatever the timing, and memory stays bounded: the
// reader waits while the decoder has all the op buffers, the decoder while
// the printer has all the record buffers (or records holding more than 1 MiB).

// Bounds of the queues between the stages.
const (
	// opBatchBytes is the capacity of one op buffer's byte arena: the
	// reassembled bytes a batch carries (a longer delivery is cut into
	// pieces of this size; HTTP decoding does not depend on the cut).
	opBatchBytes = 64 << 10
	// opBatchOps is the most ops in one batch.
	opBatchOps = 256
	// opBatches is the number of op buffers: 8 x 64 KiB of bytes waiting
	// to be decoded at most. Several small buffers rather than a few
	// large ones let each stage go on while the other is held up for a
	// moment (by a 200 KB event, by the garbage collector).
	opBatches = 8
	// recBatchRecords is the most records in one record batch.
	recBatchRecords = 128
	// recBatches is the number of record buffers.
	recBatches = 4
	// maxQueuedBytes bounds the memory of the records that wait to be
	// printed, 1 MiB as recordBytes counts it: the decoder waits while
	// more is queued (a record larger than this waits alone).
	maxQueuedBytes = 1 << 20
)

// opKind says what an op asks the decoder to do.
type opKind uint8

const (
	opData  opKind = iota // bytes of one direction: wire.Conn ClientData/ServerData
	opGap                 // bytes lost: ClientGap/ServerGap
	opClose               // a direction ended: CloseClient/CloseServer
	opEmit                // a record the reader made (a problem, a connection note)
	opRetry               // new TLS secrets came: connections waiting for keys go on (wire.Conn RetryKeys)
)

// op is one step of the decoder, in capture order.
type op struct {
	kind   opKind
	client bool // the client's direction (opData, opGap, opClose)
	how    exchange.Ending
	hc     *wire.Conn
	// data is arena[from:to] of the op's batch (opData).
	from, to int
	n        int64 // bytes lost (opGap)
	t        time.Time
	// packet is the number of the packet being read when the op was
	// made; problems found while doing it are located there.
	packet int64
	gap    gapContext // opGap: the packet after the gap
	rec    record.Record
}

// opBatch is a buffer of ops and the bytes they carry.
type opBatch struct {
	ops   []op
	arena []byte
}

// opQueue is the reader's end of the queue to the decoder.
type opQueue struct {
	cur  *opBatch
	work chan *opBatch
	free chan *opBatch
	made int // batches allocated, up to opBatches
	// maxFeed, when not 0, bounds the bytes of one opData (Options.MaxFeed).
	maxFeed int
	// While reassembly flushes connections (hold to release), ops are
	// kept here, their bytes in heldData, to be queued connection by
	// connection: gopacket visits the connections in map order.
	holding  bool
	held     []op
	heldData []byte
}

func newOpQueue(maxFeed int) *opQueue {
	return &opQueue{work: make(chan *opBatch, opBatches), free: make(chan *opBatch, opBatches), maxFeed: maxFeed}
}

// nextBatch returns a free batch, a new one (made by mk) while fewer than
// limit were made (a small capture needs one), or else the first one the
// next stage gives back.
func nextBatch[B any](free chan B, made *int, limit int, mk func() B) B {
	select {
	case b := <-free:
		return b
	default:
	}
	if *made < limit {
		*made++
		return mk()
	}
	return <-free
}

// batch returns the batch being filled.
func (q *opQueue) batch() *opBatch {
	if q.cur == nil {
		q.cur = nextBatch(q.free, &q.made, opBatches, func() *opBatch {
			return &opBatch{ops: make([]op, 0, opBatchOps), arena: make([]byte, 0, opBatchBytes)}
		})
	}
	return q.cur
}

// ship hands the batch being filled to the decoder.
func (q *opQueue) ship() {
	if q.cur != nil {
		q.work <- q.cur
		q.cur = nil
	}
}

// add queues o.
func (q *opQueue) add(o op) {
	if q.holding {
		q.held = append(q.held, o)
		return
	}
	b := q.batch()
	b.ops = append(b.ops, o)
	if len(b.ops) == cap(b.ops) {
		q.ship()
	}
}

// addData queues bytes of one direction, copied (gopacket reuses its
// pages once the reassembly callback returns), in pieces of at most
// opBatchBytes and, when not 0, maxFeed bytes.
func (q *opQueue) addData(hc *wire.Conn, client bool, p []byte, t time.Time, packet int64) {
	if q.holding {
		from := len(q.heldData)
		q.heldData = append(q.heldData, p...)
		q.held = append(q.held, op{kind: opData, hc: hc, client: client, from: from, to: len(q.heldData), t: t, packet: packet})
		return
	}
	for len(p) > 0 {
		b := q.batch()
		room := cap(b.arena) - len(b.arena)
		if room == 0 {
			q.ship()
			continue
		}
		n := min(len(p), room)
		if q.maxFeed > 0 {
			n = min(n, q.maxFeed)
		}
		from := len(b.arena)
		b.arena = append(b.arena, p[:n]...)
		p = p[n:]
		q.add(op{kind: opData, hc: hc, client: client, from: from, to: from + n, t: t, packet: packet})
	}
}

// hold keeps the ops that follow until release.
func (q *opQueue) hold() { q.holding = true }

// release queues the ops kept since hold, connection by connection in the
// order the connections were first seen (their IDs), each connection's in
// the order they came. What they hold is bounded by what reassembly had
// buffered (Options.MaxBufferedTotal pages), as only a flush's data is
// held, not the records decoding it makes, which can be many times larger
// (a record per 1-byte chunk).
func (q *opQueue) release() {
	q.holding = false
	held := q.held
	slices.SortStableFunc(held, func(a, b op) int { return cmp.Compare(a.connID(), b.connID()) })
	for _, o := range held {
		if o.kind == opData {
			q.addData(o.hc, o.client, q.heldData[o.from:o.to], o.t, o.packet)
		} else {
			q.add(o)
		}
	}
	clear(held)
	q.held = held[:0]
	q.heldData = q.heldData[:0]
	if cap(q.heldData) > opBatchBytes {
		q.heldData = nil
	}
}

// connID returns the ID of the connection o is about, 0 for none.
func (o *op) connID() int {
	if o.hc != nil {
		return o.hc.Record().ID
	}
	return record.ConnOf(o.rec).Key()
}

// close ends the queue: the decoder finishes what it has, then returns.
func (q *opQueue) close() {
	q.ship()
	close(q.work)
}

// decoder is the second stage: it does the ops in order, and is the sink
// of every connection's decoding (the followers' Locate is its locate).
type decoder struct {
	name string
	out  *recQueue
	// packet and gap locate the problems of the op being done.
	packet int64
	gap    gapContext
	// open holds, in a live capture (ReadLive), the connections with a
	// direction still open, and which of their directions closed (1:
	// client, 2: server), for opRetry; nil otherwise.
	open map[*wire.Conn]uint8
}

// track keeps d.open up to date with op o.
func (d *decoder) track(o *op) {
	switch o.kind {
	case opData, opGap:
		if _, ok := d.open[o.hc]; !ok {
			d.open[o.hc] = 0
		}
	case opClose:
		bit := uint8(2)
		if o.client {
			bit = 1
		}
		if d.open[o.hc] |= bit; d.open[o.hc] == 3 {
			delete(d.open, o.hc)
		}
	}
}

// run does the ops of every batch, giving each batch back once done.
// Whenever no batch waits, it ships the records it has to the printer
// stage: the reader may be waiting for input (a pipe from tcpdump, a
// followed file), and what was decoded must be shown meanwhile.
func (d *decoder) run(q *opQueue) {
	for b := range q.work {
		for i := range b.ops {
			d.do(b, &b.ops[i])
		}
		clear(b.ops) // drop the references to records and connections
		b.ops = b.ops[:0]
		b.arena = b.arena[:0]
		q.free <- b
		if len(q.work) == 0 {
			d.out.ship()
		}
		if decodedHook != nil {
			decodedHook()
		}
	}
	d.out.close()
}

// emitHook, when set (by tests: export_test.go), is called by the decoder
// with every record as it is made, on the decoder's goroutine.
var emitHook func(record.Record)

// decodedHook, when set (by tests: export_test.go), is called by the
// decoder after each batch, where no decoding is half done: the heap is
// measured there.
var decodedHook func()

func (d *decoder) do(b *opBatch, o *op) {
	d.packet = o.packet
	if d.open != nil {
		d.track(o)
	}
	switch o.kind {
	case opData:
		if o.client {
			o.hc.ClientData(b.arena[o.from:o.to], o.t)
		} else {
			o.hc.ServerData(b.arena[o.from:o.to], o.t)
		}
	case opGap:
		d.gap = o.gap
		if o.client {
			o.hc.ClientGap(o.n, o.t)
		} else {
			o.hc.ServerGap(o.n, o.t)
		}
		d.gap = gapContext{}
	case opClose:
		if o.client {
			o.hc.CloseClient(o.how, o.t)
		} else {
			o.hc.CloseServer(o.how, o.t)
		}
	case opEmit:
		d.Emit(o.rec)
	case opRetry:
		for hc := range d.open {
			hc.RetryKeys(o.t)
		}
	}
}

// Emit sends r on to the printer stage.
func (d *decoder) Emit(r record.Record) {
	if emitHook != nil {
		emitHook(r)
	}
	d.out.add(r)
}

// locate adds the file name and the packet number to a problem.
func (d *decoder) locate(p *record.Problem) {
	p.File = d.name
	if p.Packet == 0 {
		p.Packet = d.packet
		// Problems found while reporting a gap (the gap itself, the
		// event or chunk framing it damaged) belong to the packet after
		// it, the one Wireshark marks "previous segment not captured",
		// not to the later packet whose arrival made reassembly give up
		// waiting.
		if d.gap.packet > 0 {
			p.Packet = d.gap.packet
		}
	}
	if d.gap.snap && p.Kind == exchange.KindMissing {
		p.Hint = "packets of this connection were cut short by the snaplen; capture with -s 0"
	}
}

// recBatch is a buffer of records for the printer stage.
type recBatch struct {
	recs  []record.Record
	bytes int // recordBytes of recs
}

// recordBytes estimates the memory a record holds while it waits to be
// printed, in bytes: what can be large (an event's object and chunk list
// with every chunk's size line, a header section, trailers, a problem's
// text) by its length, plus 256 for the rest.
func recordBytes(r record.Record) int {
	n := 256
	switch v := r.(type) {
	case *record.Event:
		n += len(v.Object) + len(v.Diff)
		for _, c := range v.Chunks {
			n += 96 + len(c.SizeLine) + len(c.Header)
		}
	case *record.Request:
		n += len(v.Target) + headerBytes(v.Header)
	case *record.Response:
		n += headerBytes(v.Header)
	case *record.End:
		n += len(v.LastChunk) + 8*len(v.ChunkSizes) + len(v.BodyText)
		for _, t := range v.Trailers {
			n += 16 + len(t)
		}
	case *record.Problem:
		n += len(v.Detail) + len(v.Hint)
	}
	return n
}

// headerBytes estimates the memory of a header section, in bytes.
func headerBytes(h map[string][]string) int {
	n := 0
	for k, vs := range h {
		n += 48 + len(k)
		for _, v := range vs {
			n += 16 + len(v)
		}
	}
	return n
}

// recQueue is the decoder's end of the queue to the printer stage.
type recQueue struct {
	cur  *recBatch
	work chan *recBatch
	free chan *recBatch
	made int // batches allocated, up to recBatches
	// queued counts the recordBytes shipped and not yet printed.
	mu     sync.Mutex
	cond   sync.Cond
	queued int
}

func newRecQueue() *recQueue {
	q := &recQueue{work: make(chan *recBatch, recBatches), free: make(chan *recBatch, recBatches)}
	q.cond.L = &q.mu
	return q
}

// add queues r; the batch is shipped when it is full or holds more than
// a quarter of maxQueuedBytes.
func (q *recQueue) add(r record.Record) {
	if q.cur == nil {
		q.cur = nextBatch(q.free, &q.made, recBatches, func() *recBatch {
			return &recBatch{recs: make([]record.Record, 0, recBatchRecords)}
		})
	}
	b := q.cur
	b.recs = append(b.recs, r)
	b.bytes += recordBytes(r)
	if len(b.recs) == cap(b.recs) || b.bytes > maxQueuedBytes/4 {
		q.ship()
	}
}

// ship hands the batch being filled to the printer stage, first waiting
// while the bytes queued before it would go past maxQueuedBytes.
func (q *recQueue) ship() {
	b := q.cur
	if b == nil {
		return
	}
	q.cur = nil
	q.mu.Lock()
	for q.queued > 0 && q.queued+b.bytes > maxQueuedBytes {
		q.cond.Wait()
	}
	q.queued += b.bytes
	q.mu.Unlock()
	q.work <- b
}

func (q *recQueue) close() {
	q.ship()
	close(q.work)
}

// run emits the records of every batch to sink, and flushes the sink
// (record.Flush) whenever no batch waits.
func (q *recQueue) run(sink record.Sink) {
	for b := range q.work {
		for _, r := range b.recs {
			sink.Emit(r)
		}
		if len(q.work) == 0 {
			record.Flush(sink)
		}
		q.mu.Lock()
		q.queued -= b.bytes
		q.cond.Signal()
		q.mu.Unlock()
		clear(b.recs)
		b.recs = b.recs[:0]
		b.bytes = 0
		q.free <- b
	}
}
