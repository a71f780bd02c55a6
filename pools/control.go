package pools

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuorch/orchestrator/store"
)

// ReasonEvicted is the last_error of the attempts an eviction takes away from a pool's workers
// (engine.Rescue retries them elsewhere).
const ReasonEvicted = "pool evicted"

// DrainPool moves a starting or running pool to draining and tells each of its workers to
// drain: they stop reading, finish the jobs in flight, release their leases, deregister and
// exit; the reconciler moves the pool to stopped once none is left. Draining a pool that
// drains or stopped already changes nothing (changed false); an evicted pool cannot drain.
func (s *Service) DrainPool(ctx context.Context, id, actor string) (p store.Pool, changed bool, err error) {
	return s.endOnePool(ctx, id, store.PoolDraining, "drain", "drained by "+actor, actor)
}

// DrainAll drains every starting or running pool and returns those it drained.
func (s *Service) DrainAll(ctx context.Context, actor string) ([]store.Pool, error) {
	live, err := s.st.PoolList(ctx, store.PoolStarting, store.PoolRunning)
	if err != nil {
		return nil, fmt.Errorf("drain all pools: %w", err)
	}
	var drained []store.Pool
	for _, lp := range live {
		p, changed, err := s.endPool(ctx, lp.ID, store.PoolDraining, "drained by "+actor+" (drain all)", actor)
		if errors.Is(err, ErrIllegalTransition) || errors.Is(err, store.ErrNotFound) {
			continue // evicted or deleted meanwhile
		}
		if err != nil {
			return drained, fmt.Errorf("drain all pools: pool %s: %w", lp.ID, err)
		}
		if changed {
			drained = append(drained, p)
		}
	}
	return drained, nil
}

// EvictPool takes a pool's workers away at once: the pool becomes evicted, its workers are told
// to stop (local ones get SIGTERM, then SIGKILL after pools.evict_grace), and the leader's
// reconciler rescues the jobs they hold (engine.Rescue, "pool evicted"): their leases end and
// the jobs are retried on other workers. Evicting an evicted or stopped pool changes nothing.
func (s *Service) EvictPool(ctx context.Context, id, actor string) (p store.Pool, changed bool, err error) {
	return s.endOnePool(ctx, id, store.PoolEvicted, "evict", "evicted by "+actor, actor)
}

// endOnePool is endPool for DrainPool and EvictPool: its error names the verb ("drain",
// "evict") and the pool.
func (s *Service) endOnePool(ctx context.Context, id string, to store.PoolStatus, verb, reason, actor string) (store.Pool, bool, error) {
	p, changed, err := s.endPool(ctx, id, to, reason, actor)
	if err != nil {
		return store.Pool{}, false, fmt.Errorf("%s pool %s: %w", verb, id, err)
	}
	return p, changed, nil
}

// endPool moves a pool to draining or evicted and raises its workers' instruction to match,
// in one transaction, then wakes the reconciler.
func (s *Service) endPool(ctx context.Context, id string, to store.PoolStatus, reason, actor string) (store.Pool, bool, error) {
	var (
		p       store.Pool
		changed bool
	)
	err := s.st.WithTx(ctx, func(tx store.Tx) error {
		now := s.nowUTC()
		var err error
		changed = false
		if p, err = tx.PoolGet(ctx, id, true); err != nil {
			return err
		}
		if p.Status == to || p.Status == store.PoolStopped {
			return nil
		}
		ev, err := Transition(ctx, tx, Change{Pool: &p, To: to, Reason: reason, Now: now, Actor: actor})
		if err != nil {
			return err
		}
		events := []store.AuditEvent{ev}
		ws, err := tx.WorkerList(ctx, id, false)
		if err != nil {
			return err
		}
		for i := range ws {
			if ws[i].Status == store.WorkerOffline {
				continue
			}
			iev, err := instruct(ctx, tx, &ws[i], impliedInstruction(to), now, actor, reason)
			if err != nil {
				return err
			}
			if iev != nil {
				events = append(events, *iev)
			}
		}
		changed = true
		return tx.AuditInsert(ctx, events)
	})
	if err != nil {
		return store.Pool{}, false, err
	}
	if changed {
		s.log.Info("pool "+string(to), "pool_id", id, "actor", actor)
		s.Reconcile()
	}
	return p, changed, nil
}
