package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kusaw/kusaw/record"
)

// The API behind the web page's views of a run's work:
//
//	GET /v1/runs/{id}/diff?repo=NAME                          a repo's run branch against its base
//	GET /v1/runs/{id}/attempts/{step}/{n}/transcript          an agent attempt's conversation
//	GET /v1/runs/{id}/attempts/{step}/{n}/artifacts           the files under the attempt's artifacts/
//	GET /v1/runs/{id}/attempts/{step}/{n}/artifacts/{path...} one of them, as a download
//
// stdout, stderr and egress.log are read through GET /v1/runs/{id}/log.
func (s *Server) viewRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/runs/{id}/diff", names(s.apiDiff))
	mux.HandleFunc("GET /v1/runs/{id}/attempts/{step}/{n}/transcript", names(s.apiTranscript))
	mux.HandleFunc("GET /v1/runs/{id}/attempts/{step}/{n}/artifacts", names(s.apiArtifacts))
	mux.HandleFunc("GET /v1/runs/{id}/attempts/{step}/{n}/artifacts/{path...}", names(s.apiArtifact))
}

// pathSegment reports whether a path value names one folder entry: not
// empty, not . or .., no separator and no NUL.
func pathSegment(v string) bool {
	return v != "" && v != "." && v != ".." && !strings.ContainsAny(v, "/\\\x00") && len(v) <= 255
}

func (s *Server) apiDiff(w http.ResponseWriter, r *http.Request) {
	rec, err := s.E.State.LoadRun(r.PathValue("id"))
	if err != nil {
		runError(w, err)
		return
	}
	name := r.URL.Query().Get("repo")
	var repo *record.RunRepo
	var names []string
	for i := range rec.Repos {
		names = append(names, rec.Repos[i].Name)
		if rec.Repos[i].Name == name {
			repo = &rec.Repos[i]
		}
	}
	if repo == nil {
		apiError(w, http.StatusBadRequest, "unknown_repo", fmt.Sprintf("run %s has no repo %q", rec.ID, name), "give repo= one of: "+strings.Join(names, ", "))
		return
	}
	d := RunDiff{Repo: repo.Name, Branch: repo.Branch, Base: repo.BaseSHA, Files: []DiffFile{}}
	// A finished run's record names where its branch ended. While it runs
	// the record can lag behind the branch (it is saved after the branch
	// moves), so the branch itself is read.
	head := repo.HeadSHA
	if head == "" || !rec.State.Final() {
		live, err := resolveHead(r.Context(), repo.Path, repo.Branch)
		if err != nil {
			apiError(w, http.StatusInternalServerError, "diff_failed", err.Error(), "check that the repo at "+repo.Path+" is still there")
			return
		}
		if live != "" {
			head = live
		}
	}
	d.Head = head
	if head != "" && head != repo.BaseSHA {
		files, cut, err := computeDiff(r.Context(), repo.Path, repo.BaseSHA, head)
		if err != nil {
			apiError(w, http.StatusInternalServerError, "diff_failed", err.Error(), "check that the repo at "+repo.Path+" still has the run's commits")
			return
		}
		d.Files, d.Truncated = files, cut
		for _, f := range files {
			d.Added += f.Added
			d.Del += f.Deleted
		}
	}
	writeJSONResponse(w, http.StatusOK, d)
}

// attemptDir checks the {step} and {n} of a request and returns the
// attempt's folder, or answers the error itself.
func (s *Server) attemptDir(w http.ResponseWriter, r *http.Request) (*record.RunRecord, string, bool) {
	rec, err := s.E.State.LoadRun(r.PathValue("id"))
	if err != nil {
		runError(w, err)
		return nil, "", false
	}
	step := r.PathValue("step")
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 || !pathSegment(step) {
		apiError(w, http.StatusBadRequest, "bad_request", "step and attempt number are invalid", "use /v1/runs/RUN/attempts/STEP/N/... with N ≥ 1")
		return nil, "", false
	}
	dir := s.E.State.AttemptDir(rec.ID, step, n)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		apiError(w, http.StatusNotFound, "attempt_not_found", fmt.Sprintf("run %s has no attempt %d of step %s", rec.ID, n, step), "see the run's attempts: kusaw show "+rec.ID)
		return nil, "", false
	}
	return rec, dir, true
}

