package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/hopsworks/runai-webhook/pkg/internal/jsontest"
)

// reviewFields are the struct field names encoding/json matches in a review.
var reviewFields = []string{"apiVersion", "kind", "request", "uid", "resource", "group", "version", "name", "namespace",
	"operation", "userInfo", "username", "groups", "extra", "object", "oldObject", "dryRun"}

// referenceDecodeReview is the specification of DecodeReview: the envelope
// decoded by encoding/json (the implementation before jsonscan).
func referenceDecodeReview(body []byte) (*Request, string, error) {
	var rv review
	if err := json.Unmarshal(body, &rv); err != nil {
		return nil, "", fmt.Errorf("malformed AdmissionReview: %w", err)
	}
	if rv.Kind != "AdmissionReview" {
		return nil, "", fmt.Errorf("malformed AdmissionReview: kind is %q, want AdmissionReview", rv.Kind)
	}
	if rv.APIVersion != "admission.k8s.io/v1" {
		return nil, "", fmt.Errorf("unsupported AdmissionReview version %q: only admission.k8s.io/v1 is served", rv.APIVersion)
	}
	if rv.Request == nil {
		return nil, "", errors.New("malformed AdmissionReview: no request")
	}
	if rv.Request.UID == "" {
		return nil, "", errors.New("malformed AdmissionReview: request has no uid")
	}
	return rv.Request, rv.APIVersion, nil
}

// FuzzDecodeReview feeds arbitrary bodies to DecodeReview: it must never
// panic, accept only v1 reviews with a request and a uid, agree with its
// specification (encoding/json) on the API server's kind of JSON, and
// whatever it accepts must be answerable (the answer carries the same uid).
func FuzzDecodeReview(f *testing.F) {
	f.Add([]byte(podReview))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":null,"dryRun":null}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, version, err := DecodeReview(body)
		if jsontest.Canonical(body, reviewFields...) {
			wreq, wversion, werr := referenceDecodeReview(body)
			if (err != nil) != (werr != nil) {
				t.Fatalf("error %v, reference error %v", err, werr)
			}
			if err == nil && (!reflect.DeepEqual(req, wreq) || version != wversion) {
				t.Fatalf("decoded %+v, reference %+v", req, wreq)
			}
		}
		if err != nil {
			if req != nil || version != "" {
				t.Fatalf("error %v with a request", err)
			}
			return
		}
		if req == nil || req.UID == "" || version != "admission.k8s.io/v1" {
			t.Fatalf("accepted an incomplete review: %+v %q", req, version)
		}
		_ = req.IsDryRun()
		for _, resp := range []Response{Allow("w"), Deny("r", "m"), {Allowed: true, Patch: []PatchOp{{Op: "add", Path: "/a", Value: req.Namespace}}}} {
			out, err := EncodeResponse(req.UID, resp)
			if err != nil {
				t.Fatalf("encoding an answer: %v", err)
			}
			var rv admissionv1.AdmissionReview
			if err := json.Unmarshal(out, &rv); err != nil {
				t.Fatalf("answer is not a review: %v", err)
			}
			if string(rv.Response.UID) != req.UID || rv.Response.Allowed != resp.Allowed {
				t.Fatalf("answer %+v does not match uid %q / %+v", rv.Response, req.UID, resp)
			}
		}
	})
}

// TestDecodeReviewMatchesReference runs the differential check on reviews
// with every field, null values and escapes.
func TestDecodeReviewMatchesReference(t *testing.T) {
	for _, body := range []string{
		podReview,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":null,"resource":{"group":"apps","version":"v1","resource":"deployments"},"userInfo":{"username":"a","uid":"1","groups":["g"],"extra":{"k":["v"]}},"object":{"a":[1,{"b":null}]},"oldObject":null,"dryRun":false,"options":{"x":1}}}`,
		`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io\/v1","request":{"uid":"\u0075","name":"caf\u00e9","operation":"DELETE","dryRun":true}}`,
		` { "apiVersion" : "admission.k8s.io/v1" , "kind" : "AdmissionReview" , "request" : { "uid" : "u" , "object" : { "x" : "y" } } } `,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","dryRun":"yes"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","userInfo":{"groups":"g"}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":1}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"u"}`,
		`{"apiVersion":1,"kind":"AdmissionReview"}`,
		`null`, `[]`, `"x"`,
	} {
		req, v, err := DecodeReview([]byte(body))
		wreq, wv, werr := referenceDecodeReview([]byte(body))
		if werr != nil {
			if err == nil {
				t.Errorf("%s: reference refuses (%v), DecodeReview accepts", body, werr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", body, err)
			continue
		}
		if !reflect.DeepEqual(req, wreq) || v != wv {
			t.Errorf("%s:\n got %+v\nwant %+v", body, req, wreq)
		}
	}
}
