package certs

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGenerateVerifiesForEachHost(t *testing.T) {
	p, err := Generate([]string{"127.0.0.1", "runai-webhook.runai-webhook.svc"}, time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(p.CACert))
	for _, host := range []string{"127.0.0.1", "runai-webhook.runai-webhook.svc"} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host})
		assert.NoError(t, err, host)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "evil.example"})
	assert.Error(t, err)
	require.NoError(t, p.Write(t.TempDir()))
}
