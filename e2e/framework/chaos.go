package framework

// Helpers of the chaos tests (e2e/chaos_test.go): run the webhook as
// separate processes behind a load balancer instead of in process, and
// restart the API server. Kept apart from framework.go, which they only add
// to.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StopWebhook stops the in-process webhook (server and reconcile controller)
// and waits for it to return; the webhook configurations still point at
// its address until they are replaced (InstallWebhookConfigurationsAt).
// Env.Controller is then stopped: its Pass still works (it is a plain
// function of the clients), but nothing runs it in the background.
func (e *Env) StopWebhook() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancelApp == nil {
		return nil
	}
	e.cancelApp()
	var err error
	select {
	case err = <-e.appDone:
	case <-time.After(30 * time.Second):
		return errors.New("the in-process webhook did not stop within 30s")
	}
	// Stop has nothing left to stop or wait for.
	e.cancelApp = nil
	e.logf("in-process webhook stopped (%v)", err)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// CA returns the PEM CA that signed the webhook's serving certificate.
func (e *Env) CA() ([]byte, error) {
	return os.ReadFile(filepath.Join(e.CertDir, "ca.crt"))
}

// InstallWebhookConfigurationsAt deletes the environment's Mutating and
// Validating webhook configurations and creates them again from the
// production manifests with clientConfig.url = baseURL + each webhook's
// service path and caBundle = ca. Everything else (rules, selectors,
// failure policies, timeouts) stays as users install it.
func (e *Env) InstallWebhookConfigurationsAt(ctx context.Context, baseURL string, ca []byte) error {
	objs, err := e.manifests()
	if err != nil {
		return err
	}
	rewrite := func(c admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig {
		path := "/"
		if c.Service != nil && c.Service.Path != nil {
			path = *c.Service.Path
		} else if c.URL != nil {
			return c // already a URL (should not happen with the chart)
		}
		url := baseURL + path
		return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}
	}
	n := 0
	for _, o := range objs {
		var obj client.Object
		switch w := o.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			cp := w.DeepCopy()
			for i := range cp.Webhooks {
				cp.Webhooks[i].ClientConfig = rewrite(cp.Webhooks[i].ClientConfig)
			}
			cp.ResourceVersion = ""
			obj = cp
			old := &admissionregistrationv1.MutatingWebhookConfiguration{}
			old.Name = cp.Name
			if err := e.Client.Delete(ctx, old); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting MutatingWebhookConfiguration %s: %w", cp.Name, err)
			}
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			cp := w.DeepCopy()
			for i := range cp.Webhooks {
				cp.Webhooks[i].ClientConfig = rewrite(cp.Webhooks[i].ClientConfig)
			}
			cp.ResourceVersion = ""
			obj = cp
			old := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			old.Name = cp.Name
			if err := e.Client.Delete(ctx, old); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting ValidatingWebhookConfiguration %s: %w", cp.Name, err)
			}
		default:
			continue
		}
		if err := e.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
		n++
		e.logf("re-created %T %s pointing at %s", obj, obj.GetName(), baseURL)
	}
	if n != 2 {
		return fmt.Errorf("%s holds %d webhook configurations, want 2", e.manifestSource(), n)
	}
	return nil
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// port, with the same serving certificate, service-account signing key and
// client CA, so every client, kubeconfig and token of the environment keeps
// working once it is back. etcd keeps running, so no state is lost. down is
// how long it stays stopped before the restart.
func (e *Env) RestartAPIServer(down time.Duration) error {
	if e.Test == nil {
		return errors.New("no local control plane to restart (existing cluster)")
	}
	as := e.Test.ControlPlane.GetAPIServer()
	// envtest removes a certificate directory it created itself when the
	// API server stops, and would mint a new serving CA on start: keep a
	// copy and start from it.
	keep := filepath.Join(e.Dir, fmt.Sprintf("apiserver-certs-%d", time.Now().UnixNano()))
	if err := copyDir(as.CertDir, keep); err != nil {
		return fmt.Errorf("keeping the API server's certificates: %w", err)
	}
	if as.StopTimeout < 30*time.Second {
		as.StopTimeout = 30 * time.Second // in-flight requests and watches drain first
	}
	start := time.Now()
	if err := as.Stop(); err != nil {
		// It did not drain in time and was SIGKILLed: a crash rather than
		// a clean stop, which a restart must survive as well.
		e.logf("kube-apiserver did not stop cleanly (%v); killed", err)
	}
	e.logf("kube-apiserver stopped in %s", time.Since(start).Round(time.Millisecond))
	// The port must be free before the new process binds it.
	addr := net.JoinHostPort(as.SecureServing.Address, as.SecureServing.Port)
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver's port %s still answers 30s after it was stopped", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(down)
	as.CertDir = keep
	if as.StartTimeout < time.Minute {
		as.StartTimeout = time.Minute // a loaded machine
	}
	logPath := filepath.Join(e.Dir, "kube-apiserver-restart.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	as.Out, as.Err = logFile, logFile
	start = time.Now()
	if err := as.Start(); err != nil {
		logFile.Close()
		out, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("starting kube-apiserver again: %w; its last lines:\n%s", err, strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
	e.logf("kube-apiserver back on %s in %s", e.Admin.Host, time.Since(start).Round(time.Millisecond))
	return nil
}

// APIServerCertDir is the folder of kube-apiserver's certificates and keys
// (sa-signer.key signs service-account tokens).
func (e *Env) APIServerCertDir() string {
	if e.Test == nil {
		return ""
	}
	return e.Test.ControlPlane.GetAPIServer().CertDir
}

func copyDir(from, to string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, en := range entries {
		if !en.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(from, en.Name()), filepath.Join(to, en.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
