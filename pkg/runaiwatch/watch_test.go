package runaiwatch

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestAvailable(t *testing.T) {
	cond := func(s corev1.ConditionStatus) *appsv1.Deployment {
		return &appsv1.Deployment{Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: s}}}}
	}
	assert.True(t, Available(cond(corev1.ConditionTrue)))
	assert.False(t, Available(cond(corev1.ConditionFalse)))
	assert.True(t, Available(&appsv1.Deployment{Status: appsv1.DeploymentStatus{AvailableReplicas: 1}}), "no conditions: replicas decide")
	assert.False(t, Available(&appsv1.Deployment{}))
}

func TestCheckReportsMissingAndDown(t *testing.T) {
	up := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: "runai-admission-controller"},
		Status: appsv1.DeploymentStatus{ReadyReplicas: 2, Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(up).Build()
	w := &Watcher{Reader: c, Log: logr.Discard()}
	got := w.Check(context.Background())
	assert.Equal(t, []Status{
		{Name: "runai-admission-controller", Found: true, Available: true, Ready: 2},
		{Name: "admission"},
	}, got)
}
