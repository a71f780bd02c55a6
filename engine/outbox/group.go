package outbox

import "sync"

// Group commit of submits.
const (
	// Committers is how many submit transactions run at once. While they are all busy, new
	// submits queue, and the next committer to come free takes the whole queue (up to
	// BatchMax) into one transaction: under load the batches grow on their own, and a lone
	// submit still commits at once.
	Committers = 2
	// BatchMax bounds the submits of one transaction.
	BatchMax = 500
)

// group queues submits for the committers. It has no goroutine of its own: a submit that finds
// fewer than Committers at work starts one, and a committer ends when the queue is empty.
type group[S any] struct {
	commit  func(batch []S)
	mu      sync.Mutex
	queue   []S
	running int
}

// Enqueue queues submits for their transaction. A committer (at most Committers at a time)
// hands them, with whatever else has queued, to the commit function New was given, in batches
// of up to BatchMax; the commit answers each submitter. Enqueue returns at once.
func (o *Outbox[S]) Enqueue(subs ...S) {
	g := &o.group
	if len(subs) == 0 {
		return
	}
	g.mu.Lock()
	g.queue = append(g.queue, subs...)
	start := g.running < Committers
	if start {
		g.running++
	}
	g.mu.Unlock()
	if start {
		go g.run()
	}
}

// take removes the next batch from the queue; nil (and one committer less) when it is empty.
func (g *group[S]) take() []S {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := min(len(g.queue), BatchMax)
	if n == 0 {
		g.running--
		g.queue = nil // let the backing array go
		return nil
	}
	batch := make([]S, n)
	copy(batch, g.queue)
	g.queue = g.queue[n:]
	return batch
}

// run commits batches until the queue is empty.
func (g *group[S]) run() {
	for batch := g.take(); batch != nil; batch = g.take() {
		g.commit(batch)
	}
}
