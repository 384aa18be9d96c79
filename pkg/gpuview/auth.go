package gpuview

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// APIGroup is the API group of the views' authorization attributes. Nothing
// serves this group in the API server; RBAC rules name it so that access to
// the views is granted like any other Kubernetes access (manifests/chart
// templates/rbac.yaml).
const APIGroup = "runai-webhook.hopsworks.ai"

// Resources of the authorization checks.
const (
	ResourceGPUAvailability = "gpuavailability" // namespaced: the namespace view
	ResourceRunAIAdmin      = "runaiadmin"      // cluster-scoped: the admin view
)

// User is an authenticated caller.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Access is what a request needs: verb on resource of APIGroup, in Namespace
// ("" = cluster-scoped).
type Access struct {
	Verb      string
	Resource  string
	Namespace string
}

// Authenticator turns a bearer token into a user. ok is false for a token
// that is not valid (401); err is a failure to decide (503).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (u User, ok bool, err error)
}

// Authorizer decides whether u may have access. reason explains a denial.
type Authorizer interface {
	Authorize(ctx context.Context, u User, a Access) (allowed bool, reason string, err error)
}

// KubeAuth authenticates with TokenReview and authorizes with
// SubjectAccessReview through the Kubernetes API, so the views obey exactly
// the RBAC (or other authorizer) the cluster runs. Decisions are cached for
// TTL, keyed by a hash of the token (authentication) or of the user and the
// access (authorization), so a UI polling a view costs the API server two
// creates per TTL, not per request. Failures to decide are not cached.
type KubeAuth struct {
	// Client creates TokenReviews and SubjectAccessReviews (the webhook's
	// ClusterRole grants both).
	Client client.Client
	// Audiences, when set, are the audiences a token must be valid for;
	// empty accepts tokens for the API server's own audiences.
	Audiences []string
	// TTL of cached decisions; 0 means 10s. Negative disables the cache.
	TTL time.Duration
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time

	authn ttlCache[authnResult]
	authz ttlCache[authzResult]
}

var (
	_ Authenticator = (*KubeAuth)(nil)
	_ Authorizer    = (*KubeAuth)(nil)
)

type authnResult struct {
	user User
	ok   bool
}

type authzResult struct {
	allowed bool
	reason  string
}

func (k *KubeAuth) ttl() time.Duration {
	if k.TTL == 0 {
		return 10 * time.Second
	}
	return k.TTL
}

func (k *KubeAuth) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// Authenticate implements Authenticator with a TokenReview.
func (k *KubeAuth) Authenticate(ctx context.Context, token string) (User, bool, error) {
	key := hashKey(token)
	if r, hit := k.authn.get(key, k.now()); hit {
		return r.user, r.ok, nil
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: k.Audiences}}
	if err := k.Client.Create(ctx, tr); err != nil {
		return User{}, false, fmt.Errorf("TokenReview: %w", err)
	}
	res := authnResult{ok: tr.Status.Authenticated}
	if res.ok {
		u := tr.Status.User
		res.user = User{Name: u.Username, UID: u.UID, Groups: u.Groups}
		if len(u.Extra) > 0 {
			res.user.Extra = make(map[string][]string, len(u.Extra))
			for key, v := range u.Extra {
				res.user.Extra[key] = []string(v)
			}
		}
	}
	k.authn.put(key, res, k.now(), k.ttl())
	return res.user, res.ok, nil
}

// Authorize implements Authorizer with a SubjectAccessReview.
func (k *KubeAuth) Authorize(ctx context.Context, u User, a Access) (bool, string, error) {
	key := authzKey(u, a)
	if r, hit := k.authz.get(key, k.now()); hit {
		return r.allowed, r.reason, nil
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Name, UID: u.UID, Groups: u.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.Namespace, Verb: a.Verb, Group: APIGroup, Resource: a.Resource,
		},
	}}
	if len(u.Extra) > 0 {
		sar.Spec.Extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
		for key, v := range u.Extra {
			sar.Spec.Extra[key] = v
		}
	}
	if err := k.Client.Create(ctx, sar); err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	res := authzResult{allowed: sar.Status.Allowed && !sar.Status.Denied, reason: sar.Status.Reason}
	if sar.Status.EvaluationError != "" && !res.allowed {
		res.reason = strings.TrimSpace(res.reason + " " + sar.Status.EvaluationError)
	}
	k.authz.put(key, res, k.now(), k.ttl())
	return res.allowed, res.reason, nil
}

func hashKey(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// authzKey identifies a user and an access; fields are length-prefixed so
// no two different inputs share a key.
func authzKey(u User, a Access) string {
	var b strings.Builder
	w := func(s string) { fmt.Fprintf(&b, "%d:%s|", len(s), s) }
	w(u.Name)
	w(u.UID)
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	for _, g := range groups {
		w(g)
	}
	b.WriteString("#")
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		w(k)
		for _, v := range u.Extra[k] {
			w(v)
		}
		b.WriteString(";")
	}
	b.WriteString("#")
	w(a.Verb)
	w(a.Resource)
	w(a.Namespace)
	return hashKey(b.String())
}

// maxCacheEntries bounds each cache; past it, expired entries are dropped
// and, if that is not enough, the cache starts over (a burst of distinct
// tokens cannot grow memory without bound).
const maxCacheEntries = 4096

type cacheEntry[V any] struct {
	v       V
	expires time.Time
}

type ttlCache[V any] struct {
	mu sync.Mutex
	m  map[string]cacheEntry[V]
}

func (c *ttlCache[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[V]) put(key string, v V, now time.Time, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cacheEntry[V]{}
	}
	if len(c.m) >= maxCacheEntries {
		for k, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxCacheEntries {
			c.m = map[string]cacheEntry[V]{}
		}
	}
	c.m[key] = cacheEntry[V]{v: v, expires: now.Add(ttl)}
}
