package app

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// GCHeadroom is how much the heap may grow past its live data before a
// collection, at least: see PaceGC.
const GCHeadroom = 64 << 20

// PaceGC lets the heap grow by at least headroom bytes past its live data
// between collections, and by the live data itself (GOGC=100, Go's default)
// when that is more. A server whose live heap is a few MiB but that allocates
// tens of MiB a second for its calls would otherwise collect many times a
// second, at a cost of a tenth of its CPU; with headroom it collects about
// once a second, for at most headroom more memory. A large live heap keeps
// Go's default. It changes nothing when GOGC is set: the operator's setting
// wins. GOMEMLIMIT, when set, still bounds the heap.
//
// The setting is revised after every collection, for the live heap it
// found.
func PaceGC(headroom uint64) {
	if _, set := os.LookupEnv("GOGC"); set || headroom == 0 {
		return
	}
	p := &gcPacer{headroom: headroom, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	p.adjust()
	p.arm()
}

type gcPacer struct {
	headroom uint64
	sample   []metrics.Sample
	percent  int
}

// arm has adjust run after the next collection: the finalizer of an object
// nothing refers to runs once a collection has found it unreachable.
func (p *gcPacer) arm() {
	sentinel := new([16]byte)
	runtime.SetFinalizer(sentinel, func(*[16]byte) {
		p.adjust()
		p.arm()
	})
}

func (p *gcPacer) adjust() {
	metrics.Read(p.sample)
	live := uint64(0)
	if p.sample[0].Value.Kind() == metrics.KindUint64 {
		live = p.sample[0].Value.Uint64()
	}
	percent := gcPercent(live, p.headroom)
	if percent != p.percent {
		p.percent = percent
		debug.SetGCPercent(percent)
	}
}

// gcPercent is the GOGC that lets a heap of live bytes grow by headroom, and
// at least 100 (Go's default). The runtime also scales its minimum heap,
// 4 MiB, by GOGC/100: that minimum must not pass live + headroom either.
func gcPercent(live, headroom uint64) int {
	const lowest, minHeap = 100, 4 << 20
	percent := (live + headroom) * 100 / minHeap
	if live > 0 {
		percent = min(percent, headroom*100/live)
	}
	return int(max(percent, lowest))
}
