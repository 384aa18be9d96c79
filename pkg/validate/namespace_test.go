package validate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
)

const webhookUser = "system:serviceaccount:runai-webhook:runai-webhook"

var writers = Writers{User: webhookUser, Prefixes: []string{"system:serviceaccount:runai:"}}

func TestWritersAllowed(t *testing.T) {
	assert.True(t, writers.Allowed(webhookUser))
	assert.True(t, writers.Allowed("system:serviceaccount:runai:namespace-controller"))
	assert.False(t, writers.Allowed("system:serviceaccount:runai-webhook:other"))
	assert.False(t, writers.Allowed("system:serviceaccount:runai"), "a prefix is not a match of its shorter self")
	assert.False(t, writers.Allowed("alice"))
	assert.False(t, writers.Allowed(""), "the empty user is nobody")
	assert.False(t, Writers{User: "x", Prefixes: []string{""}}.Allowed("alice"), "an empty prefix trusts nobody")
	assert.True(t, Writers{User: "", Prefixes: nil}.Allowed(""), "degenerate config: empty user equals empty user")
}

func TestDecideNamespaceLabels(t *testing.T) {
	base := map[string]string{"hopsworks.ai/project": "team-a"}
	bound := map[string]string{"hopsworks.ai/project": "team-a", "runai/queue": "team-a", nsview.ProjectIDLabel: "4711"}
	tests := []struct {
		name     string
		user     string
		ns, old  map[string]string // old nil = CREATE
		reason   string
		msg      []string
		notInMsg string
	}{
		// The webhook's own account and trusted prefixes write anything.
		{name: "webhook binds on CREATE", user: webhookUser, ns: bound},
		{name: "webhook binds on UPDATE", user: webhookUser, ns: bound, old: base},
		{name: "webhook unbinds", user: webhookUser, ns: base, old: bound},
		{name: "webhook may even write an odd department", user: webhookUser, ns: with(bound, "hopsworks.ai/department", "Bad_Name"), old: bound},
		{name: "trusted prefix binds", user: "system:serviceaccount:runai:ns-controller", ns: bound, old: base},

		// Anyone else: the binding labels may not move.
		{name: "user adds runai/queue on CREATE", user: "alice", ns: with(base, "runai/queue", "team-b"),
			reason: ReasonBindingLabels, msg: []string{"user alice may not add runai/queue=team-b", "runai/queue", nsview.ProjectIDLabel, "runai-webhook leave"}},
		{name: "user adds project id on CREATE", user: "alice", ns: with(base, nsview.ProjectIDLabel, "1"),
			reason: ReasonBindingLabels, msg: []string{"may not add hopsworks.ai/runai-project-id=1"}},
		{name: "user adds runai/queue on UPDATE", user: "alice", ns: with(base, "runai/queue", "team-b"), old: base,
			reason: ReasonBindingLabels, msg: []string{"may not add runai/queue=team-b"}},
		{name: "user adds an empty runai/queue", user: "alice", ns: with(base, "runai/queue", ""), old: base,
			reason: ReasonBindingLabels, msg: []string{"may not add runai/queue="}},
		{name: "user changes runai/queue", user: "alice", ns: with(bound, "runai/queue", "team-b"), old: bound,
			reason: ReasonBindingLabels, msg: []string{"may not change runai/queue from team-a to team-b"}},
		{name: "user empties runai/queue", user: "alice", ns: with(bound, "runai/queue", ""), old: bound,
			reason: ReasonBindingLabels, msg: []string{"may not change runai/queue from team-a to "}},
		{name: "user removes runai/queue", user: "alice", ns: with(bound, "runai/queue", "<delete>"), old: bound,
			reason: ReasonBindingLabels, msg: []string{"may not remove runai/queue (was team-a)"}},
		{name: "user removes an empty runai/queue", user: "alice", ns: base, old: with(base, "runai/queue", ""),
			reason: ReasonBindingLabels, msg: []string{"may not remove runai/queue (was )"}},
		{name: "user changes project id", user: "alice", ns: with(bound, nsview.ProjectIDLabel, "1"), old: bound,
			reason: ReasonBindingLabels, msg: []string{"may not change hopsworks.ai/runai-project-id from 4711 to 1"}},
		{name: "user removes project id (would make us forget ownership)", user: "alice", ns: with(bound, nsview.ProjectIDLabel, "<delete>"), old: bound,
			reason: ReasonBindingLabels, msg: []string{"may not remove hopsworks.ai/runai-project-id (was 4711)"}},
		{name: "user of another service account", user: "system:serviceaccount:team-a:default", ns: bound, old: base,
			reason: ReasonBindingLabels, msg: []string{"user system:serviceaccount:team-a:default may not add runai/queue=team-a"}},
		{name: "uppercase look-alike key is not a binding label", user: "alice", ns: with(base, "RUNAI/QUEUE", "x"), old: base},

		// Other label changes by anyone are fine while the binding stays.
		{name: "user edits other labels of a bound namespace", user: "alice", ns: with(bound, "team", "ml", "hopsworks.ai/department", "research"), old: bound},
		{name: "user creates a plain namespace", user: "alice", ns: base},
		{name: "user creates a namespace without labels", user: "alice", ns: nil},

		// Department names.
		{name: "department with uppercase", user: "alice", ns: with(bound, "hopsworks.ai/department", "Research"), old: bound,
			reason: ReasonBadDepartment, msg: []string{`label hopsworks.ai/department="Research" breaks the department naming rule`, "lowercase"}},
		{name: "department of 64 characters", user: "alice", ns: with(base, "hopsworks.ai/department", strings.Repeat("a", 64)),
			reason: ReasonBadDepartment, msg: []string{"at most 63"}},
		{name: "department of 63 characters", user: "alice", ns: with(base, "hopsworks.ai/department", strings.Repeat("a", 63))},
		{name: "department with underscore", user: "alice", ns: with(base, "hopsworks.ai/department", "data_science"), reason: ReasonBadDepartment},
		{name: "department ending in -", user: "alice", ns: with(base, "hopsworks.ai/department", "research-"), reason: ReasonBadDepartment},
		{name: "department with a dot", user: "alice", ns: with(base, "hopsworks.ai/department", "a.b"), reason: ReasonBadDepartment},
		{name: "empty department is the default one", user: "alice", ns: with(base, "hopsworks.ai/department", "")},
		{name: "binding labels are judged before the department", user: "alice",
			ns: with(base, "hopsworks.ai/department", "BAD", "runai/queue", "x"), reason: ReasonBindingLabels, notInMsg: "BAD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := DecideNamespaceLabels(keys, writers, tt.user, tt.ns, tt.old)
			if tt.reason == "" {
				assert.True(t, v.Allowed, v.Message)
				return
			}
			assert.False(t, v.Allowed)
			assert.Equal(t, tt.reason, v.Reason)
			for _, m := range tt.msg {
				assert.Contains(t, v.Message, m)
			}
			if tt.notInMsg != "" {
				assert.NotContains(t, v.Message, tt.notInMsg)
			}
		})
	}
}

