package app

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hopsworks/runai-webhook/pkg/bind"
	"github.com/hopsworks/runai-webhook/pkg/gpuview"
	"github.com/hopsworks/runai-webhook/pkg/nsview"
	"github.com/hopsworks/runai-webhook/pkg/runai"
)

// setupAPI serves the GPU and admin views (pkg/gpuview) on the webhook's
// HTTPS port, next to the admission webhooks: every replica answers them.
// Namespaces are read live (the API reader), so a view never shows a
// binding older than the API server's; TokenReviews and
// SubjectAccessReviews go through the manager's client (the chart's
// ClusterRole grants both creates).
func setupAPI(mgr ctrl.Manager, o Options, binder *bind.Binder, api runai.API, keys nsview.Keys) error {
	svc := &gpuview.Service{
		Keys: keys, Enabled: o.Config.RunAIEnable, DefaultDepartment: o.Config.DefaultDepartment,
		Namespaces: mgr.GetAPIReader(), RunAI: api, Lookups: binder,
	}
	auth := &gpuview.KubeAuth{Client: mgr.GetClient()}
	mgr.GetWebhookServer().Register(gpuview.PathPrefix, gpuview.NewHandler(gpuview.Deps{
		Service: svc, Authenticator: auth, Authorizer: auth, Log: o.Log.WithName("api"),
	}))
	return nil
}
