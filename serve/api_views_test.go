package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// rawGet sends a GET over the socket and returns the response and its
// body; a request that takes longer than 5s fails the test (a FIFO must
// never hang serve).
func rawGet(t *testing.T, sock, path string) (*http.Response, []byte) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodGet, "http://x"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Keep the escapes as written: the server, not the client, decodes.
	p, q, _ := strings.Cut(path, "?")
	req.URL.Opaque, req.URL.RawQuery = "//x"+p, q
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.email=t@example.invalid", "-c", "user.name=t"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// The diff of a run is its branch against its base, file by file: each
// kind of change, names exactly as written (markup included), binary
// files flagged, a large patch cut with the cut said.
func TestRunDiffAPI(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [change]
  other: [change]
steps:
  change:
    run: [sh, -c, "echo more >> keep.txt && rm gone.txt && mv move.txt moved.txt && printf 'x\\000y' > bin.dat && echo hi > '<img src=x onerror=alert(1)>.txt' && seq 1 120000 > big.txt"]
`)
	repo := f.Repos["app"].Path
	if err := os.WriteFile(filepath.Join(repo, "keep.txt"), []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(repo, "gone.txt"), []byte("bye\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "move.txt"), []byte(strings.Repeat("a line that moves\n", 20)), 0o644)
	gitIn(t, repo, "add", ".")
	gitIn(t, repo, "commit", "-q", "-m", "files")
	_, c, _ := startServer(t, f, ServeOptions{MaxParallel: 1})
	rec, err := c.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := waitRun(t, c, rec.ID, 60*time.Second); d.Run.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", d.Run.State, d.Run.Message)
	}
	sock := filepath.Join(f.StateDir, record.ServeSocketFile)
	resp, b := rawGet(t, sock, "/v1/runs/"+rec.ID+"/diff?repo=app")
	if resp.StatusCode != 200 {
		t.Fatalf("diff: %d %s", resp.StatusCode, b)
	}
	var d RunDiff
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	by := map[string]DiffFile{}
	for _, f := range d.Files {
		by[f.Path] = f
	}
	want := map[string]string{"keep.txt": "modified", "gone.txt": "deleted", "moved.txt": "renamed", "bin.dat": "added",
		"<img src=x onerror=alert(1)>.txt": "added", "big.txt": "added"}
	for p, st := range want {
		if by[p].Status != st {
			t.Errorf("%s: status %q, want %q (files %+v)", p, by[p].Status, st, d.Files)
		}
	}
	if len(d.Files) != len(want) || d.Head == "" || d.Base == "" || d.Branch == "" {
		t.Fatalf("diff: %d files, head %q base %q branch %q", len(d.Files), d.Head, d.Base, d.Branch)
	}
	if k := by["keep.txt"]; k.Added != 1 || k.Deleted != 0 || !strings.Contains(k.Patch, "+more") || !strings.Contains(k.Patch, "@@") {
		t.Errorf("keep.txt: %+v", k)
	}
	if by["moved.txt"].OldPath != "move.txt" {
		t.Errorf("rename source: %+v", by["moved.txt"])
	}
	if !by["bin.dat"].Binary || by["bin.dat"].Added != 0 {
		t.Errorf("binary file: %+v", by["bin.dat"])
	}
	if big := by["big.txt"]; !big.PatchCut || len(big.Patch) != MaxFilePatchBytes || big.Added != 120000 {
		t.Errorf("big.txt: cut %v, patch %d bytes, +%d", big.PatchCut, len(big.Patch), big.Added)
	}
	if !strings.Contains(by["<img src=x onerror=alert(1)>.txt"].Patch, "+hi") {
		t.Errorf("the markup-named file's patch: %q", by["<img src=x onerror=alert(1)>.txt"].Patch)
	}
	if d.Added != 120002 || d.Del != 1 {
		t.Errorf("totals +%d -%d", d.Added, d.Del)
	}
	// A repo the run does not have, or none: a JSON error naming the repos.
	for _, q := range []string{"?repo=nope", "", "?repo=..%2Fapp"} {
		resp, b := rawGet(t, sock, "/v1/runs/"+rec.ID+"/diff"+q)
		if resp.StatusCode != 400 || !strings.Contains(string(b), "unknown_repo") || !strings.Contains(string(b), "app") {
			t.Errorf("diff%s: %d %s", q, resp.StatusCode, b)
		}
	}
	// Runs filter by pipeline and state.
	for q, n := range map[string]int{"?pipeline=default": 1, "?pipeline=other": 0, "?state=succeeded": 1, "?state=failed": 0, "?pipeline=default&state=succeeded": 1} {
		resp, b := rawGet(t, sock, "/v1/runs"+q)
		var m struct{ Runs []record.RunRecord }
		if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || len(m.Runs) != n {
			t.Errorf("runs%s: %d, %d runs, want %d", q, resp.StatusCode, len(m.Runs), n)
		}
	}
}

// parseRawNumstat reads names with tabs, spaces and newlines exactly.
func TestParseRawNumstat(t *testing.T) {
	z := ":100644 100644 aaaa bbbb M\x00a b.txt\x00:000000 100644 0000 cccc A\x00new\nline\x00:100644 100644 dddd dddd R100\x00old\tname\x00new name\x00" +
		"3\t1\ta b.txt\x00-\t-\tnew\nline\x000\t0\t\x00old\tname\x00new name\x00"
	got := parseRawNumstat([]byte(z))
	if len(got) != 3 {
		t.Fatalf("%+v", got)
	}
	if got[0].Path != "a b.txt" || got[0].Added != 3 || got[0].Deleted != 1 || got[0].Status != "modified" {
		t.Errorf("%+v", got[0])
	}
	if got[1].Path != "new\nline" || !got[1].Binary || got[1].Status != "added" {
		t.Errorf("%+v", got[1])
	}
	if got[2].Path != "new name" || got[2].OldPath != "old\tname" || got[2].Status != "renamed" {
		t.Errorf("%+v", got[2])
	}
}

// Artifacts are served from the attempt's artifacts/ only, as downloads:
// a link out (to a file, to the attempt folder), a FIFO, an escaped ..,
// and a step name that climbs are refused; the files beside them are
// served (the legitimate twin).
func TestArtifactsAPIRefusesEscapes(t *testing.T) {
	f := serveFactory(t, `
pipelines:
  default: [make]
steps:
  make:
    run: [sh, -c, "cd $KUSAW_ARTIFACTS && echo report > report.txt && mkdir sub && echo '{}' > sub/data.json && echo '<script>alert(1)</script>' > '<img src=x onerror=alert(1)>.html' && ln -s /etc/passwd escape && ln -s .. up && ln -s sub subl && mkfifo pipe"]
`)
	s, c, _ := startServer(t, f, ServeOptions{MaxParallel: 1})
	rec, err := c.Submit(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := waitRun(t, c, rec.ID, 60*time.Second); d.Run.State != status.RunSucceeded {
		t.Fatalf("run %s: %s", d.Run.State, d.Run.Message)
	}
	sock := filepath.Join(f.StateDir, record.ServeSocketFile)
	base := "/v1/runs/" + rec.ID + "/attempts/make/1/artifacts"
	resp, b := rawGet(t, sock, base)
	var list ArtifactList
	if resp.StatusCode != 200 || json.Unmarshal(b, &list) != nil {
		t.Fatalf("list: %d %s", resp.StatusCode, b)
	}
	names := []string{}
	for _, f := range list.Files {
		names = append(names, f.Path)
	}
	if strings.Join(names, "|") != "<img src=x onerror=alert(1)>.html|report.txt|sub/data.json" || list.Skipped != 4 {
		t.Fatalf("listed %q, skipped %d; want the three files and 4 skipped (3 links, a FIFO)", names, list.Skipped)
	}
	// The legitimate twins: plain files, nested ones, a name with markup.
	for p, want := range map[string]string{"/report.txt": "report\n", "/sub/data.json": "{}\n", "/%3Cimg%20src=x%20onerror=alert(1)%3E.html": "<script>alert(1)</script>\n"} {
		resp, b := rawGet(t, sock, base+p)
		if resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("GET %s: %d %q", p, resp.StatusCode, b)
		}
		h := resp.Header
		if h.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(h.Get("Content-Disposition"), "attachment") ||
			h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("GET %s: headers %v", p, h)
		}
	}
	// A log opened straight in a browser is not a page either.
	resp, _ = rawGet(t, sock, "/v1/runs/"+rec.ID+"/log?path=steps/make/1/stdout.log")
	if resp.StatusCode != 200 || resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("log: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := rawGet(t, sock, base); resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("JSON answer without nosniff: %v", resp.Header)
	}
	// The attacks: nothing outside artifacts/ comes back, nothing hangs.
	attempt := s.E.State.AttemptDir(rec.ID, "make", 1)
	if _, err := os.Stat(filepath.Join(attempt, record.AttemptFile)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{base + "/escape", base + "/up/attempt.json", base + "/subl/data.json", base + "/pipe",
		base + "/..%2Fattempt.json", base + "/sub%2F..%2F..%2Fattempt.json", base + "/%2e%2e/attempt.json",
		base + "/sub/..%2F..%2F..%2F..%2Frun.json", base + "/", base + "/sub"} {
		resp, b := rawGet(t, sock, p)
		if resp.StatusCode == 200 || strings.Contains(string(b), "root:") || strings.Contains(string(b), `"step"`) || strings.Contains(string(b), `"pipeline"`) {
			t.Errorf("GET %s: %d %q (served something outside artifacts/)", p, resp.StatusCode, b)
		}
	}
	for _, p := range []string{"/v1/runs/" + rec.ID + "/attempts/..%2F..%2F/1/artifacts", "/v1/runs/" + rec.ID + "/attempts/%2e%2e/1/artifacts/make/1/artifacts/report.txt"} {
		resp, b := rawGet(t, sock, p)
		if resp.StatusCode == 200 {
			t.Errorf("GET %s: %d %q", p, resp.StatusCode, b)
		}
	}
}

// A link swapped in for a folder on the way after the listing is still
// refused: every segment is checked without following it, and the open
// itself never leaves the root.
func TestOpenArtifactRefusesLinksOnTheWay(t *testing.T) {
	dir := t.TempDir()
	art := filepath.Join(dir, record.ArtifactsDir)
	os.MkdirAll(filepath.Join(art, "real"), 0o755)
	os.WriteFile(filepath.Join(art, "real", "f"), []byte("ok"), 0o644)
	os.WriteFile(filepath.Join(dir, "secret"), []byte("secret"), 0o644)
	os.Symlink("real", filepath.Join(art, "inside"))
	os.Symlink(dir, filepath.Join(art, "outside"))
	root, err := openArtifacts(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if f, _, err := openArtifact(root, "real/f"); err != nil {
		t.Fatalf("legitimate file: %v", err)
	} else {
		f.Close()
	}
	for _, p := range []string{"inside/f", "outside/secret", "../secret", "real/../../secret", "/secret", "real//f", "./real/f", ""} {
		if f, _, err := openArtifact(root, p); err == nil {
			f.Close()
			t.Errorf("%q was opened", p)
		}
	}
	// artifacts/ itself a link: nothing is served from where it points.
	dir2 := t.TempDir()
	os.Symlink(art, filepath.Join(dir2, record.ArtifactsDir))
	if r, err := openArtifacts(dir2); err == nil {
		r.Close()
		t.Error("a linked artifacts folder was opened")
	}
}

// The transcript joins a tool call's start and end, keeps the order,
// skips what is not a provider event, and takes the result's usage.
func TestBuildTranscript(t *testing.T) {
	lines := strings.Join([]string{
		`{"seq":1,"ts":"2026-01-01T00:00:00Z","run":"r","type":"process.started","data":{"argv":["provider.tool"]}}`,
		`{"seq":2,"ts":"2026-01-01T00:00:01Z","run":"r","type":"provider.init","data":{"model":"m1","session_id":"s"}}`,
		`{"seq":3,"ts":"2026-01-01T00:00:02Z","run":"r","type":"provider.text","data":{"text":"<b>hello</b>","bytes":12}}`,
		`{"seq":4,"ts":"2026-01-01T00:00:03Z","run":"r","type":"provider.tool","data":{"phase":"started","id":"t1","name":"Write","input":"{\"file_path\":\"a\"}"}}`,
		`{"seq":5,"ts":"2026-01-01T00:00:03Z","run":"r","type":"provider.usage","data":{"tokens":10}}`,
		`{"seq":6,"ts":"2026-01-01T00:00:04Z","run":"r","type":"provider.tool","data":{"phase":"completed","id":"t1","name":"Write","output":"done","is_error":true}}`,
		`{"seq":7,"ts":"2026-01-01T00:00:04Z","run":"r","type":"provider.tool","data":{"phase":"completed","id":"t9","name":"Read","output":"orphan"}}`,
		`{"hash":"abc","prev":"def"}`,
		`not json "provider.text"`,
		`{"seq":8,"ts":"2026-01-01T00:00:05Z","run":"r","type":"provider.result","data":{"is_error":false,"text":"all done","cost_usd":0.25,"usage":{"input_tokens":5,"output_tokens":7}}}`,
	}, "\n")
	tr := record.BuildTranscript(strings.NewReader(lines))
	kinds := []string{}
	for _, e := range tr.Entries {
		kinds = append(kinds, e.Kind)
	}
	if strings.Join(kinds, ",") != "init,text,tool,tool,result" {
		t.Fatalf("kinds %v", kinds)
	}
	if c := tr.Entries[2].Tool; c.Name != "Write" || !c.Done || c.Output != "done" || !c.IsError || c.Input == "" {
		t.Errorf("joined tool call: %+v", c)
	}
	if c := tr.Entries[3].Tool; c.Name != "Read" || !c.Done || c.Output != "orphan" {
		t.Errorf("an end without its start: %+v", c)
	}
	if tr.Entries[1].Data["text"] != "<b>hello</b>" || tr.Entries[4].Data["cost_usd"] != 0.25 {
		t.Errorf("data: %+v %+v", tr.Entries[1].Data, tr.Entries[4].Data)
	}
	if u, _ := tr.Usage.(map[string]any); u["output_tokens"] != float64(7) {
		t.Errorf("usage %+v", tr.Usage)
	}
	a := &record.AttemptRecord{Kind: "agent", Processes: []record.ProcessRecord{{Argv: []string{"claude", "-p", "--", "the prompt"}}}}
	if p := record.AgentPrompt(a); p != "the prompt" {
		t.Errorf("prompt %q", p)
	}
	a.Kind = "command"
	if p := record.AgentPrompt(a); p != "" {
		t.Errorf("a command step's prompt %q", p)
	}
}

// The diff's bounds hold: past MaxDiffFiles the list stops (truncated);
// past MaxDiffBytes the later files are listed with their patch left out
// (patch_cut), and git is not read to the end.
func TestComputeDiffBounds(t *testing.T) {
	testkit.NeedGit(t)
	repo := t.TempDir()
	gitIn(t, repo, "init", "-q", "-b", "main")
	gitIn(t, repo, "commit", "-q", "--allow-empty", "-m", "base")
	base := strings.TrimSpace(testkit.GitRun(t, repo, "rev-parse", "HEAD"))
	for i := 0; i < 30; i++ {
		os.WriteFile(filepath.Join(repo, fmt.Sprintf("f%02d.txt", i)), []byte(strings.Repeat(fmt.Sprintf("line of file %d\n", i), 200)), 0o644)
	}
	gitIn(t, repo, "add", ".")
	gitIn(t, repo, "commit", "-q", "-m", "thirty files")
	head := strings.TrimSpace(testkit.GitRun(t, repo, "rev-parse", "HEAD"))
	defer func(f, b, p int) { MaxDiffFiles, MaxDiffBytes, MaxFilePatchBytes = f, b, p }(MaxDiffFiles, MaxDiffBytes, MaxFilePatchBytes)

	// Unbounded enough: every file whole.
	files, cut, err := computeDiff(context.Background(), repo, base, head)
	if err != nil || cut || len(files) != 30 || files[29].PatchCut || !strings.Contains(files[29].Patch, "+line of file 29") {
		t.Fatalf("whole diff: %d files, cut %v, %v", len(files), cut, err)
	}
	whole := len(files[0].Patch)

	MaxDiffFiles = 10
	files, cut, err = computeDiff(context.Background(), repo, base, head)
	if err != nil || !cut || len(files) != 10 || files[9].Path != "f09.txt" || files[9].Patch == "" {
		t.Fatalf("file bound: %d files, cut %v, %v", len(files), cut, err)
	}

	MaxDiffFiles, MaxDiffBytes = 2000, 3*whole
	files, cut, err = computeDiff(context.Background(), repo, base, head)
	if err != nil || !cut || len(files) != 30 {
		t.Fatalf("byte bound: %d files, cut %v, %v", len(files), cut, err)
	}
	total := 0
	for i, f := range files {
		total += len(f.Patch)
		if i < 3 && (f.PatchCut || f.Patch == "") || i >= 3 && (!f.PatchCut || f.Patch != "") {
			t.Errorf("file %d: patch %d bytes, cut %v", i, len(f.Patch), f.PatchCut)
		}
		if f.Added != 200 {
			t.Errorf("file %d: +%d, want the count even without its patch", i, f.Added)
		}
	}
	if total > MaxDiffBytes {
		t.Errorf("%d patch bytes over a bound of %d", total, MaxDiffBytes)
	}

	MaxDiffBytes, MaxFilePatchBytes = 4<<20, 100
	files, _, err = computeDiff(context.Background(), repo, base, head)
	if err != nil || !files[0].PatchCut || len(files[0].Patch) != 100 {
		t.Fatalf("per-file bound: %v %v %d", err, files[0].PatchCut, len(files[0].Patch))
	}
	// Not commit ids: refused before git runs.
	if _, _, err := computeDiff(context.Background(), repo, "--output=/tmp/x", head); err == nil {
		t.Fatal("an option as base was accepted")
	}
}

// diffBenchRepo is a repository whose second commit changes 200 files of
// 200 lines each (about 1 MiB of patch).
func diffBenchRepo(b *testing.B) (string, string, string) {
	testkit.NeedGit(b)
	repo := b.TempDir()
	gitIn := func(args ...string) string {
		return testkit.GitRun(b, repo, append([]string{"-c", "user.email=t@example.invalid", "-c", "user.name=t"}, args...)...)
	}
	gitIn("init", "-q", "-b", "main")
	gitIn("commit", "-q", "--allow-empty", "-m", "base")
	base := gitIn("rev-parse", "HEAD")
	for i := 0; i < 200; i++ {
		os.WriteFile(filepath.Join(repo, fmt.Sprintf("f%03d.txt", i)), []byte(strings.Repeat(fmt.Sprintf("line of file %d\n", i), 200)), 0o644)
	}
	gitIn("add", ".")
	gitIn("commit", "-q", "-m", "files")
	return repo, base, gitIn("rev-parse", "HEAD")
}

// BenchmarkDiffView is what GET /v1/runs/{id}/diff costs (its git and
// the split into files) against a bare git diff of the same
// commits in the same run, reported as a ratio.
func BenchmarkDiffView(b *testing.B) {
	repo, base, head := diffBenchRepo(b)
	var view, bare time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if files, _, err := computeDiff(context.Background(), repo, base, head); err != nil || len(files) != 200 {
			b.Fatal(len(files), err)
		}
		t1 := time.Now()
		cmd := exec.Command("git", "diff", "-p", "-M", base, head)
		cmd.Dir = repo
		if out, err := cmd.Output(); err != nil || len(out) < 100000 {
			b.Fatal(len(out), err)
		}
		view, bare = view+t1.Sub(t0), bare+time.Since(t1)
	}
	b.ReportMetric(float64(view.Milliseconds())/float64(b.N), "ms/diff-view")
	b.ReportMetric(float64(bare.Milliseconds())/float64(b.N), "ms/bare-git-diff")
	b.ReportMetric(float64(view)/float64(bare), "ratio")
}
