// Package testutil holds helpers shared by kwatch's tests.
package testutil

import "runtime"

// HeapPeak runs f and returns how much the live heap grew, in bytes, over
// what was live before, at its highest among the moments f calls probe and
// f's end. probe collects garbage and reads runtime.MemStats, so that only
// live objects count; f calls it (from the goroutine that runs f) as it
// goes, say after every few pieces of input. Tests use it to hold memory
// bounds on hostile input without timing anything.
func HeapPeak(f func(probe func())) uint64 {
	live := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := live()
	var peak uint64
	probe := func() { peak = max(peak, live()) }
	f(probe)
	probe()
	if peak < base {
		return 0
	}
	return peak - base
}