// fakeMover records moves and answers with fixed warnings or error.
type fakeMover struct {
	calls    []move
	warnings []string
	err      error
}

type move struct {
	ns, from, to string
	dryRun       bool
}

func (m *fakeMover) Move(_ context.Context, ns, from, to string, dryRun bool) ([]string, error) {
	m.calls = append(m.calls, move{ns, from, to, dryRun})
	return m.warnings, m.err
}

func nsObject(t *testing.T, name string, labels map[string]string) []byte {
	t.Helper()
	var o NamespaceMeta
	o.Metadata.Name, o.Metadata.Labels = name, labels
	b, err := json.Marshal(o)
	require.NoError(t, err)
	return b
}

func TestOnlyRemovesBindingLabels(t *testing.T) {
	bound := map[string]string{"p": "x", "runai/queue": "q", nsview.ProjectIDLabel: "1"}
	for _, tt := range []struct {
		name    string
		ns, old map[string]string
		want    bool
	}{
		{"both removed", map[string]string{"p": "x"}, bound, true},
		{"queue removed", map[string]string{"p": "x", nsview.ProjectIDLabel: "1"}, bound, true},
		{"id removed, other labels changed", map[string]string{"p": "y", "runai/queue": "q"}, bound, true},
		{"nothing removed", bound, bound, false},
		{"nothing to remove", map[string]string{"p": "x"}, map[string]string{"p": "x"}, false},
		{"queue removed, id changed", map[string]string{"p": "x", nsview.ProjectIDLabel: "2"}, bound, false},
		{"queue added", map[string]string{"runai/queue": "q"}, map[string]string{}, false},
		{"queue emptied", map[string]string{"runai/queue": ""}, map[string]string{"runai/queue": "q"}, false},
		{"create (old nil)", map[string]string{"p": "x"}, nil, false},
	} {
		assert.Equal(t, tt.want, OnlyRemovesBindingLabels(keys, tt.ns, tt.old), tt.name)
	}
}

