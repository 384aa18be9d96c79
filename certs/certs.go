// Package certs makes a CA and a serving certificate for running the webhook
// where cert-manager is absent: local runs, the demo and the end-to-end suite.
// Standard library only. In a cluster, cert-manager (the default) or the
// binary's built-in rotator manage certificates instead.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Pair is a PEM-encoded CA certificate and a serving certificate and key.
type Pair struct {
	CACert, Cert, Key []byte
}

// Generate makes a fresh CA and a serving certificate for hosts (DNS names or
// IP addresses), valid for validity.
func Generate(hosts []string, validity time.Duration) (Pair, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generating CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "runai-webhook-ca"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Pair{}, fmt.Errorf("signing CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Pair{}, fmt.Errorf("parsing CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generating serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: first(hosts)},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return Pair{}, fmt.Errorf("signing serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("encoding serving key: %w", err)
	}
	return Pair{
		CACert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Write stores the pair as ca.crt, tls.crt and tls.key in dir (the names of a
// kubernetes.io/tls Secret, which controller-runtime's server reads).
func (p Pair) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	for name, data := range map[string][]byte{"ca.crt": p.CACert, "tls.crt": p.Cert, "tls.key": p.Key} {
		// Write then rename, so a server watching the folder never reads half a file.
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func first(h []string) string {
	if len(h) == 0 {
		return "runai-webhook"
	}
	return h[0]
}
