package adhoc

import (
	"slices"
	"strings"
	"testing"
)

// The remembered shapes read back as written, the run's temp folder
// replaced by its mark and put back for another run's name.
func TestExecShapesRoundTrip(t *testing.T) {
	tmp := "/tmp/kusaw-exec-0123456789ab"
	tail := []string{"/opt/kusaw-bridge", "__confine", "-w", "/src/a b", "-w", tmp + "/tmp", "-w", tmp + "x", "--"}
	in := []execShape{
		{dir: "/src/a b", bwrap: "/usr/bin/bwrap", data: 2, tail: withMark(tail, tmp)},
		{dir: "/src/\"q\"\n", bwrap: "/usr/bin/bwrap", data: 0, tail: []string{"--"}},
	}
	if got := in[0].tail[5]; got != tmpMark+"/tmp" {
		t.Errorf("the temp folder is remembered as %q", got)
	}
	if got := in[0].tail[7]; got != tmp+"x" {
		t.Errorf("a path that only begins like the temp folder became %q", got)
	}
	out := decodeExecShapes(encodeExecShapes(in))
	if len(out) != len(in) {
		t.Fatalf("read %d shapes, wrote %d", len(out), len(in))
	}
	for i := range in {
		if !sameShape(in[i], out[i]) {
			t.Errorf("shape %d: wrote %+v, read %+v", i, in[i], out[i])
		}
	}
	other := "/tmp/kusaw-exec-ffffffffffff"
	want := slices.Clone(tail)
	want[5] = other + "/tmp"
	if got := withTmp(out[0].tail, other); !slices.Equal(got, want) {
		t.Errorf("another run's command %q, want %q", got, want)
	}
}

// A file kusaw did not write whole, or of another version, reads as no
// shapes at all: the next start is an ordinary one.
func TestExecShapesRefuseWhatTheyDoNotKnow(t *testing.T) {
	good := string(encodeExecShapes([]execShape{{dir: "/d", bwrap: "/usr/bin/bwrap", data: 1, tail: []string{"--"}}}))
	if len(decodeExecShapes([]byte(good))) != 1 {
		t.Fatal("the good file does not read")
	}
	for name, b := range map[string]string{
		"empty":          "",
		"another header": "kusaw exec start 2\n" + good[len(execAheadHeader)+1:],
		"cut short":      good[:len(good)-3],
		"unknown line":   good + "cmd \"x\"\n",
		"bad quoting":    good + "tail x\n",
		"negative data":  good + "data -1\n",
		"tail first":     execAheadHeader + "\ntail \"--\"\n",
	} {
		if got := decodeExecShapes([]byte(b)); got != nil {
			t.Errorf("%s: read %+v", name, got)
		}
	}
}

// shapeFor finds a folder's shape as the whole file's decoding does,
// first, last or in between, and nothing for a folder the file does not
// name (a prefix of one, or one named only inside another's lines).
func TestShapeForSameAsWholeFile(t *testing.T) {
	entries := []execShape{
		{dir: "/src/a", bwrap: "/usr/bin/bwrap", data: 1, tail: []string{"/opt/kusaw-bridge", "__confine", "-w", "/src/a", "--"}},
		{dir: "/src/a b\n\"q\"", bwrap: "/usr/bin/bwrap", data: 0, tail: []string{"--", "dir \"/src/z\""}},
		{dir: "/src/c", bwrap: "/usr/local/bin/bwrap", data: 2, tail: []string{"--"}},
	}
	b := encodeExecShapes(entries)
	for _, e := range decodeExecShapes(b) {
		got, ok := shapeFor(b, e.dir)
		if !ok || !sameShape(got, e) {
			t.Errorf("%q: shapeFor %+v %v, the whole file %+v", e.dir, got, ok, e)
		}
	}
	for _, dir := range []string{"/src", "/src/z", "/src/c/d", ""} {
		if got, ok := shapeFor(b, dir); ok {
			t.Errorf("%q: found %+v", dir, got)
		}
	}
	for name, bad := range map[string]string{
		"another header":         "kusaw exec start 2\n" + string(b[len(execAheadHeader)+1:]),
		"cut short":              string(b[:len(b)-3]),
		"its own line unknown":   strings.Replace(string(b), "bwrap \"/usr/local/bin/bwrap\"", "cmd \"x\"", 1),
		"its own quoting broken": strings.Replace(string(b), "data 2", "data x", 1),
	} {
		if got, ok := shapeFor([]byte(bad), "/src/c"); ok {
			t.Errorf("%s: read %+v", name, got)
		}
	}
}
