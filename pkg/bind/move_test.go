package bind

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hopsworks/runai-webhook/pkg/runai"
)

func TestDecideMove(t *testing.T) {
	research := runai.Department{ID: "10", Name: "research"}
	vision := runai.Department{ID: "11", Name: "vision"}
	def := runai.Department{ID: "1", Name: "default"}
	inResearch := runai.Project{ID: "100", Name: "team-a", ParentID: research.ID}
	inVision := runai.Project{ID: "101", Name: "team-a", ParentID: vision.ID}
	tests := []struct {
		name         string
		bound, owned bool
		project      runai.Project
		from, to     runai.Department
		pods         []string
		want         MoveAction
		wantBlocking []string
	}{
		{"unbound: nothing in Run:ai", false, false, runai.Project{}, research, vision, nil, MoveNothingUnbound, nil},
		{"unbound with pods: still nothing", false, false, runai.Project{}, research, vision, []string{"p"}, MoveNothingUnbound, nil},
		{"adopted: never moved", true, false, inResearch, research, vision, nil, MoveNothingAdopted, nil},
		{"adopted with pods: never moved, not refused", true, false, inResearch, research, vision, []string{"p"}, MoveNothingAdopted, nil},
		{"same Run:ai department (both fall back to default)", true, true, runai.Project{ParentID: def.ID}, def, def, nil, MoveNothingSameDept, nil},
		{"same mapping wins over pods", true, true, inResearch, research, research, []string{"p"}, MoveNothingSameDept, nil},
		{"already in the target (a retried request)", true, true, inVision, research, vision, []string{"p"}, MoveNothingDone, nil},
		{"pods run or wait: refused", true, true, inResearch, research, vision, []string{"nb-1", "job-2"}, MoveRefusedPods, []string{"nb-1", "job-2"}},
		{"clean: delete and create again", true, true, inResearch, research, vision, nil, MoveRecreate, nil},
		{"clean to default", true, true, inResearch, research, def, nil, MoveRecreate, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideMove(tt.bound, tt.owned, tt.project, tt.from, tt.to, tt.pods)
			assert.Equal(t, tt.want, got.Action)
			assert.Equal(t, tt.wantBlocking, got.Blocking)
			assert.Equal(t, tt.from, got.From)
			assert.Equal(t, tt.to, got.To)
		})
	}
}
