package cluster

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Attacker's side: a worker's artifacts tar cannot write outside the
// artifacts folder (.., an absolute name, a symlink); the twin extracts.
func TestUntarRefusesEscapes(t *testing.T) {
	mk := func(hs ...*tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				tw.Write(make([]byte, h.Size))
			}
		}
		tw.Close()
		return b.Bytes()
	}
	outside := t.TempDir()
	for name, data := range map[string][]byte{
		"dotdot":   mk(&tar.Header{Name: "../../" + filepath.Base(outside) + "/x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}),
		"absolute": mk(&tar.Header{Name: filepath.Join(outside, "x"), Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}),
		"symlink":  mk(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}),
		"too big":  mk(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 2048, Mode: 0o644}),
	} {
		dir := t.TempDir()
		if err := Untar(bytes.NewReader(data), dir, 1024); err == nil {
			t.Errorf("%s: extracted", name)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("a file was written outside")
	}
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "report.txt"), []byte("ok"), 0o644)
	var b bytes.Buffer
	if err := TarDir(src, &b); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := Untar(&b, dst, 1024); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "sub", "report.txt")); string(got) != "ok" {
		t.Fatalf("extracted %q", got)
	}
}
