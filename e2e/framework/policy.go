package framework

import (
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ExcludedNamespaces must be outside every webhook's namespaceSelector:
// system namespaces, the webhook's own and Run:ai's (a webhook that sees its
// own namespace can deadlock its own restart).
var ExcludedNamespaces = []string{"kube-system", "kube-node-lease", ReleaseNamespace, "runai", "runai-backend"}

// WebhookPolicy is what DESIGN.md §4 requires of one webhook.
type WebhookPolicy struct {
	FailurePolicy admissionregistrationv1.FailurePolicyType
	SideEffects   admissionregistrationv1.SideEffectClass
	MaxTimeout    int32
	QueueLabel    metav1.LabelSelectorOperator // Exists, DoesNotExist, or "" (not constrained)
	// ByObject: the webhook selects namespaces by their own labels
	// (objectSelector, matched on the old or the new object), so removing
	// the label cannot escape it; the namespaceSelector only excludes by name.
	ByObject bool
	// ProjectLabel is what the selector says of the project label
	// (Exists for managed namespaces; DoesNotExist for the label guard).
	ProjectLabel metav1.LabelSelectorOperator
}

// Policies by webhook name.
var Policies = map[string]WebhookPolicy{
	"bind.runai-webhook.hopsworks.ai":            {admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNoneOnDryRun, 15, metav1.LabelSelectorOpDoesNotExist, false, metav1.LabelSelectorOpExists},
	"inject.runai-webhook.hopsworks.ai":          {admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone, 5, metav1.LabelSelectorOpExists, false, metav1.LabelSelectorOpExists},
	"pods.runai-webhook.hopsworks.ai":            {admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, 15, metav1.LabelSelectorOpExists, false, metav1.LabelSelectorOpExists},
	"namespaces.runai-webhook.hopsworks.ai":      {admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNoneOnDryRun, 30, "", true, metav1.LabelSelectorOpExists},
	"namespacelabels.runai-webhook.hopsworks.ai": {admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, 5, metav1.LabelSelectorOpExists, true, metav1.LabelSelectorOpDoesNotExist},
}

// AdmissionPolicies are the in-process policies (the chart's policies.yaml,
// rendered with run_ai_enable): the same selector rules as the webhooks they
// relieve; SideEffects and MaxTimeout do not apply (no call leaves the API
// server). Each must have a binding, or the API server never applies it.
var AdmissionPolicies = map[string]WebhookPolicy{
	ReleaseName + "-inject": {FailurePolicy: admissionregistrationv1.Ignore, QueueLabel: metav1.LabelSelectorOpExists, ProjectLabel: metav1.LabelSelectorOpExists},
	ReleaseName + "-pods":   {FailurePolicy: admissionregistrationv1.Fail, QueueLabel: metav1.LabelSelectorOpExists, ProjectLabel: metav1.LabelSelectorOpExists},
}

// CheckWebhookConfigurations returns every way the webhook configurations
// among objs break the policies: a missing webhook, a wrong failure policy,
// side-effect class or timeout, a namespace selector that no longer requires
// the managed label or no longer excludes the system namespaces.
func CheckWebhookConfigurations(objs []client.Object, projectLabel, queueLabel string) []error {
	var errs []error
	seen := map[string]bool{}
	check := func(name string, fp *admissionregistrationv1.FailurePolicyType, se *admissionregistrationv1.SideEffectClass, timeout *int32, sel, objSel *metav1.LabelSelector) {
		seen[name] = true
		want, ok := Policies[name]
		if !ok {
			errs = append(errs, fmt.Errorf("webhook %s: not in the policy table", name))
			return
		}
		if fp == nil || *fp != want.FailurePolicy {
			errs = append(errs, fmt.Errorf("webhook %s: failurePolicy %v, want %s", name, deref(fp), want.FailurePolicy))
		}
		if se == nil || *se != want.SideEffects {
			errs = append(errs, fmt.Errorf("webhook %s: sideEffects %v, want %s", name, deref(se), want.SideEffects))
		}
		if timeout == nil || *timeout > want.MaxTimeout {
			errs = append(errs, fmt.Errorf("webhook %s: timeoutSeconds %v, want at most %d", name, deref(timeout), want.MaxTimeout))
		}
		labels := sel
		if want.ByObject {
			if objSel == nil {
				errs = append(errs, fmt.Errorf("webhook %s: no objectSelector: it must select namespaces by their own labels", name))
				return
			}
			labels = objSel
		}
		errs = append(errs, checkSelector(name, sel, labels, projectLabel, queueLabel, want)...)
	}
	for _, o := range objs {
		switch w := o.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			for _, h := range w.Webhooks {
				check(h.Name, h.FailurePolicy, h.SideEffects, h.TimeoutSeconds, h.NamespaceSelector, h.ObjectSelector)
			}
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			for _, h := range w.Webhooks {
				check(h.Name, h.FailurePolicy, h.SideEffects, h.TimeoutSeconds, h.NamespaceSelector, h.ObjectSelector)
			}
		}
	}
	for name := range Policies {
		if !seen[name] {
			errs = append(errs, fmt.Errorf("webhook %s: missing", name))
		}
	}
	return append(errs, checkAdmissionPolicies(objs, projectLabel, queueLabel)...)
}

