package event

import "sync/atomic"

// DefaultBudgetBytes is the default Budget: 256 MiB, four events of the
// largest default size (DefaultMaxEventBytes) at once.
const DefaultBudgetBytes = 256 << 20

// KindBudget is the problem kind of an event or header section dropped
// because the buffers of all connections together were full.
const KindBudget = "memory budget exceeded"

// Budget bounds the bytes that all connections' buffers hold at once while
// they wait for the rest of something: header sections, watch events in
// progress, and decoded events waiting for their chunk to end. The
// per-connection bounds (--max-header-bytes, --max-event-bytes) multiply
// with the number of connections; a Budget does not. A nil *Budget
// imposes no bound. It is safe for concurrent use.
type Budget struct {
	max  int64
	held atomic.Int64
}

// NewBudget returns a Budget of max bytes (DefaultBudgetBytes when max ≤ 0).
func NewBudget(max int64) *Budget {
	if max <= 0 {
		max = DefaultBudgetBytes
	}
	return &Budget{max: max}
}

// Reserve takes n bytes from the budget. It returns false, taking nothing,
// when that would hold more than the budget's bytes.
func (b *Budget) Reserve(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		h := b.held.Load()
		if h+n > b.max {
			return false
		}
		if b.held.CompareAndSwap(h, h+n) {
			return true
		}
	}
}

// Release gives back n bytes taken with Reserve.
func (b *Budget) Release(n int64) {
	if b != nil && n > 0 {
		b.held.Add(-n)
	}
}

// Held returns the bytes reserved now.
func (b *Budget) Held() int64 {
	if b == nil {
		return 0
	}
	return b.held.Load()
}

// Max returns the budget's size in bytes (0 for a nil Budget: no bound).
func (b *Budget) Max() int64 {
	if b == nil {
		return 0
	}
	return b.max
}
