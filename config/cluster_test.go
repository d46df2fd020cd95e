package config

import (
	"os/exec"
	"path/filepath"
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
  cluster: {nats_url: "tls://n1:4222", local_worker: false, lost_after: 3s}
pipelines:
  default: [a]
steps:
  a: {run: [true]}
`), file)
	if len(fs.Errors()) > 0 || f.Serve.Cluster.LocalWorker || f.Serve.Cluster.LostAfter != 3*time.Second || f.Serve.Cluster.NatsURL != "tls://n1:4222" {
		t.Fatalf("cluster %+v %v", f.Serve.Cluster, fs)
	}
	f, _ = Parse([]byte("version: 1\nrepos:\n  app: {path: .}\npipelines:\n  default: [a]\nsteps:\n  a: {run: [true]}\n"), file)
	if f.Serve.Cluster != nil {
		t.Fatal("no serve.cluster key: no cluster")
	}
}
