package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ProjectedKeys are the Secret keys the chart mounts into the cert dir
// (deployment.yaml: the serving pair only, never the CA's key).
var ProjectedKeys = []string{"tls.crt", "tls.key"}

// RenderChart renders manifests/chart as `make manifests` does (release
// runai-webhook in namespace runai-webhook), with extra --set values, using
// the helm built into bin/k8s.
func (e *Env) RenderChart(set ...string) ([]byte, error) {
	assets, err := Assets(e.Root)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(assets, "helm")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("helm missing in %s: run `make testbin`", assets)
	}
	args := []string{"template", ReleaseName, filepath.Join(e.Root, "manifests", "chart"), "--namespace", ReleaseNamespace,
		"-f", filepath.Join(e.Root, "manifests", "install-values.yaml")}
	for _, v := range set {
		args = append(args, "--set", v)
	}
	cmd := exec.Command(bin, args...)
	home := filepath.Join(e.Dir, "helm")
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template %v: %w: %s", set, err, errb.String())
	}
	return out.Bytes(), nil
}

// manifests are the objects the harness installs: the chart as rendered for
// this environment, or manifests/install.yaml.
func (e *Env) manifests() ([]client.Object, error) {
	if e.objs != nil {
		return e.objs, nil
	}
	return e.InstallObjects()
}

// WebhookRunning reports whether the in-process webhook is still running
// (it has not returned since it started).
func (e *Env) WebhookRunning() bool {
	if e.appDone == nil {
		return false
	}
	select {
	case err := <-e.appDone:
		e.appDone <- err // keep it for Stop
		return false
	default:
		return true
	}
}

// startSecretProjector plays kubelet for the webhook's certificate volume:
// it polls the Secret every 100 ms and, whenever its resourceVersion changes,
// writes the keys the chart mounts into CertDir the way kubelet's atomic
// writer does (a timestamped folder, a ..data symlink swapped by rename, and
// per-file symlinks through ..data). The server's reload path is thus the one
// it takes in a pod, only faster than kubelet's sync period (about a minute).
func (e *Env) startSecretProjector(key client.ObjectKey) {
	ctx, cancel := context.WithCancel(context.Background())
	e.stopProjector, e.projectorDone = cancel, make(chan struct{})
	go func() {
		defer close(e.projectorDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var last string
		for {
			var s corev1.Secret
			if err := e.Client.Get(ctx, key, &s); err == nil && s.ResourceVersion != last {
				if err := ProjectAtomically(e.CertDir, s.Data, ProjectedKeys); err != nil {
					e.logf("projecting Secret %s: %v", key, err)
				} else {
					last = s.ResourceVersion
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// ProjectAtomically writes data[keys] into dir as kubelet's atomic writer
// does. Keys missing from data are skipped (an optional volume); nothing is
// written when none is present.
func ProjectAtomically(dir string, data map[string][]byte, keys []string) error {
	payload := map[string][]byte{}
	for _, k := range keys {
		if v, ok := data[k]; ok {
			payload[k] = v
		}
	}
	if len(payload) == 0 {
		return nil
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	for k, v := range payload {
		if err := os.WriteFile(filepath.Join(ts, k), v, 0o600); err != nil {
			return err
		}
	}
	dataLink, tmpLink := filepath.Join(dir, "..data"), filepath.Join(dir, "..data_tmp")
	old, _ := os.Readlink(dataLink)
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, dataLink); err != nil {
		return err
	}
	for k := range payload {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				return err
			}
		}
	}
	if old != "" && old != filepath.Base(ts) {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

func (e *Env) manifestSource() string {
	if e.certRotation {
		return "the chart rendered with certManager.enabled=false"
	}
	return "manifests/install.yaml"
}

// waitReady polls /readyz?verbose until it passes, recording the checks seen
// failing on the way (kubelet's readiness probe, every 100 ms).
func (e *Env) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	failing := map[string]bool{}
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-e.appDone:
			e.appDone <- err
			return fmt.Errorf("the webhook exited during start-up: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.HealthURL+"/readyz?verbose", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(body)
			if resp.StatusCode == http.StatusOK {
				e.ReadyAfter = time.Since(e.webhookStarted)
				for name := range failing {
					e.NotReadyChecks = append(e.NotReadyChecks, name)
				}
				sort.Strings(e.NotReadyChecks)
				e.logf("webhook ready %s after its start (failing before: %v)", e.ReadyAfter.Round(time.Millisecond), e.NotReadyChecks)
				return nil
			}
			for _, line := range strings.Split(last, "\n") {
				if name, ok := strings.CutPrefix(line, "[-]"); ok {
					name, _, _ = strings.Cut(name, " ")
					failing[name] = true
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the webhook was not ready within 60s: %s", strings.TrimSpace(last))
}
