package bind

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// maxSharedList bounds a shared project list whose callers set no deadline
// (and caps one whose callers did): the list no longer belongs to any one
// caller, so something must stop it.
const maxSharedList = 30 * time.Second

// projectLists coalesces the full project lists of concurrent binds.
//
// A bind outside the pass must list every project of the cluster to find an
// adoptable one (see findBound). When many fresh namespaces bind at once (a
// storm of first pods), each bind listing on its own makes N identical lists,
// all pages each, while Run:ai is also busy with their N creates. Here they
// share: a caller joins the next list that starts after it asked, never one
// already in flight, because a project created just before the caller asked
// (by another replica, or by an admin) must be in what it sees. So:
//
//   - no list in flight: one starts now;
//   - a list in flight: the caller waits for it to end, and every caller
//     that arrived meanwhile shares one new list started then.
//
// N concurrent callers thus cost at most two lists. A list runs on a context
// detached from any one caller's cancellation (the others still wait on it),
// bounded by the latest deadline of its callers and by maxSharedList, so a
// short admission deadline does not cut the list short for a caller that has
// more time. Each caller stops waiting when its own context ends; a list
// whose callers have all gone still runs to its end (bounded as above). A
// list's error goes to all its callers and is not remembered: the next round
// lists again. The zero value is ready to use.
type projectLists struct {
	mu     sync.Mutex
	states map[string]*listState // by cluster id
}

// listState is one cluster's rounds: the list in flight and the one that
// will start when it ends.
type listState struct {
	running *listRound
	next    *listRound
}

// listRound is one list and the callers sharing it. projects and err are
// written before done is closed and only read after.
type listRound struct {
	done     chan struct{}
	projects []runai.Project
	err      error

	// Guarded by projectLists.mu until the round starts.
	list      listFunc
	base      context.Context // values (logger, trace) of the first caller
	waiters   int
	deadline  time.Time // the latest caller deadline
	unbounded bool      // a caller had no deadline
}

// listFunc lists every project of a cluster (runai.API.ListProjects with no
// name filter).
type listFunc func(ctx context.Context, clusterID string) ([]runai.Project, error)

// get returns the projects of clusterID from a list that started after this
// call. The slice is shared with the other callers of that list: read it,
// never modify it.
func (l *projectLists) get(ctx context.Context, clusterID string, list listFunc) ([]runai.Project, error) {
	r := l.join(ctx, clusterID, list)
	select {
	case <-r.done:
		return r.projects, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the list of Run:ai projects: %w", ctx.Err())
	}
}

// join registers the caller with the round it must wait for, starting that
// round when nothing is in flight.
func (l *projectLists) join(ctx context.Context, clusterID string, list listFunc) *listRound {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.states == nil {
		l.states = map[string]*listState{}
	}
	st := l.states[clusterID]
	if st == nil {
		st = &listState{}
		l.states[clusterID] = st
	}
	var r *listRound
	switch {
	case st.running == nil:
		r = &listRound{done: make(chan struct{}), list: list, base: ctx}
		st.running = r
		defer l.start(st, r, clusterID) // after the caller is counted in
	case st.next != nil:
		r = st.next
	default:
		r = &listRound{done: make(chan struct{}), list: list, base: ctx}
		st.next = r
	}
	r.waiters++
	if dl, ok := ctx.Deadline(); !ok {
		r.unbounded = true
	} else if dl.After(r.deadline) {
		r.deadline = dl
	}
	return r
}

// start runs round r in the background; l.mu is held. When r ends, the
// round that gathered callers meanwhile starts.
func (l *projectLists) start(st *listState, r *listRound, clusterID string) {
	deadline := time.Now().Add(maxSharedList)
	if !r.unbounded && r.deadline.Before(deadline) {
		deadline = r.deadline
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(r.base), deadline)
	go func() {
		defer cancel()
		projects, err := r.list(ctx, clusterID)
		if err != nil {
			err = fmt.Errorf("listing Run:ai projects (one list shared by %d caller(s)): %w", r.waiters, err)
		}
		r.projects, r.err = projects, err
		l.mu.Lock()
		st.running, st.next = st.next, nil
		if st.running != nil {
			l.start(st, st.running, clusterID)
		}
		l.mu.Unlock()
		close(r.done)
	}()
}