func (s *Server) apiTranscript(w http.ResponseWriter, r *http.Request) {
	_, dir, ok := s.attemptDir(w, r)
	if !ok {
		return
	}
	var t record.Transcript
	if f, err := os.Open(filepath.Join(dir, record.EventsFile)); err == nil {
		t = record.BuildTranscript(io.LimitReader(f, 64<<20))
		f.Close()
	} else {
		t = record.BuildTranscript(strings.NewReader(""))
	}
	var a record.AttemptRecord
	if b, err := os.ReadFile(filepath.Join(dir, record.AttemptFile)); err == nil && json.Unmarshal(b, &a) == nil {
		t.Provider = a.Provider
		t.Prompt = record.AgentPrompt(&a)
	}
	writeJSONResponse(w, http.StatusOK, t)
}

// ArtifactFile is one file of GET .../artifacts.
type ArtifactFile struct {
	Path string `json:"path"` // slash-separated, under artifacts/
	Size int64  `json:"size"`
}

// ArtifactList is GET .../artifacts. Only regular files are listed (and
// served); Skipped counts the rest (links, FIFOs, devices).
type ArtifactList struct {
	Files   []ArtifactFile `json:"files"`
	Skipped int            `json:"skipped,omitempty"`
	Cut     bool           `json:"cut,omitempty"`
}

// MaxArtifactList bounds the listing.
const MaxArtifactList = 1000

// openArtifacts opens the attempt's artifacts/ folder as a root nothing
// can leave: a link inside it never leads out (os.Root), and the folder
// itself must be a real folder, not a link.
func openArtifacts(dir string) (*os.Root, error) {
	p := filepath.Join(dir, record.ArtifactsDir)
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a folder", p)
	}
	return os.OpenRoot(p)
}

func (s *Server) apiArtifacts(w http.ResponseWriter, r *http.Request) {
	_, dir, ok := s.attemptDir(w, r)
	if !ok {
		return
	}
	root, err := openArtifacts(dir)
	if err != nil {
		writeJSONResponse(w, http.StatusOK, ArtifactList{Files: []ArtifactFile{}})
		return
	}
	defer root.Close()
	writeJSONResponse(w, http.StatusOK, listArtifacts(root))
}

// MaxArtifactEntries bounds the folder entries one listing reads, folders
// and skipped entries included: a step can leave a million empty folders
// in artifacts/, and each request would walk them all.
var MaxArtifactEntries = 20 * MaxArtifactList

// listArtifacts lists the regular files under root, folder by folder,
// reading each folder in batches (never a whole huge folder at once).
// Entries are typed by lstat: a link is counted as skipped, never
// followed.
func listArtifacts(root *os.Root) ArtifactList {
	list := ArtifactList{Files: []ArtifactFile{}}
	seen := 0
	queue := []string{"."}
	for len(queue) > 0 && !list.Cut {
		d := queue[0]
		queue = queue[1:]
		f, err := root.Open(d)
		if err != nil {
			continue
		}
		for !list.Cut {
			ents, err := f.ReadDir(256)
			for _, e := range ents {
				if seen++; seen > MaxArtifactEntries {
					list.Cut = true
					break
				}
				p := path.Join(d, e.Name())
				switch {
				case e.IsDir():
					queue = append(queue, p)
				case !e.Type().IsRegular():
					list.Skipped++
				case len(list.Files) >= MaxArtifactList:
					list.Cut = true
				default:
					var size int64
					if fi, err := e.Info(); err == nil {
						size = fi.Size()
					}
					list.Files = append(list.Files, ArtifactFile{Path: p, Size: size})
				}
				if list.Cut {
					break
				}
			}
			if err != nil {
				break
			}
		}
		f.Close()
	}
	sort.Slice(list.Files, func(i, j int) bool { return list.Files[i].Path < list.Files[j].Path })
	return list
}

