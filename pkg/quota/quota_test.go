package quota

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		name                 string
		deserved, held, asks float64
		fits                 bool
		left                 float64
		msg                  string
	}{
		{"fits exactly", 2, 1, 1, true, 1, ""},
		{"fits with room", 4, 1, 1, true, 3, ""},
		{"over by one", 2, 2, 1, false, 0, "project team-a has 0 of 2 GPUs left for notebooks, terminals, apps and deployments; this pod asks for 1"},
		{"fraction left", 2, 1.5, 1, false, 0.5, "project team-a has 0.5 of 2 GPUs left for notebooks, terminals, apps and deployments; this pod asks for 1"},
		{"fractions sum without float noise", 0.3, 0.1 + 0.1, 0.1, true, 0.1, ""},
		{"zero quota refuses any gpu", 0, 0, 0.5, false, 0, "has 0 of 0 GPUs left"},
		{"held over deserved never negative", 1, 3, 1, false, 0, "has 0 of 1 GPUs left"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide("team-a", tt.deserved, tt.held, tt.asks)
			assert.Equal(t, tt.fits, d.Fits)
			assert.InDelta(t, tt.left, d.Left, 1e-9)
			if tt.msg != "" {
				assert.Contains(t, d.Message, tt.msg)
			} else {
				assert.Empty(t, d.Message)
			}
		})
	}
}

type fakeSource struct {
	mu      sync.Mutex
	q       ProjectQuota
	fresh   ProjectQuota
	err     error
	reads   int
	freshes int
}

func (f *fakeSource) ProjectQuota(_ context.Context, _, _, _ string, fresh bool) (ProjectQuota, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.err != nil {
		return ProjectQuota{}, f.err
	}
	if fresh {
		f.freshes++
		return f.fresh, nil
	}
	return f.q, nil
}

type fakePods struct{ held []HeldPod }

func (f fakePods) HeldNonPreemptible(string) []HeldPod { return f.held }

func TestTrackerConcurrentCreatesTakeTheLastGPUOnce(t *testing.T) {
	now := time.Now()
	src := &fakeSource{q: ProjectQuota{Project: "p", Deserved: 2, ReadAt: now}}
	tr := &Tracker{Source: src, Pods: fakePods{held: []HeldPod{{GPUs: 1}}}, MaxAge: time.Minute, ReserveFor: time.Minute, Now: func() time.Time { return now }}
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res := tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 1, Key: string(rune('a' + i))})
			if res.Decision.Fits {
				admitted.Add(1)
			}
		}(i)
	}
	wg.Wait()
	assert.Equal(t, int32(1), admitted.Load(), "one GPU left: exactly one of 20 concurrent creates fits")
}

func TestTrackerReservationReleasedWhenPodSeenOrExpired(t *testing.T) {
	now := time.Now()
	src := &fakeSource{q: ProjectQuota{Deserved: 1, ReadAt: now}}
	pods := &fakePods{}
	tr := &Tracker{Source: src, Pods: pods, MaxAge: time.Hour, ReserveFor: 10 * time.Second, Now: func() time.Time { return now }}
	require.True(t, tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 1, Key: "k1"}).Decision.Fits)
	assert.False(t, tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 1, Key: "k2"}).Decision.Fits, "reserved")
	// The cache now shows the pod with its reservation key: counted once, not twice.
	pods.held = []HeldPod{{ReservationKey: "k1", GPUs: 1}}
	res := tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 1, Key: "k3"})
	assert.False(t, res.Decision.Fits)
	assert.Equal(t, 1.0, res.Held)
	// The pod went away: the reservation was dropped when the pod was seen.
	pods.held = nil
	assert.True(t, tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 1, DryRun: true}).Decision.Fits)
	// A reservation whose pod never appears expires.
	require.True(t, tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 1, Key: "k4"}).Decision.Fits)
	now = now.Add(11 * time.Second)
	assert.True(t, tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 1, DryRun: true}).Decision.Fits)
}

