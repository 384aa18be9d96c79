package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// gpuView reads a namespace's GPU view the way a project member does: a
// service account of the namespace bound to the built-in `view` role (the
// chart aggregates GPU-view access into it), its token, and the
// `runai-webhook gpu` command against the webhook's HTTPS API.
func gpuView(d *demo, namespace string) error {
	cs, err := kubernetes.NewForConfig(d.env.Admin)
	if err != nil {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "member", Namespace: namespace}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(d.ctx, sa, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating service account: %w", err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "member-view", Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "member", Namespace: namespace}},
	}
	if _, err := cs.RbacV1().RoleBindings(namespace).Create(d.ctx, rb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding view: %w", err)
	}
	expiry := int64(600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(d.ctx, "member",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting a token: %w", err)
	}
	bin := filepath.Join(d.env.Root, "bin", "runai-webhook")
	args := []string{"gpu", "-n", namespace, "--server", d.env.WebhookURL, "--ca-file", filepath.Join(d.env.CertDir, "ca.crt"), "--token", tr.Status.Token}
	fmt.Printf("$ runai-webhook gpu -n %s --server %s --ca-file ca.crt --token <service account token>\n", namespace, d.env.WebhookURL)
	var out []byte
	// The view role's aggregation is done by kube-controller-manager; give it a moment.
	for deadline := time.Now().Add(20 * time.Second); ; {
		out, err = exec.CommandContext(d.ctx, bin, args...).CombinedOutput()
		if err == nil || time.Now().After(deadline) || !strings.Contains(string(out), "403") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Println(indent(strings.TrimSpace(string(out))))
	if err != nil {
		return fmt.Errorf("runai-webhook gpu: %w", err)
	}
	_ = os.Stdout.Sync()
	return nil
}
