package framework

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/hopsworks/runai-webhook/pkg/app"
	"github.com/hopsworks/runai-webhook/pkg/config"
)

// UseExistingCluster reports USE_EXISTING_CLUSTER=true (envtest's switch):
// the suite runs against the cluster of the current kubeconfig, with the
// webhook installed there by the chart (hack/e2e-kind.sh).
func UseExistingCluster() bool {
	return strings.EqualFold(os.Getenv("USE_EXISTING_CLUSTER"), "true")
}

// startExisting connects to the existing cluster and waits for the
// in-cluster webhook; it starts no process (see the package comment).
func (e *Env) startExisting(ctx context.Context, o Options) error {
	start := time.Now()
	e.Existing = true
	existing := true
	e.Test = &envtest.Environment{UseExistingCluster: &existing}
	var err error
	if e.Admin, err = e.Test.Start(); err != nil {
		return fmt.Errorf("connecting to the existing cluster: %w", err)
	}
	e.Admin.QPS, e.Admin.Burst = 200, 400
	e.logf("existing cluster %s", e.Admin.Host)
	if e.Client, err = client.New(e.Admin, client.Options{Scheme: app.Scheme()}); err != nil {
		return err
	}
	// The admin is the kubeconfig's own identity, not impersonated.
	kc, err := kubeconfigFor(e.Admin, envtest.User{})
	if err != nil {
		return err
	}
	e.AdminKubeconfig = e.Dir + "/admin.kubeconfig"
	if err := os.WriteFile(e.AdminKubeconfig, kc, 0o600); err != nil {
		return err
	}
	// The configuration the chart was installed with (hack/e2e-kind.sh sets
	// the same values), so tests read labels and limits from one place.
	cfg := config.Default()
	cfg.RunAIEnable = true
	cfg.RunAIClientID = ClientID
	cfg.WebhookUser = WebhookUser
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	e.Config = cfg
	if err := e.waitWebhookServing(ctx); err != nil {
		return err
	}
	e.logf("in-cluster webhook answers; ready in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// kubeconfigFor writes rc as a kubeconfig, impersonating u when u.Name is set.
// Client certificates, tokens and basic auth are carried over (kind's
// kubeconfig uses client certificates); exec plugins are not.
func kubeconfigFor(rc *rest.Config, u envtest.User) ([]byte, error) {
	if rc.ExecProvider != nil || rc.AuthProvider != nil {
		return nil, fmt.Errorf("the kubeconfig's exec or auth-provider credentials are not supported; use client certificates or a token")
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{
		Server: rc.Host, CertificateAuthorityData: rc.CAData, CertificateAuthority: rc.CAFile,
		InsecureSkipTLSVerify: rc.Insecure, TLSServerName: rc.ServerName,
	}
	ai := &clientcmdapi.AuthInfo{
		ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData, ClientCertificate: rc.CertFile, ClientKey: rc.KeyFile,
		Token: rc.BearerToken, TokenFile: rc.BearerTokenFile, Username: rc.Username, Password: rc.Password,
	}
	if u.Name != "" {
		ai.Impersonate, ai.ImpersonateGroups = u.Name, u.Groups
	}
	cfg.AuthInfos["e2e"] = ai
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	cfg.CurrentContext = "e2e"
	return clientcmd.Write(*cfg)
}