func TestTrackerNeverRefusesOnStaleQuota(t *testing.T) {
	now := time.Now()
	src := &fakeSource{
		q:     ProjectQuota{Deserved: 0, ReadAt: now.Add(-time.Hour)},
		fresh: ProjectQuota{Deserved: 4, ReadAt: now},
	}
	tr := &Tracker{Source: src, Pods: fakePods{}, MaxAge: 30 * time.Second, ReserveFor: time.Minute, Now: func() time.Time { return now }}
	res := tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 2, DryRun: true})
	assert.True(t, res.Decision.Fits, "the admin raised the quota; the stale 0 must not refuse")
	assert.Equal(t, 1, src.freshes)

	// A stale quota that admits is used as is: no Run:ai read on the hot path.
	src.q, src.freshes = ProjectQuota{Deserved: 8, ReadAt: now.Add(-time.Hour)}, 0
	assert.True(t, tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 2, DryRun: true}).Decision.Fits)
	assert.Equal(t, 0, src.freshes)
}

func TestTrackerSkipsWhenRunAIUnreachable(t *testing.T) {
	tr := &Tracker{Source: &fakeSource{err: errors.New("connection refused")}, Pods: fakePods{}, MaxAge: time.Minute, ReserveFor: time.Minute}
	res := tr.Check(context.Background(), Request{Namespace: "ns", Project: "team-a", Asks: 8})
	assert.False(t, res.Checked)
	assert.True(t, res.Decision.Fits)
	assert.Contains(t, res.Warning, "GPU quota of Run:ai project team-a not checked")
	assert.Contains(t, res.Warning, "Run:ai enforces the quota when it schedules the pod")
}

func TestTrackerUsesRunAIAllocationWhenHigher(t *testing.T) {
	now := time.Now()
	src := &fakeSource{q: ProjectQuota{Deserved: 2, AllocatedNonPreemptible: 2, ReadAt: now}}
	tr := &Tracker{Source: src, Pods: fakePods{}, MaxAge: time.Minute, ReserveFor: time.Minute, Now: func() time.Time { return now }}
	res := tr.Check(context.Background(), Request{Namespace: "ns", Project: "p", Asks: 1, DryRun: true})
	assert.False(t, res.Decision.Fits)
}

// The bind webhook checks (and reserves for) the first pod of a namespace,
// then the guard webhook checks the same pod under the same reservation key:
// the pod must not be counted against itself.
func TestTrackerSameKeyIsNotCountedTwice(t *testing.T) {
	now := time.Now()
	src := &fakeSource{q: ProjectQuota{Deserved: 1, ReadAt: now}}
	tr := &Tracker{Source: src, Pods: fakePods{}, MaxAge: time.Hour, ReserveFor: time.Minute, Now: func() time.Time { return now }}
	ctx := context.Background()
	require.True(t, tr.Check(ctx, Request{Namespace: "ns", Project: "p", Asks: 1, Key: "bind-uid"}).Decision.Fits, "bind webhook")
	res := tr.Check(ctx, Request{Namespace: "ns", Project: "p", Asks: 1, Key: "bind-uid"})
	assert.True(t, res.Decision.Fits, "guard webhook, same pod: %s", res.Decision.Message)
	assert.Equal(t, 0.0, res.Held)
	// Another pod still sees the reservation.
	assert.False(t, tr.Check(ctx, Request{Namespace: "ns", Project: "p", Asks: 1, Key: "other"}).Decision.Fits)

	// A pod refused on its second check gives its reservation back.
	src.q.Deserved = 0.5 // an admin lowered the quota in between
	assert.False(t, tr.Check(ctx, Request{Namespace: "ns", Project: "p", Asks: 1, Key: "bind-uid"}).Decision.Fits)
	src.q.Deserved = 1
	assert.True(t, tr.Check(ctx, Request{Namespace: "ns", Project: "p", Asks: 1, Key: "other"}).Decision.Fits, "the refused pod's reservation is gone")
}
