package cluster

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// Attacker's side: a tar bomb of empty files (no bytes, so the byte bound
// never trips), a name nested deeper than MaxTarDepth, a name longer than
// MaxTarName; each is refused, and the bomb stops at MaxTarEntries files.
// The twin: a tar of exactly MaxTarDepth folders with its file extracts.
func TestUntarBounds(t *testing.T) {
	bomb := func(n int) io.Reader {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			for i := 0; i < n; i++ {
				if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%d/f%d", i/1000, i), Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
			pw.CloseWithError(tw.Close())
		}()
		return pr
	}
	dir := t.TempDir()
	err := Untar(bomb(MaxTarEntries+50000), dir, 1<<30)
	if err == nil || !strings.Contains(err.Error(), "files and folders") {
		t.Fatalf("a tar of %d empty files: %v", MaxTarEntries+50000, err)
	}
	files := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, _ error) error {
		if d != nil && d.Type().IsRegular() {
			files++
		}
		return nil
	})
	if files > MaxTarEntries {
		t.Errorf("%d files written", files)
	}

	one := func(name string) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 2, Mode: 0o644})
		tw.Write([]byte("ok"))
		tw.Close()
		return b.Bytes()
	}
	deep := strings.Repeat("d/", MaxTarDepth+1) + "f"
	long := strings.Repeat("n", 200) + "/" + strings.Repeat(strings.Repeat("x", 250)+"/", 20) + "f"
	elem := strings.Repeat("e", 300)
	for what, name := range map[string]string{"too deep": deep, "too long": long, "long element": elem} {
		if err := Untar(bytes.NewReader(one(name)), t.TempDir(), 1<<20); err == nil {
			t.Errorf("%s: extracted", what)
		}
	}
	ok := strings.Repeat("d/", MaxTarDepth) + "f"
	dst := t.TempDir()
	if err := Untar(bytes.NewReader(one(ok)), dst, 1<<20); err != nil {
		t.Fatalf("%d folders deep: %v", MaxTarDepth, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, filepath.FromSlash(ok))); string(b) != "ok" {
		t.Fatalf("extracted %q", b)
	}
}
