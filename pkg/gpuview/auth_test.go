package gpuview_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/hopsworks/runai-webhook/pkg/gpuview"
)

// reviewAPI answers TokenReviews and SubjectAccessReviews like an API server
// would, and counts them.
type reviewAPI struct {
	tokens   map[string]authenticationv1.UserInfo
	allowed  map[string]bool // user + "/" + namespace + "/" + resource
	fail     atomic.Bool
	tr, sars atomic.Int32
	lastSAR  authorizationv1.SubjectAccessReviewSpec
}

func (a *reviewAPI) client() client.Client {
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).Build(), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if a.fail.Load() {
				return errors.New("the API server is down")
			}
			switch o := obj.(type) {
			case *authenticationv1.TokenReview:
				a.tr.Add(1)
				if u, ok := a.tokens[o.Spec.Token]; ok {
					o.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u}
				} else {
					o.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
				}
				return nil
			case *authorizationv1.SubjectAccessReview:
				a.sars.Add(1)
				a.lastSAR = o.Spec
				ra := o.Spec.ResourceAttributes
				if a.allowed[o.Spec.User+"/"+ra.Namespace+"/"+ra.Resource] && ra.Group == gpuview.APIGroup && ra.Verb == "get" {
					o.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "RBAC: allowed"}
				} else {
					o.Status = authorizationv1.SubjectAccessReviewStatus{Reason: "no RBAC policy matched"}
				}
				return nil
			}
			return c.Create(ctx, obj, opts...)
		},
	})
}

func TestKubeAuthReviewsAndCaches(t *testing.T) {
	api := &reviewAPI{
		tokens: map[string]authenticationv1.UserInfo{"tok-alice": {
			Username: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"},
			Extra: map[string]authenticationv1.ExtraValue{"scopes": {"view"}},
		}},
		allowed: map[string]bool{"alice/team/" + gpuview.ResourceGPUAvailability: true},
	}
	now := time.Unix(1000, 0)
	auth := &gpuview.KubeAuth{Client: api.client(), Now: func() time.Time { return now }}
	ctx := context.Background()

	u, ok, err := auth.Authenticate(ctx, "tok-alice")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, gpuview.User{Name: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"}, Extra: map[string][]string{"scopes": {"view"}}}, u)
	_, ok, err = auth.Authenticate(ctx, "tok-mallory")
	require.NoError(t, err)
	assert.False(t, ok, "an invalid token is refused")

	access := gpuview.Access{Verb: "get", Resource: gpuview.ResourceGPUAvailability, Namespace: "team"}
	allowed, _, err := auth.Authorize(ctx, u, access)
	require.NoError(t, err)
	assert.True(t, allowed)
	assert.Equal(t, authorizationv1.SubjectAccessReviewSpec{
		User: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"},
		Extra:              map[string]authorizationv1.ExtraValue{"scopes": {"view"}},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "team", Verb: "get", Group: gpuview.APIGroup, Resource: gpuview.ResourceGPUAvailability},
	}, api.lastSAR, "the SAR carries the whole identity and the view's attributes")
	denied, reason, err := auth.Authorize(ctx, u, gpuview.Access{Verb: "get", Resource: gpuview.ResourceGPUAvailability, Namespace: "other"})
	require.NoError(t, err)
	assert.False(t, denied)
	assert.Contains(t, reason, "no RBAC policy matched")

	// Within the TTL, nothing is asked again, denials and invalid tokens included.
	for range 5 {
		_, _, _ = auth.Authenticate(ctx, "tok-alice")
		_, _, _ = auth.Authenticate(ctx, "tok-mallory")
		_, _, _ = auth.Authorize(ctx, u, access)
		_, _, _ = auth.Authorize(ctx, u, gpuview.Access{Verb: "get", Resource: gpuview.ResourceGPUAvailability, Namespace: "other"})
	}
	assert.Equal(t, int32(2), api.tr.Load())
	assert.Equal(t, int32(2), api.sars.Load())

	// Another group is another identity: no cache hit.
	u2 := u
	u2.Groups = []string{"devs"}
	_, _, _ = auth.Authorize(ctx, u2, access)
	assert.Equal(t, int32(3), api.sars.Load())

	// After the TTL, decisions are taken again (a revoked binding takes effect).
	now = now.Add(11 * time.Second)
	_, _, _ = auth.Authenticate(ctx, "tok-alice")
	_, _, _ = auth.Authorize(ctx, u, access)
	assert.Equal(t, int32(3), api.tr.Load())
	assert.Equal(t, int32(4), api.sars.Load())
}

func TestKubeAuthDoesNotCacheFailures(t *testing.T) {
	api := &reviewAPI{tokens: map[string]authenticationv1.UserInfo{"t": {Username: "bob"}}}
	auth := &gpuview.KubeAuth{Client: api.client()}
	api.fail.Store(true)
	_, _, err := auth.Authenticate(context.Background(), "t")
	require.Error(t, err)
	_, _, err = auth.Authorize(context.Background(), gpuview.User{Name: "bob"}, gpuview.Access{Verb: "get", Resource: gpuview.ResourceRunAIAdmin})
	require.Error(t, err)
	api.fail.Store(false)
	_, ok, err := auth.Authenticate(context.Background(), "t")
	require.NoError(t, err)
	assert.True(t, ok, "a failure to decide is not remembered")
}
