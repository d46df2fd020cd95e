package serve

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A step can fill artifacts/ with empty folders: the listing reads a bounded
// number of entries and says it was cut, instead of walking them all on
// every request. The twin: a normal tree is listed whole, links skipped.
func TestListArtifactsIsBounded(t *testing.T) {
	arts := t.TempDir()
	for i := 0; i < MaxArtifactEntries+500; i++ {
		if err := os.Mkdir(filepath.Join(arts, "d"+strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(arts)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if l := listArtifacts(root); !l.Cut || len(l.Files) != 0 {
		t.Fatalf("%d empty folders: cut %v, %d files; want cut", MaxArtifactEntries+500, l.Cut, len(l.Files))
	}

	small := t.TempDir()
	os.MkdirAll(filepath.Join(small, "sub", "deeper"), 0o755)
	os.WriteFile(filepath.Join(small, "report.txt"), []byte("r"), 0o644)
	os.WriteFile(filepath.Join(small, "sub", "deeper", "data.json"), []byte("{}"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(small, "sub", "escape"))
	r2, err := os.OpenRoot(small)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	l := listArtifacts(r2)
	if l.Cut || l.Skipped != 1 || len(l.Files) != 2 || l.Files[0].Path != "report.txt" || l.Files[1].Path != "sub/deeper/data.json" || l.Files[1].Size != 2 {
		t.Fatalf("listing: %+v", l)
	}
}