// checkAdmissionPolicies checks the admission policies among objs, when
// there are any (a render without run_ai_enable has none).
func checkAdmissionPolicies(objs []client.Object, projectLabel, queueLabel string) []error {
	var errs []error
	found, bound := map[string]bool{}, map[string]bool{}
	check := func(name string, fp *admissionregistrationv1.FailurePolicyType, mr *admissionregistrationv1.MatchResources) {
		found[name] = true
		want, ok := AdmissionPolicies[name]
		if !ok {
			errs = append(errs, fmt.Errorf("admission policy %s: not in the policy table", name))
			return
		}
		if fp == nil || *fp != want.FailurePolicy {
			errs = append(errs, fmt.Errorf("admission policy %s: failurePolicy %v, want %s", name, deref(fp), want.FailurePolicy))
		}
		if mr == nil {
			errs = append(errs, fmt.Errorf("admission policy %s: no matchConstraints", name))
			return
		}
		errs = append(errs, checkSelector("admission policy "+name, mr.NamespaceSelector, mr.NamespaceSelector, projectLabel, queueLabel, want)...)
	}
	for _, o := range objs {
		switch p := o.(type) {
		case *admissionregistrationv1.MutatingAdmissionPolicy:
			check(p.Name, p.Spec.FailurePolicy, p.Spec.MatchConstraints)
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			check(p.Name, p.Spec.FailurePolicy, p.Spec.MatchConstraints)
		case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
			bound[p.Spec.PolicyName] = true
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			bound[p.Spec.PolicyName] = true
			if !slices.Contains(p.Spec.ValidationActions, admissionregistrationv1.Deny) {
				errs = append(errs, fmt.Errorf("admission policy binding %s: validationActions %v do not deny", p.Name, p.Spec.ValidationActions))
			}
		}
	}
	if len(found) == 0 {
		return errs
	}
	for name := range AdmissionPolicies {
		switch {
		case !found[name]:
			errs = append(errs, fmt.Errorf("admission policy %s: missing", name))
		case !bound[name]:
			errs = append(errs, fmt.Errorf("admission policy %s: no binding", name))
		}
	}
	return errs
}

func checkSelector(name string, sel, labels *metav1.LabelSelector, projectLabel, queueLabel string, want WebhookPolicy) []error {
	if sel == nil {
		return []error{fmt.Errorf("webhook %s: no namespaceSelector: it would see every namespace, kube-system included", name)}
	}
	var errs []error
	var managed, queue bool
	for _, r := range labels.MatchExpressions {
		switch {
		case r.Key == projectLabel && r.Operator == want.ProjectLabel:
			managed = true
		case r.Key == queueLabel && r.Operator == want.QueueLabel:
			queue = true
		}
	}
	excluded := map[string]bool{}
	for _, r := range sel.MatchExpressions {
		if r.Key == "kubernetes.io/metadata.name" && r.Operator == metav1.LabelSelectorOpNotIn {
			for _, v := range r.Values {
				excluded[v] = true
			}
		}
	}
	if !managed {
		errs = append(errs, fmt.Errorf("webhook %s: selector does not say %s %s", name, projectLabel, want.ProjectLabel))
	}
	if want.QueueLabel != "" && !queue {
		errs = append(errs, fmt.Errorf("webhook %s: selector does not say %s %s", name, queueLabel, want.QueueLabel))
	}
	for _, ns := range ExcludedNamespaces {
		if !excluded[ns] {
			errs = append(errs, fmt.Errorf("webhook %s: namespace %s is not excluded", name, ns))
		}
	}
	return slices.Clip(errs)
}

func deref[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}
