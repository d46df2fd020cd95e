package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestClusterKeys(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	file := filepath.Join(dir, "factory.yaml")
	f, fs := Parse([]byte(`version: 1
repos:
  app: {path: .}
serve:
  cluster: {listen: "0.0.0.0:7422"}
pipelines:
  default: [a, b]
steps:
  a: {run: [true], pool: gpu}
  b: {run: [true]}
`), file)
	if len(fs.Errors()) > 0 {
		t.Fatalf("findings: %v", fs)
	}
	c := f.Serve.Cluster
	if c == nil || c.Listen != "0.0.0.0:7422" || !c.LocalWorker || c.LostAfter != 15*time.Second {
		t.Fatalf("cluster %+v: local_worker defaults to true, lost_after to 15s", c)
	}
	if f.Steps["a"].Pool != "gpu" || f.Steps["b"].Pool != "" {
		t.Fatalf("pools %q %q", f.Steps["a"].Pool, f.Steps["b"].Pool)
	}
	f, fs = Parse([]byte(`version: 1
repos:
  app: {path: .}
serve:
  cluster: {nats_url: "tls://n1:4222, tls://n2:4222", local_worker: false, lost_after: 3s,
    account: AAVZRIM45LOZGXAQAH3DTRLAHPR7QZ7D5YBT2UD4CYRCRF7WLHZR7GXS, signing_key: {secret: nats.signing}}
pipelines:
  default: [a]
steps:
  a: {run: [true]}
`), file)
	c = f.Serve.Cluster
	if len(fs.Errors()) > 0 || c.LocalWorker || c.LostAfter != 3*time.Second || c.NatsURL != "tls://n1:4222, tls://n2:4222" ||
		c.Account != "AAVZRIM45LOZGXAQAH3DTRLAHPR7QZ7D5YBT2UD4CYRCRF7WLHZR7GXS" || c.SigningKey == nil || c.SigningKey.Key != "nats.signing" ||
		c.Replicas != 1 || c.CA != "" {
		t.Fatalf("cluster %+v %v: replicas defaults to 1, ca to none", c, fs)
	}
	// ca is a PEM bundle, relative to the factory file's folder.
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), testCAPEM(t), 0o644); err != nil {
		t.Fatal(err)
	}
	f, fs = Parse([]byte(`version: 1
repos:
  app: {path: .}
serve:
  cluster: {nats_url: "tls://n1:4222", replicas: 3, ca: ca.pem,
    account: AAVZRIM45LOZGXAQAH3DTRLAHPR7QZ7D5YBT2UD4CYRCRF7WLHZR7GXS, signing_key: {secret: nats.signing}}
pipelines:
  default: [a]
steps:
  a: {run: [true]}
`), file)
	if c = f.Serve.Cluster; len(fs.Errors()) > 0 || c.Replicas != 3 || c.CA != filepath.Join(dir, "ca.pem") {
		t.Fatalf("cluster %+v %v", c, fs)
	}
	// A file that is not a bundle of certificates (here a key) is refused.
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, fs = Parse([]byte(`version: 1
repos:
  app: {path: .}
serve:
  cluster: {nats_url: "tls://n1:4222", ca: ca.pem,
    account: AAVZRIM45LOZGXAQAH3DTRLAHPR7QZ7D5YBT2UD4CYRCRF7WLHZR7GXS, signing_key: {secret: nats.signing}}
pipelines:
  default: [a]
steps:
  a: {run: [true]}
`), file)
	if errs := fs.Errors(); len(errs) != 1 || errs[0].Code != ECodeNatsCA || !strings.Contains(errs[0].Message, "EC PRIVATE KEY") {
		t.Fatalf("a key as ca: %v", errs)
	}
	// A seed written in the file is refused without being echoed.
	_, fs = Parse([]byte(`version: 1
repos:
  app: {path: .}
serve:
  cluster: {nats_url: "tls://n1:4222", account: AAVZRIM45LOZGXAQAH3DTRLAHPR7QZ7D5YBT2UD4CYRCRF7WLHZR7GXS,
    signing_key: SAAGNOTAREALSEEDXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX}
pipelines:
  default: [a]
steps:
  a: {run: [true]}
`), file)
	if errs := fs.Errors(); len(errs) != 1 || errs[0].Code != ECodeNatsAccount || strings.Contains(errs[0].String(), "SAAG") {
		t.Fatalf("a seed in the file: %v", errs)
	}
	// The revoker's keys: all three are read; one missing is named.
	revoke := `version: 1
repos:
  app: {path: .}
serve:
  cluster: {nats_url: "tls://n1:4222", account: AAVZRIM45LOZGXAQAH3DTRLAHPR7QZ7D5YBT2UD4CYRCRF7WLHZR7GXS, signing_key: {secret: nats.signing},
    system_account: ACIPKTJS5CC7JP3LH5HZMSGVRJUUIVSTXLQM5L5V7AXC5M5FDDT2AOZX, system_key: {secret: sys.key}, operator_key: {secret: op.key}}
pipelines:
  default: [a]
steps:
  a: {run: [true]}
`
	f, fs = Parse([]byte(revoke), file)
	if c = f.Serve.Cluster; len(fs.Errors()) > 0 || c.SystemAccount != "ACIPKTJS5CC7JP3LH5HZMSGVRJUUIVSTXLQM5L5V7AXC5M5FDDT2AOZX" || c.SystemKey == nil || c.SystemKey.Key != "sys.key" ||
		c.OperatorKey == nil || c.OperatorKey.Key != "op.key" {
		t.Fatalf("the revoker's keys: %+v %v", c, fs)
	}
	_, fs = Parse([]byte(strings.Replace(revoke, ", operator_key: {secret: op.key}", "", 1)), file)
	if errs := fs.Errors(); len(errs) != 1 || errs[0].Code != ECodeNatsAccount || !strings.Contains(errs[0].Message, "serve.cluster.operator_key") {
		t.Fatalf("system_account without operator_key: %v", errs)
	}
	_, fs = Parse([]byte(strings.Replace(revoke, "system_key: {secret: sys.key}", "system_key: SAAGNOTAREALSEEDXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX", 1)), file)
	if errs := fs.Errors(); len(errs) != 1 || strings.Contains(errs[0].String(), "SAAG") {
		t.Fatalf("a system seed in the file: %v", errs)
	}
	f, _ = Parse([]byte("version: 1\nrepos:\n  app: {path: .}\npipelines:\n  default: [a]\nsteps:\n  a: {run: [true]}\n"), file)
	if f.Serve.Cluster != nil {
		t.Fatal("no serve.cluster key: no cluster")
	}
}

func testCAPEM(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
