// Package e2e runs the webhook against a real kube-apiserver, etcd,
// kube-controller-manager and kubectl (built from Go modules into bin/k8s),
// with the webhook configurations users install (manifests/install.yaml).
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hopsworks/runai-webhook/e2e/framework"
	"github.com/hopsworks/runai-webhook/pkg/config"
	"github.com/hopsworks/runai-webhook/pkg/runai/runaitest"
)

// env is the shared test bed; each test works in its own namespaces.
var env *framework.Env

// kindTests run on an existing cluster (USE_EXISTING_CLUSTER=true,
// hack/e2e-kind.sh) unless -run says otherwise: those that need only the API
// server, the in-cluster webhook and its Run:ai (the simulator runs as a
// sidecar there), not the in-process simulator, controller or metrics.
const kindTests = "^(TestManagedNamespaceAndPodThroughInstalledWebhooks|TestEscapesRefused|TestNotebookOverQuotaRefusedJobAdmitted|" +
	"TestDeploymentOfNotebooksStopsAtQuota|TestDeploymentPodAdmittedLikeBarePod|TestUserCannotRelabelNamespace)$"

func TestMain(m *testing.M) {
	flag.Parse()
	if run := flag.Lookup("test.run"); framework.UseExistingCluster() && run != nil && run.Value.String() == "" {
		_ = run.Value.Set(kindTests)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	var err error
	env, err = framework.Start(ctx, framework.Options{
		Seed:      Seed(),
		Configure: func(c *config.Config) { c.ProjectGPUQuota = 2; c.BindTimeout = 5 * time.Second },
		Log:       os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: test bed failed to start:", err)
		cancel()
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: teardown:", err)
		code = 1
	}
	cancel()
	os.Exit(code)
}

// Seed is the simulator's state for the suite: the default department and
// two more, one of which (research) has a Hopsworks twin.
func Seed() runaitest.Seed {
	return runaitest.Seed{
		ClientID: framework.ClientID, ClientSecret: framework.ClientSecret,
		Departments: []runaitest.DepartmentSeed{{Name: "research"}, {Name: "vision"}},
		Projects:    []runaitest.ProjectSeed{{Name: "legacy-team", Department: "vision", Namespace: "e2e-adopted", DeservedGPUs: 1}},
	}
}
