package bind

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// fakeLists is a Run:ai project list whose content is a version: list k
// answers one project named "v<version when list k started>". A list blocks
// until the test releases it when gate is set.
type fakeLists struct {
	version atomic.Int64
	calls   atomic.Int32
	gate    chan struct{}        // nil: answer at once
	started chan int             // list k started (buffered; optional)
	err     error                // returned by every list
	ctxs    chan context.Context // each list's context (buffered; optional)
}

func (f *fakeLists) list(ctx context.Context, clusterID string) ([]runai.Project, error) {
	k := int(f.calls.Add(1))
	v := f.version.Load()
	if f.ctxs != nil {
		f.ctxs <- ctx
	}
	if f.started != nil {
		f.started <- k
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	return []runai.Project{{ID: fmt.Sprint(k), Name: fmt.Sprintf("v%d", v)}}, nil
}

// waiters is how many callers wait for the round after the one in flight.
func (l *projectLists) waiters(clusterID string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.states[clusterID]; st != nil && st.next != nil {
		return st.next.waiters
	}
	return 0
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestProjectListsCoalesce: N concurrent callers cost at most two lists: the
// one the first caller starts and one shared by all who arrived during it.
func TestProjectListsCoalesce(t *testing.T) {
	for _, n := range []int{1, 2, 10, 100} {
		t.Run(fmt.Sprintf("%d callers", n), func(t *testing.T) {
			f := &fakeLists{gate: make(chan struct{}), started: make(chan int, 2)}
			var l projectLists
			var wg sync.WaitGroup
			errs := make([]error, n)
			got := make([][]runai.Project, n)
			wg.Go(func() { got[0], errs[0] = l.get(testCtx(t), "c", f.list) })
			require.Equal(t, 1, <-f.started)
			for i := 1; i < n; i++ {
				wg.Go(func() { got[i], errs[i] = l.get(testCtx(t), "c", f.list) })
			}
			require.Eventually(t, func() bool { return l.waiters("c") == n-1 }, 5*time.Second, time.Millisecond)
			close(f.gate)
			wg.Wait()

			for i := range n {
				require.NoError(t, errs[i], "caller %d", i)
				require.Len(t, got[i], 1, "caller %d", i)
			}
			assert.LessOrEqual(t, int(f.calls.Load()), 2)
			assert.Equal(t, min(n, 2), int(f.calls.Load()))
			for i := 2; i < n; i++ {
				assert.Equal(t, got[1][0].ID, got[i][0].ID, "callers %d and 1 shared the second list", i)
			}
		})
	}
}

// TestProjectListsCoalesceFreely: callers arriving at random moments over
// several lists still cost far fewer lists than callers, and each gets an
// answer.
func TestProjectListsCoalesceFreely(t *testing.T) {
	var calls atomic.Int32
	list := func(ctx context.Context, clusterID string) ([]runai.Project, error) {
		calls.Add(1)
		time.Sleep(5 * time.Millisecond)
		return []runai.Project{{ID: clusterID}}, nil
	}
	var l projectLists
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Duration(i%20) * time.Millisecond)
			cluster := fmt.Sprint("c", i%2)
			got, err := l.get(testCtx(t), cluster, list)
			if assert.NoError(t, err) && assert.Len(t, got, 1) {
				assert.Equal(t, cluster, got[0].ID, "each cluster has its own lists")
			}
		})
	}
	wg.Wait()
	t.Logf("%d callers, %d lists", n, calls.Load())
	assert.Less(t, int(calls.Load()), n/4)
}

// TestProjectListsFreshness: a caller that arrives while a list is in flight
// never gets that list's answer (it may predate a project created just before
// the caller asked) but one of a list started after it arrived.
func TestProjectListsFreshness(t *testing.T) {
	f := &fakeLists{gate: make(chan struct{}), started: make(chan int, 2)}
	var l projectLists
	var first, second []runai.Project
	var errFirst, errSecond error
	var wg sync.WaitGroup
	wg.Go(func() { first, errFirst = l.get(testCtx(t), "c", f.list) })
	require.Equal(t, 1, <-f.started, "the first list is in flight")

	f.version.Store(1) // a project is created, then the second caller asks
	wg.Go(func() { second, errSecond = l.get(testCtx(t), "c", f.list) })
	require.Eventually(t, func() bool { return l.waiters("c") == 1 }, 5*time.Second, time.Millisecond)
	close(f.gate)
	wg.Wait()

	require.NoError(t, errFirst)
	require.NoError(t, errSecond)
	assert.Equal(t, "v0", first[0].Name)
	assert.Equal(t, "v1", second[0].Name, "the second caller sees the project created before it asked")
	assert.EqualValues(t, 2, f.calls.Load())
}

