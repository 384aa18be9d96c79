package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/hopsworks/runai-webhook/e2e/framework"
)

// unusedOnPurpose are chart rules the suite cannot exercise, each with why.
var unusedOnPurpose = map[string]string{
	"/events patch": "client-go's event correlator patches an event only when the same event repeats within its window",
	// client-go's informers stream their initial state with a watch-list on
	// API servers that serve it (1.37 here); on older ones (the chart allows
	// 1.30+) they fall back to LIST.
	"/namespaces list": "informers LIST only on API servers without watch-list",
	"/pods list":       "informers LIST only on API servers without watch-list; department moves also LIST a namespace's pods",
}

// The chart grants exactly the verbs the code uses: every request the
// webhook's user made during the suite is allowed by a chart rule (RBAC is
// enforced, so a missing rule would have failed a test), and every chart rule
// was used by some request, or is listed above with its reason. The API
// server's audit log is the record of what was used. This file is named to
// run last, after the scenarios; it adds the few requests a filtered run
// (-run) may have skipped.
func TestRBACRulesMatchWhatTheSuiteUsed(t *testing.T) {
	if env.Existing {
		t.Skip("needs the local control plane's audit log")
	}
	// Make sure the rarely exercised paths ran at least once.
	ns := "e2e-rbac"
	boundNamespace(t, ns)
	kubectlOK(t, podYAML(ns, "nb", "notebook", 0, nil, ""), "apply", "-f", "-")
	code, _ := viewWithToken(t, "/api/v1/namespaces/"+ns+"/gpu", "not-a-token")
	require.Equal(t, http.StatusUnauthorized, code, "TokenReview ran")
	code, _ = viewWithToken(t, "/api/v1/namespaces/"+ns+"/gpu", serviceAccountToken(t, ns, "stranger"))
	require.Equal(t, http.StatusForbidden, code, "SubjectAccessReview ran")
	_, err := env.Controller.Pass(context.Background())
	require.NoError(t, err)
	time.Sleep(time.Second) // the audit backend writes in batches

	used := auditedUse(t, env.AuditLog)
	granted := chartRules(t)
	var unused, unexpected []string
	for rule := range granted {
		if !used[rule] {
			if why, ok := unusedOnPurpose[rule]; ok {
				t.Logf("granted, not exercised on purpose: %s (%s)", rule, why)
				continue
			}
			unused = append(unused, rule)
		}
	}
	for rule := range used {
		if !granted[rule] {
			unexpected = append(unexpected, rule)
		}
	}
	sort.Strings(unused)
	sort.Strings(unexpected)
	t.Logf("the webhook used %d (group/resource verb) pairs; the chart grants %d", len(used), len(granted))
	assert.Empty(t, unused, "chart rules no request of the suite used: drop them (least privilege) or exercise them")
	assert.Empty(t, unexpected, "requests of the webhook's user with no chart rule (denied at run time)")
}

// auditedUse reads "group/resource verb" pairs of the webhook user's
// requests from the audit log; subresources count as their own resource.
func auditedUse(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	type event struct {
		Stage     string                    `json:"stage"`
		Verb      string                    `json:"verb"`
		User      struct{ Username string } `json:"user"`
		ObjectRef *struct {
			Resource, APIGroup, Subresource string
		} `json:"objectRef"`
	}
	used := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		// Watches (and watch-lists) may not complete before the log is read:
		// their ResponseStarted stage counts.
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.User.Username != framework.WebhookUser || e.ObjectRef == nil {
			continue
		}
		res := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			res += "/" + e.ObjectRef.Subresource
		}
		used[fmt.Sprintf("%s/%s %s", e.ObjectRef.APIGroup, res, e.Verb)] = true
	}
	require.NoError(t, sc.Err())
	return used
}

// chartRules expands the chart's ClusterRole and Role for the webhook into
// "group/resource verb" pairs.
func chartRules(t *testing.T) map[string]bool {
	t.Helper()
	objs, err := env.InstallObjects()
	require.NoError(t, err)
	out := map[string]bool{}
	add := func(rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out[fmt.Sprintf("%s/%s %s", g, res, v)] = true
					}
				}
			}
		}
	}
	for _, o := range objs {
		switch r := o.(type) {
		case *rbacv1.ClusterRole:
			if r.Name == framework.ReleaseName {
				add(r.Rules)
			}
		case *rbacv1.Role:
			if r.Name == framework.ReleaseName {
				add(r.Rules)
			}
		}
	}
	require.NotEmpty(t, out)
	return out
}

func viewWithToken(t *testing.T, path, token string) (int, string) {
	t.Helper()
	code, body := viewGET(t, http.MethodGet, path, token)
	return code, string(body)
}