func TestNamespaceGuardHandle(t *testing.T) {
	bound := map[string]string{"hopsworks.ai/project": "team-a", "runai/queue": "team-a", "hopsworks.ai/department": "research"}
	moved := map[string]string{"hopsworks.ai/project": "team-a", "runai/queue": "team-a", "hopsworks.ai/department": "finance"}
	noDept := map[string]string{"hopsworks.ai/project": "team-a", "runai/queue": "team-a"}
	stolen := map[string]string{"hopsworks.ai/project": "team-a", "runai/queue": "team-b", "hopsworks.ai/department": "finance"}
	badDept := map[string]string{"hopsworks.ai/project": "team-a", "runai/queue": "team-a", "hopsworks.ai/department": "Finance"}

	tests := []struct {
		name      string
		op        string
		user      string
		ns, old   map[string]string
		obj       []byte // overrides ns
		oldObj    []byte // overrides old
		dryRun    bool
		mover     *fakeMover
		disabled  bool
		allowed   bool
		code      int32
		reason    string
		msg       string
		warnings  []string
		wantMoves []move
	}{
		{name: "DELETE passes", op: "DELETE", user: "alice", ns: stolen, old: bound, mover: &fakeMover{}, allowed: true},
		{name: "CONNECT passes", op: "CONNECT", user: "alice", mover: &fakeMover{}, allowed: true},
		{name: "malformed object", op: "UPDATE", user: "alice", obj: []byte(`{"metadata":{"labels":[1]}}`), old: bound, mover: &fakeMover{},
			code: http.StatusBadRequest, reason: ReasonMalformed, msg: "decoding namespace"},
		{name: "malformed old object", op: "UPDATE", user: "alice", ns: bound, oldObj: []byte(`{`), mover: &fakeMover{},
			code: http.StatusBadRequest, reason: ReasonMalformed, msg: "decoding old namespace"},
		{name: "user adds binding on CREATE", op: "CREATE", user: "alice", ns: bound, mover: &fakeMover{},
			code: http.StatusForbidden, reason: ReasonBindingLabels, msg: "may not add runai/queue=team-a"},
		{name: "user moves the queue and the department: refused, no move", op: "UPDATE", user: "alice", ns: stolen, old: bound, mover: &fakeMover{},
			code: http.StatusForbidden, reason: ReasonBindingLabels, msg: "may not change runai/queue from team-a to team-b"},
		{name: "bad department: refused, no move", op: "UPDATE", user: "alice", ns: badDept, old: bound, mover: &fakeMover{},
			code: http.StatusForbidden, reason: ReasonBadDepartment, msg: `"Finance"`},
		{name: "department change moves the project", op: "UPDATE", user: "alice", ns: moved, old: bound,
			mover: &fakeMover{warnings: []string{"re-add quota"}}, allowed: true, warnings: []string{"re-add quota"},
			wantMoves: []move{{"team-a", "research", "finance", false}}},
		{name: "dry-run flag is passed to the mover", op: "UPDATE", user: "alice", ns: moved, old: bound, dryRun: true,
			mover: &fakeMover{warnings: []string{"would move"}}, allowed: true, warnings: []string{"would move"},
			wantMoves: []move{{"team-a", "research", "finance", true}}},
		{name: "department label removed: a move to the default department", op: "UPDATE", user: "alice", ns: noDept, old: bound,
			mover: &fakeMover{}, allowed: true, wantMoves: []move{{"team-a", "research", "", false}}},
		{name: "department label added", op: "UPDATE", user: "alice", ns: bound, old: noDept,
			mover: &fakeMover{}, allowed: true, wantMoves: []move{{"team-a", "", "research", false}}},
		{name: "move refused: refusal and warnings propagate", op: "UPDATE", user: "alice", ns: moved, old: bound,
			mover: &fakeMover{err: errors.New("2 pods of team-a are running or waiting; stop them first"), warnings: []string{"rolled back"}},
			code:  http.StatusForbidden, reason: ReasonMoveRefused, msg: "2 pods of team-a are running or waiting; stop them first", warnings: []string{"rolled back"},
			wantMoves: []move{{"team-a", "research", "finance", false}}},
		{name: "unchanged department: no move", op: "UPDATE", user: "alice", ns: with(bound, "x", "y"), old: bound, mover: &fakeMover{}, allowed: true},
		{name: "CREATE with a department: no move", op: "CREATE", user: "alice", ns: map[string]string{"hopsworks.ai/project": "p", "hopsworks.ai/department": "finance"},
			mover: &fakeMover{}, allowed: true},
		{name: "integration off: no move", op: "UPDATE", user: "alice", ns: moved, old: bound, disabled: true, mover: &fakeMover{}, allowed: true},
		{name: "no mover configured", op: "UPDATE", user: "alice", ns: moved, old: bound, allowed: true},
		{name: "webhook user changing the department also moves", op: "UPDATE", user: webhookUser, ns: moved, old: bound,
			mover: &fakeMover{}, allowed: true, wantMoves: []move{{"team-a", "research", "finance", false}}},
		{name: "integration off still guards the binding labels", op: "UPDATE", user: "alice", ns: stolen, old: bound, disabled: true,
			code: http.StatusForbidden, reason: ReasonBindingLabels},
		{name: "integration off: an administrator may remove the binding labels (leave)", op: "UPDATE", user: "alice",
			ns: map[string]string{"hopsworks.ai/project": "team-a"}, old: with(bound, nsview.ProjectIDLabel, "4711"), disabled: true,
			mover: &fakeMover{}, allowed: true},
		{name: "integration off: leaving while changing the department moves nothing", op: "UPDATE", user: "alice",
			ns: map[string]string{"hopsworks.ai/project": "team-a", "hopsworks.ai/department": "finance"}, old: bound, disabled: true,
			mover: &fakeMover{}, allowed: true},
		{name: "integration off: removing one label and changing the other is refused", op: "UPDATE", user: "alice",
			ns: map[string]string{"hopsworks.ai/project": "team-a", nsview.ProjectIDLabel: "1"}, old: with(bound, nsview.ProjectIDLabel, "4711"), disabled: true,
			code: http.StatusForbidden, reason: ReasonBindingLabels, msg: "may not remove runai/queue (was team-a)"},
		{name: "integration on: removing the binding labels is refused", op: "UPDATE", user: "alice",
			ns: map[string]string{"hopsworks.ai/project": "team-a"}, old: bound, mover: &fakeMover{},
			code: http.StatusForbidden, reason: ReasonBindingLabels, msg: "may not remove runai/queue (was team-a)"},
		{name: "integration off: a bad department is still refused when leaving", op: "UPDATE", user: "alice",
			ns: map[string]string{"hopsworks.ai/project": "team-a", "hopsworks.ai/department": "Finance"}, old: bound, disabled: true,
			code: http.StatusForbidden, reason: ReasonBadDepartment},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &NamespaceGuard{Keys: keys, Writers: writers, Enabled: !tt.disabled}
			if tt.mover != nil {
				g.Mover = tt.mover
			}
			dry := tt.dryRun
			req := &admission.Request{UID: "u", Operation: tt.op, Name: "team-a", DryRun: &dry}
			req.UserInfo.Username = tt.user
			req.Object = tt.obj
			if req.Object == nil {
				req.Object = nsObject(t, "team-a", tt.ns)
			}
			req.OldObject = tt.oldObj
			if req.OldObject == nil && tt.old != nil {
				req.OldObject = nsObject(t, "team-a", tt.old)
			}
			resp := g.Handle(context.Background(), req)
			assert.Equal(t, tt.allowed, resp.Allowed, resp.Message)
			if !tt.allowed {
				assert.Equal(t, tt.code, resp.Code)
				assert.Equal(t, tt.reason, resp.Reason)
				assert.Contains(t, resp.Message, tt.msg)
			}
			assert.Equal(t, tt.warnings, resp.Warnings)
			if tt.mover != nil {
				assert.Equal(t, tt.wantMoves, tt.mover.calls)
			}
		})
	}
}

// with returns a copy of m with the key/value pairs kv set; the value
// "<delete>" removes the key.
func with(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "<delete>" {
			delete(out, kv[i])
			continue
		}
		out[kv[i]] = kv[i+1]
	}
	return out
}