// TestProjectListsCallerLeaves: a caller whose context ends stops waiting at
// once; the shared list goes on for the others (it does not run on the
// caller's context), and the next round still starts.
func TestProjectListsCallerLeaves(t *testing.T) {
	for _, startsList := range []bool{true, false} {
		name := "a caller waiting for the next list leaves"
		if startsList {
			name = "the caller that started the list leaves"
		}
		t.Run(name, func(t *testing.T) {
			f := &fakeLists{gate: make(chan struct{}), started: make(chan int, 2), ctxs: make(chan context.Context, 2)}
			var l projectLists
			leaving, leave := context.WithCancel(testCtx(t))
			startCtx := testCtx(t)
			if startsList {
				startCtx = leaving
			}
			startDone := make(chan error, 1)
			go func() {
				_, err := l.get(startCtx, "c", f.list)
				startDone <- err
			}()
			require.Equal(t, 1, <-f.started)
			listCtx := <-f.ctxs

			var stay []runai.Project
			var stayErr error
			var wg sync.WaitGroup
			wg.Go(func() { stay, stayErr = l.get(testCtx(t), "c", f.list) })
			leaverDone, waiting := startDone, 1
			if !startsList {
				leaverDone, waiting = make(chan error, 1), 2
				go func() {
					_, err := l.get(leaving, "c", f.list)
					leaverDone <- err
				}()
			}
			require.Eventually(t, func() bool { return l.waiters("c") == waiting }, 5*time.Second, time.Millisecond)

			at := time.Now()
			leave()
			select {
			case err := <-leaverDone:
				assert.ErrorIs(t, err, context.Canceled)
				assert.Less(t, time.Since(at), time.Second, "returned promptly")
			case <-time.After(5 * time.Second):
				t.Fatal("a cancelled caller kept waiting for the list")
			}
			assert.NoError(t, listCtx.Err(), "the shared list is not cancelled with its caller")

			close(f.gate)
			wg.Wait()
			require.NoError(t, stayErr, "the caller that stayed gets its list")
			require.Len(t, stay, 1)
			if !startsList {
				require.NoError(t, <-startDone)
			}
			assert.EqualValues(t, 2, f.calls.Load(), "the round the leaver had joined still ran for the others")
		})
	}
}

// TestProjectListsErrors: a list's error goes to every caller of that round,
// wrapped so Run:ai's error kinds still match, and the next round lists again.
func TestProjectListsErrors(t *testing.T) {
	boom := errors.New("run:ai said no")
	f := &fakeLists{gate: make(chan struct{}), started: make(chan int, 2), err: boom}
	var l projectLists
	const n = 5
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = l.get(testCtx(t), "c", f.list) })
	require.Equal(t, 1, <-f.started)
	for i := 1; i < n; i++ {
		wg.Go(func() { _, errs[i] = l.get(testCtx(t), "c", f.list) })
	}
	require.Eventually(t, func() bool { return l.waiters("c") == n-1 }, 5*time.Second, time.Millisecond)
	close(f.gate)
	wg.Wait()
	for i, err := range errs {
		require.ErrorIs(t, err, boom, "caller %d", i)
	}
	assert.Contains(t, errs[n-1].Error(), fmt.Sprintf("shared by %d caller(s)", n-1))

	f.err = nil
	got, err := l.get(testCtx(t), "c", f.list)
	require.NoError(t, err, "an error is not remembered")
	assert.Len(t, got, 1)
	assert.EqualValues(t, 3, f.calls.Load())
}

// TestProjectListsDeadline: the shared list is bounded by the latest
// deadline of its callers, never past maxSharedList, and by maxSharedList
// when a caller has none.
func TestProjectListsDeadline(t *testing.T) {
	cases := []struct {
		name      string
		deadlines []time.Duration // 0: no deadline
		want      time.Duration
	}{
		{name: "one caller", deadlines: []time.Duration{5 * time.Second}, want: 5 * time.Second},
		{name: "the latest of its callers", deadlines: []time.Duration{2 * time.Second, 7 * time.Second, 3 * time.Second}, want: 7 * time.Second},
		{name: "no deadline", deadlines: []time.Duration{0}, want: maxSharedList},
		{name: "a caller without deadline", deadlines: []time.Duration{2 * time.Second, 0}, want: maxSharedList},
		{name: "capped", deadlines: []time.Duration{time.Hour}, want: maxSharedList},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A first list is in flight; the callers under test share the next.
			f := &fakeLists{gate: make(chan struct{}), started: make(chan int, 2), ctxs: make(chan context.Context, 2)}
			var l projectLists
			var wg sync.WaitGroup
			wg.Go(func() { _, _ = l.get(testCtx(t), "c", f.list) })
			require.Equal(t, 1, <-f.started)
			<-f.ctxs
			for _, d := range tc.deadlines {
				ctx := context.Background()
				if d > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, d)
					t.Cleanup(cancel)
				}
				wg.Go(func() { _, _ = l.get(ctx, "c", f.list) })
			}
			require.Eventually(t, func() bool { return l.waiters("c") == len(tc.deadlines) }, 5*time.Second, time.Millisecond)
			close(f.gate)
			listCtx := <-f.ctxs
			wg.Wait()
			dl, ok := listCtx.Deadline()
			require.True(t, ok, "the shared list is always bounded")
			assert.InDelta(t, tc.want.Seconds(), time.Until(dl).Seconds(), 1)
		})
	}
}
