package validate

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/hopsworks/runai-webhook/pkg/admission"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
)

// NamespaceMeta is the part of a namespace the namespace guard reads.
type NamespaceMeta struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
}

// Writers decides who may write the binding labels: the webhook's own
// service account, plus trusted prefixes (Run:ai's own controllers label the
// namespaces of projects they bind).
type Writers struct {
	User     string
	Prefixes []string
}

// Allowed reports whether user may write binding labels.
func (w Writers) Allowed(user string) bool {
	if user == w.User {
		return true
	}
	return slices.ContainsFunc(w.Prefixes, func(p string) bool { return p != "" && strings.HasPrefix(user, p) })
}

// DecideNamespaceLabels applies the binding-label and department-name rules
// to a namespace create (old nil) or update by user.
func DecideNamespaceLabels(keys nsview.Keys, writers Writers, user string, ns, old map[string]string) Verdict {
	if writers.Allowed(user) {
		return allow()
	}
	for _, k := range []string{keys.Queue, nsview.ProjectIDLabel} {
		nv, nok := ns[k]
		ov, ook := old[k]
		if nok == ook && nv == ov {
			continue
		}
		var what string
		switch {
		case !ook:
			what = fmt.Sprintf("add %s=%s", k, nv)
		case !nok:
			what = fmt.Sprintf("remove %s (was %s)", k, ov)
		default:
			what = fmt.Sprintf("change %s from %s to %s", k, ov, nv)
		}
		return deny(ReasonBindingLabels,
			"user %s may not %s: the Run:ai binding labels %s and %s are written only by runai-webhook (they decide which Run:ai quota the namespace's pods use); use `runai-webhook leave` to unbind",
			user, what, keys.Queue, nsview.ProjectIDLabel)
	}
	if _, had := old[keys.Project]; had {
		if _, has := ns[keys.Project]; !has {
			if q := old[keys.Queue]; q != "" {
				return deny(ReasonBindingLabels,
					"user %s may not remove %s from a namespace bound to Run:ai project %s: it would take the namespace out of runai-webhook's guard while Run:ai still queues its pods there; use `runai-webhook leave` to unbind",
					user, keys.Project, q)
			}
		}
	}
	if v, ok := ns[keys.Department]; ok && v != "" && !config.ValidDepartmentName(v) {
		return deny(ReasonBadDepartment,
			"label %s=%q breaks the department naming rule: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
			keys.Department, v)
	}
	return allow()
}

// OnlyRemovesBindingLabels reports whether the change touches the binding
// labels only by removing them (none added or changed).
func OnlyRemovesBindingLabels(keys nsview.Keys, ns, old map[string]string) bool {
	removed := false
	for _, k := range []string{keys.Queue, nsview.ProjectIDLabel} {
		nv, nok := ns[k]
		ov, ook := old[k]
		switch {
		case nok && (!ook || nv != ov):
			return false
		case ook && !nok:
			removed = true
		}
	}
	return removed
}

func withoutKeys(m map[string]string, keys ...string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// Mover moves a namespace's Run:ai project when its department label changes
// (pkg/bind). It returns warnings for the user, or an error to refuse with.
type Mover interface {
	Move(ctx context.Context, namespace, fromDept, toDept string, dryRun bool) (warnings []string, err error)
}

// NamespaceGuard is the validating webhook for managed namespaces.
type NamespaceGuard struct {
	Keys    nsview.Keys
	Writers Writers
	Mover   Mover // nil: department changes need no Run:ai action
	Enabled bool
}

// Handle is the admission.Handler of the namespace guard.
func (g *NamespaceGuard) Handle(ctx context.Context, req *admission.Request) admission.Response {
	if req.Operation != "CREATE" && req.Operation != "UPDATE" {
		return admission.Allow()
	}
	var ns, old NamespaceMeta
	if err := json.Unmarshal(req.Object, &ns); err != nil {
		return admission.Response{Code: http.StatusBadRequest, Reason: ReasonMalformed, Message: "runai-webhook: decoding namespace: " + err.Error()}
	}
	if req.Operation == "UPDATE" {
		if err := json.Unmarshal(req.OldObject, &old); err != nil {
			return admission.Response{Code: http.StatusBadRequest, Reason: ReasonMalformed, Message: "runai-webhook: decoding old namespace: " + err.Error()}
		}
	}
	oldLabels := old.Metadata.Labels
	if !g.Enabled && OnlyRemovesBindingLabels(g.Keys, ns.Metadata.Labels, oldLabels) {
		// Leaving Run:ai (seed, "Turning the integration off"): with the
		// integration off an administrator may remove the binding labels.
		oldLabels = withoutKeys(oldLabels, g.Keys.Queue, nsview.ProjectIDLabel)
	}
	if v := DecideNamespaceLabels(g.Keys, g.Writers, req.UserInfo.Username, ns.Metadata.Labels, oldLabels); !v.Allowed {
		return admission.Deny(v.Reason, v.Message)
	}
	if req.Operation != "UPDATE" || g.Mover == nil || !g.Enabled {
		return admission.Allow()
	}
	from, to := old.Metadata.Labels[g.Keys.Department], ns.Metadata.Labels[g.Keys.Department]
	if from == to {
		return admission.Allow()
	}
	warnings, err := g.Mover.Move(ctx, ns.Metadata.Name, from, to, req.IsDryRun())
	if err != nil {
		return admission.Deny(ReasonMoveRefused, err.Error(), warnings...)
	}
	return admission.Allow(warnings...)
}