// errNotServed is an artifact path that is not a regular file under
// artifacts/.
var errNotServed = errors.New("not a file under the attempt's artifacts/")

// openArtifact opens one artifact for reading: every segment a plain name,
// no link anywhere on the way, a regular file at the end. The open does
// not block on a FIFO swapped in after the check.
func openArtifact(root *os.Root, rel string) (*os.File, fs.FileInfo, error) {
	if rel == "" || path.Clean(rel) != rel || strings.HasPrefix(rel, "/") {
		return nil, nil, errNotServed
	}
	segs := strings.Split(rel, "/")
	for i, seg := range segs {
		if !pathSegment(seg) {
			return nil, nil, errNotServed
		}
		fi, err := root.Lstat(strings.Join(segs[:i+1], "/"))
		if err != nil {
			return nil, nil, err
		}
		last := i == len(segs)-1
		if fi.Mode()&fs.ModeSymlink != 0 || (!last && !fi.IsDir()) || (last && !fi.Mode().IsRegular()) {
			return nil, nil, errNotServed
		}
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, errNotServed
	}
	return f, fi, nil
}

func (s *Server) apiArtifact(w http.ResponseWriter, r *http.Request) {
	rec, dir, ok := s.attemptDir(w, r)
	if !ok {
		return
	}
	rel := r.PathValue("path")
	notFound := func() {
		apiError(w, http.StatusNotFound, "artifact_not_found", fmt.Sprintf("%q is not a file under the artifacts of run %s", rel, rec.ID),
			"list the attempt's artifacts: GET /v1/runs/"+rec.ID+"/attempts/STEP/N/artifacts")
	}
	root, err := openArtifacts(dir)
	if err != nil {
		notFound()
		return
	}
	defer root.Close()
	f, fi, err := openArtifact(root, rel)
	if err != nil {
		notFound()
		return
	}
	defer f.Close()
	h := w.Header()
	// A download, never a page of serve's origin: whatever the file holds
	// (HTML, SVG, script), the browser saves it.
	h.Set("Content-Type", "application/octet-stream")
	disp := mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(rel)})
	if disp == "" {
		disp = "attachment" // a name mime cannot encode: the browser picks one
	}
	h.Set("Content-Disposition", disp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		s.copyOut(w, io.LimitReader(f, fi.Size()))
	}
}

// copyOut sends a download of any size. The listener's write timeout
// bounds a whole response, which a large artifact on a slow link would
// outlast; here, as for an event stream, it bounds each chunk instead, so
// a client that keeps reading gets the file and one that stops reading is
// still dropped.
func (s *Server) copyOut(w http.ResponseWriter, src io.Reader) {
	rc := http.NewResponseController(w)
	limit := s.opts.Limits.withDefaults().Write
	buf := make([]byte, 256<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(limit))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// filterRuns keeps the runs of one pipeline and one state ("" keeps all).
// pipelineRuns leaves out sandbox exec's and doctor's runs, and counts
// them.
func pipelineRuns(runs []*record.RunRecord) ([]*record.RunRecord, int) {
	out, hidden := []*record.RunRecord{}, 0
	for _, r := range runs {
		if r.SandboxRun() {
			hidden++
			continue
		}
		out = append(out, r)
	}
	return out, hidden
}

func filterRuns(runs []*record.RunRecord, pipeline, state string) []*record.RunRecord {
	if pipeline == "" && state == "" {
		return runs
	}
	out := []*record.RunRecord{}
	for _, r := range runs {
		if (pipeline == "" || r.Pipeline == pipeline) && (state == "" || string(r.State) == state) {
			out = append(out, r)
		}
	}
	return out
}
