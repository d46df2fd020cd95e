package serve

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/internal/httpframe"
	"github.com/kusaw/kusaw/internal/peercred"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/serve/client"
	"github.com/kusaw/kusaw/status"
)

// The HTTP API (all JSON; errors are {"error":{"code","message","fix"}}):
//
//	GET  /v1/health                                  serve's state and queue
//	POST /v1/runs  {"pipeline","params"}             queue a run (201)
//	GET  /v1/runs[?limit=N&pipeline=P&state=S]       run records, newest first
//	GET  /v1/runs/{id}                               a run, its attempts, its exit code
//	POST /v1/runs/{id}/cancel                        cancel a queued or running run (202)
//	GET  /v1/runs/{id}/events                        server-sent events, replayed then live
//	GET  /v1/runs/{id}/log?path=P&offset=N           bytes of one of the run's logs from N
//	GET  /v1/runs/{id}/attempts/{step}/{n}/egress    an attempt's egress per host
//	GET  /v1/runs/{id}/diff?repo=NAME, .../transcript, .../artifacts[/PATH]  (api_views.go)
//	POST /v1/cluster/token[?addr=HOST:PORT][&pool=P...] a one-time join token (cluster.go)
//	GET  /v1/workers                                 the cluster's workers and heartbeats
//	GET  /metrics                                    Prometheus text: queue and cluster
//
// The Unix socket needs no token (it is mode 0600 in the state directory);
// the TCP listener wants "Authorization: Bearer TOKEN", or the cookie the
// web page gets from /?token=TOKEN.

const tokenCookie = "kusaw_token"

// Handler is the API and the web page. auth is the bearer token; "" means
// no authentication (the Unix socket).
func (s *Server) Handler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.apiHealth)
	mux.HandleFunc("POST /v1/runs", s.apiSubmit)
	mux.HandleFunc("GET /v1/runs", s.apiRuns)
	mux.HandleFunc("GET /v1/runs/{id}", names(s.apiRun))
	mux.HandleFunc("POST /v1/runs/{id}/cancel", names(s.apiCancel))
	mux.HandleFunc("GET /v1/runs/{id}/events", names(s.apiEvents))
	mux.HandleFunc("GET /v1/runs/{id}/log", names(s.apiLog))
	mux.HandleFunc("GET /v1/runs/{id}/attempts/{step}/{n}/egress", names(s.apiEgress))
	s.gateRoutes(mux, token != "")
	s.viewRoutes(mux)
	s.clusterRoutes(mux)
	s.intakeRoutes(mux)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		// A known path with another method is a 405, still in JSON.
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			if m == r.Method {
				continue
			}
			r2 := r.Clone(r.Context())
			r2.Method = m
			if _, p := mux.Handler(r2); p != "/v1/" && p != "" {
				w.Header().Set("Allow", m)
				apiError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path, "use "+m)
				return
			}
		}
		apiError(w, http.StatusNotFound, "not_found", "no API endpoint "+r.Method+" "+r.URL.Path, "see the list in kusaw serve --help")
	})
	s.webRoutes(mux)
	var h http.Handler = mux
	if token != "" {
		h = requireToken(token, h, mux)
	}
	return s.logRequests(recoverJSON(s, h), token != "")
}

// names answers 400 for a route whose {id} or {step} is not a record name.
// The mux hands over path values decoded, so an encoded separator or dot
// segment ("..%2F..%2Fetc", "%2e%2e") is seen here as what it is.
func names(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for _, k := range []string{"id", "step"} {
			if v := r.PathValue(k); v != "" && !record.ValidName(v) || k == "id" && v == "" {
				apiError(w, http.StatusBadRequest, "bad_name", fmt.Sprintf("%s %q is not a valid name", k, v),
					"run and step ids are a letter or digit, then letters, digits, '_', '.' or '-' (no '/', no '..')")
				return
			}
		}
		h(w, r)
	}
}

// logRequests logs each request at debug level (--log-level debug).
func (s *Server) logRequests(h http.Handler, tcp bool) http.Handler {
	if s.log.GetLevel() > zerolog.DebugLevel {
		return h
	}
	via := "unix"
	if tcp {
		via = "tcp"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		s.log.Debug().Str("via", via).Str("method", r.Method).Str("path", r.URL.Path).Int("status", sw.status).Dur("duration", time.Since(start)).Msg("request")
	})
}

// statusWriter records a response's status; it still flushes (SSE).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recoverJSON turns a handler panic into a JSON 500 instead of a dropped
// connection; serve keeps running.
func recoverJSON(s *Server, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error().Interface("panic", v).Str("path", r.URL.Path).Msg("API handler failed")
				apiError(w, http.StatusInternalServerError, "internal", fmt.Sprint("internal error: ", v), status.ReasonInternal.Info().Fix)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func requireToken(token string, h http.Handler, mux *http.ServeMux) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == hookPattern {
			// A forge cannot hold serve's token: the delivery's signature,
			// checked against the forge's webhook secret, stands for it.
			h.ServeHTTP(w, r)
			return
		}
		got := ""
		if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
			got = strings.TrimPrefix(a, "Bearer ")
		} else if c, err := r.Cookie(tokenCookie); err == nil {
			got = c.Value
			// A cookie rides along on cross-site requests; a state change
			// must also carry a header no cross-site form can set.
			if r.Method != http.MethodGet && r.Header.Get("X-Kusaw") == "" {
				apiError(w, http.StatusForbidden, "forbidden", "state-changing requests with the cookie need the X-Kusaw header", "")
				return
			}
		} else if q := r.URL.Query().Get("token"); q != "" && r.URL.Path == "/" && r.Method == http.MethodGet {
			// The web page's entry: swap the token in the URL for a cookie.
			if subtle.ConstantTimeCompare([]byte(q), want) == 1 {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
				http.Redirect(w, r, "/", http.StatusSeeOther)
				return
			}
		}
		if got == "" || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			apiError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token",
				"send Authorization: Bearer TOKEN with the value stored as "+TokenSecretKey+" (kusaw config set "+TokenSecretKey+" --secret)")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// TokenSecretKey is the secret-store key of the TCP listener's token.
const TokenSecretKey = client.TokenSecretKey

func apiError(w http.ResponseWriter, code int, errCode, msg, fix string) {
	writeJSONResponse(w, code, map[string]any{"error": client.APIErrorBody{Code: errCode, Message: msg, Fix: fix}})
}

func writeJSONResponse(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	// Records hold any text: never let a browser take an answer for a page.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}

// runError maps a factory.State error to an API error.
func runError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, record.ErrNoRun):
		apiError(w, http.StatusNotFound, "run_not_found", err.Error(), "list runs with: kusaw runs")
	case errors.Is(err, record.ErrAmbiguousRun):
		apiError(w, http.StatusBadRequest, "run_ambiguous", err.Error(), "give more of the run id")
	default:
		apiError(w, http.StatusInternalServerError, "internal", err.Error(), "")
	}
}

func (s *Server) health() client.Health {
	ch := s.clusterHealth()
	sh := s.state.health()
	s.mu.Lock()
	defer s.mu.Unlock()
	return client.Health{OK: !s.stopping && (ch == nil || ch.Connected) && sh.Writable, PID: os.Getpid(), Queued: len(s.queue), Running: len(s.running), MaxParallel: s.max,
		PeakRunning: s.peak, Started: s.started, StateDir: s.F.StateDir, Factory: s.F.Path, Stopping: s.stopping, Cluster: ch, State: sh}
}

func (s *Server) apiHealth(w http.ResponseWriter, r *http.Request) {
	writeJSONResponse(w, http.StatusOK, s.health())
}

func (s *Server) apiSubmit(w http.ResponseWriter, r *http.Request) {
	var req client.SubmitRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		apiError(w, http.StatusBadRequest, "bad_request", "the body is not a run request: "+err.Error(), `send {"pipeline": "NAME", "params": {"NAME": "value"}}`)
		return
	}
	if dec.More() {
		apiError(w, http.StatusBadRequest, "bad_request", "the body holds more than one JSON value", `send one {"pipeline": ...} object`)
		return
	}
	rec, err := s.Submit(req.Pipeline, req.Params)
	switch {
	case err == nil:
		writeJSONResponse(w, http.StatusCreated, map[string]any{"run": rec})
	case errors.Is(err, record.ErrUnknownPipeline):
		apiError(w, http.StatusBadRequest, "unknown_pipeline", strings.TrimPrefix(err.Error(), record.ErrUnknownPipeline.Error()+": "), "name one of the file's pipelines")
	case errors.Is(err, record.ErrBadParams):
		apiError(w, http.StatusBadRequest, "bad_params", err.Error(), "parameters are environment names (letters, digits, _) with short values")
	case errors.Is(err, ErrFactoryChanged):
		apiError(w, http.StatusConflict, "factory_changed", err.Error(), "stop kusaw serve (SIGTERM; running attempts finish or are recorded interrupted) and start it again")
	case errors.Is(err, ErrStopping):
		apiError(w, http.StatusServiceUnavailable, "stopping", err.Error(), "submit again once serve has restarted")
	case errors.Is(err, ErrQueueFull):
		apiError(w, http.StatusServiceUnavailable, "queue_full", err.Error(), "wait for queued runs to finish")
	default:
		apiError(w, http.StatusInternalServerError, "internal", err.Error(), "")
	}
}

func (s *Server) apiRuns(w http.ResponseWriter, r *http.Request) {
	runs, err := s.E.State.Runs()
	if err != nil {
		apiError(w, http.StatusInternalServerError, "internal", err.Error(), "")
		return
	}
	runs = filterRuns(runs, r.URL.Query().Get("pipeline"), r.URL.Query().Get("state"))
	// sandbox=false leaves sandbox exec's and doctor's runs out (the web
	// page's default), unless pipeline names one of them.
	hidden := 0
	if r.URL.Query().Get("sandbox") == "false" && r.URL.Query().Get("pipeline") == "" {
		runs, hidden = pipelineRuns(runs)
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			apiError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit %q is not a positive number", v), "give limit=N, the newest N runs")
			return
		}
		if n < len(runs) {
			runs = runs[:n]
		}
	}
	if runs == nil {
		runs = []*record.RunRecord{}
	}
	writeJSONResponse(w, http.StatusOK, map[string]any{"runs": runs, "sandbox_hidden": hidden})
}

func (s *Server) detail(id string) (*client.RunDetail, error) {
	rec, err := s.E.State.LoadRun(id)
	if err != nil {
		return nil, err
	}
	atts, _ := s.E.State.Attempts(rec)
	if atts == nil {
		atts = []*record.AttemptRecord{}
	}
	helpers, _ := s.E.State.Helpers(rec)
	if helpers == nil {
		helpers = []*record.AttemptRecord{}
	}
	// The exit code reads the helpers' attempts too: a judge the sandbox
	// refused makes kusaw run exit 4 (kusaw run decides it from Attempts
	// and Helpers by the same record.RunExitCode; this is for other
	// clients).
	all := append(append([]*record.AttemptRecord{}, atts...), helpers...)
	return &client.RunDetail{Run: rec, Attempts: atts, Helpers: helpers, ExitCode: record.RunExitCode(rec, all)}, nil
}

func (s *Server) apiRun(w http.ResponseWriter, r *http.Request) {
	d, err := s.detail(r.PathValue("id"))
	if err != nil {
		runError(w, err)
		return
	}
	writeJSONResponse(w, http.StatusOK, d)
}

func (s *Server) apiCancel(w http.ResponseWriter, r *http.Request) {
	rec, err := s.Cancel(r.PathValue("id"))
	if errors.Is(err, record.ErrRunEnded) || err != nil && rec != nil && rec.State.Final() {
		writeJSONResponse(w, http.StatusConflict, map[string]any{"error": client.APIErrorBody{Code: "run_ended", Message: err.Error()}, "run": rec})
		return
	}
	if err != nil {
		runError(w, err)
		return
	}
	writeJSONResponse(w, http.StatusAccepted, map[string]any{"run": rec})
}

const maxLogChunk = 4 << 20

func (s *Server) apiLog(w http.ResponseWriter, r *http.Request) {
	rec, err := s.E.State.LoadRun(r.PathValue("id"))
	if err != nil {
		runError(w, err)
		return
	}
	q := r.URL.Query()
	offset := int64(0)
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			apiError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("offset %q is not a byte offset", v), "give offset=0 or the X-Kusaw-Next-Offset of the previous read")
			return
		}
	}
	b, err := s.E.State.ReadLog(rec.ID, q.Get("path"), offset, maxLogChunk)
	if errors.Is(err, record.ErrBadLogPath) {
		apiError(w, http.StatusBadRequest, "bad_log_path", err.Error(), "path is events.jsonl or steps/STEP/N/{events.jsonl,egress.log,setup.log,stdout.log,stderr.log}")
		return
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, "internal", err.Error(), "")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; sandbox")
	w.Header().Set("X-Kusaw-Next-Offset", strconv.FormatInt(offset+int64(len(b)), 10))
	// The file's size now, so a reader can start near the end of a long log.
	if fi, err := os.Lstat(filepath.Join(s.E.State.RunDir(rec.ID), filepath.FromSlash(q.Get("path")))); err == nil {
		w.Header().Set("X-Kusaw-Log-Size", strconv.FormatInt(fi.Size(), 10))
	}
	w.Header().Set("X-Kusaw-Run-State", string(rec.State))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

func (s *Server) apiEgress(w http.ResponseWriter, r *http.Request) {
	rec, err := s.E.State.LoadRun(r.PathValue("id"))
	if err != nil {
		runError(w, err)
		return
	}
	step := r.PathValue("step")
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 || !record.ValidName(step) {
		apiError(w, http.StatusBadRequest, "bad_request", "step and attempt number are invalid", "use /v1/runs/RUN/attempts/STEP/N/egress with N ≥ 1")
		return
	}
	dir := s.E.State.AttemptDir(rec.ID, step, n)
	if _, err := os.Stat(dir); err != nil {
		apiError(w, http.StatusNotFound, "attempt_not_found", fmt.Sprintf("run %s has no attempt %d of step %s", rec.ID, n, step), "see the run's attempts: kusaw show "+rec.ID)
		return
	}
	writeJSONResponse(w, http.StatusOK, record.AttemptEgress(dir))
}

// apiEvents streams a run's events as server-sent events: everything
// recorded so far, then new events as they are written, until the run
// ends. The files are the source of truth; the bus only wakes the reader.
func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request) {
	rec, err := s.E.State.LoadRun(r.PathValue("id"))
	if err != nil {
		runError(w, err)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		apiError(w, http.StatusInternalServerError, "internal", "streaming is not supported on this connection", "")
		return
	}
	wake, unsub := s.bus.subscribe(rec.ID)
	defer unsub()
	// A stream outlives the request timeouts: no read deadline (the client
	// sends nothing more), and a write deadline per flush, so a client that
	// stops reading is still dropped.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	writeLimit := s.opts.Limits.withDefaults().Write
	flush := func() {
		_ = rc.SetWriteDeadline(time.Now().Add(writeLimit))
		fl.Flush()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flush()
	t := newEventTail(s.E.State, rec.ID)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastWrite := time.Now()
	for {
		for _, ev := range t.poll() {
			b, _ := json.Marshal(ev)
			writeSSE(w, ev, b)
			lastWrite = time.Now()
		}
		flush()
		if cur, err := s.E.State.LoadRun(rec.ID); err != nil || cur.State.Final() && !s.isActive(rec.ID) {
			// A final record of a run serve no longer runs: the stream is
			// complete, and its record names the events' last seal (serve
			// seals after run.finished and the notifications' first try).
			// A run recovered after a crash has no run.finished; its final
			// record ends the stream.
			for _, ev := range t.poll() {
				b, _ := json.Marshal(ev)
				writeSSE(w, ev, b)
			}
			fmt.Fprintf(w, "event: end\ndata: {\"state\":%q}\n\n", stateOf(cur))
			flush()
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-wake:
		case <-tick.C:
			if time.Since(lastWrite) > 15*time.Second {
				fmt.Fprint(w, ": keep-alive\n\n")
				lastWrite = time.Now()
			}
		}
	}
}

func stateOf(r *record.RunRecord) status.RunState {
	if r == nil {
		return ""
	}
	return r.State
}

func (s *Server) isActive(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[id] != nil {
		return true
	}
	for _, r := range s.queue {
		if r.ID() == id {
			return true
		}
	}
	return false
}

// eventTail reads new complete lines of a run's event files (the run's and
// each attempt's), oldest first.
type eventTail struct {
	st      *factory.State
	run     string
	offsets map[string]int64
}

func newEventTail(st *factory.State, run string) *eventTail {
	return &eventTail{st: st, run: run, offsets: map[string]int64{}}
}

func (t *eventTail) poll() []record.Event {
	dir := t.st.RunDir(t.run)
	files := []string{filepath.Join(dir, record.EventsFile)}
	steps, _ := os.ReadDir(filepath.Join(dir, record.StepsDir))
	for _, sd := range steps {
		atts, _ := os.ReadDir(filepath.Join(dir, record.StepsDir, sd.Name()))
		for _, ad := range atts {
			files = append(files, filepath.Join(dir, record.StepsDir, sd.Name(), ad.Name(), record.EventsFile))
		}
	}
	var out []record.Event
	for _, p := range files {
		out = append(out, t.read(p)...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TS.Before(out[j].TS) })
	return out
}

func (t *eventTail) read(p string) []record.Event {
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	off := t.offsets[p]
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(f, 32<<20))
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		return nil
	}
	t.offsets[p] = off + int64(end) + 1
	var out []record.Event
	for _, line := range bytes.Split(b[:end], []byte{'\n'}) {
		var ev record.Event
		// Seal lines of a chained log have no type: skipped.
		if json.Unmarshal(line, &ev) == nil && ev.Type != "" {
			out = append(out, ev)
		}
	}
	return out
}

// Serve listens on the state directory's Unix socket (and serve.listen
// with the token) and runs queued runs until ctx ends; then it stops as
// stop describes and returns.
func (s *Server) Serve(ctx context.Context) error {
	defer s.lock.Unlock()
	sock := filepath.Join(s.F.StateDir, record.ServeSocketFile)
	if len(sock) > 100 {
		return fmt.Errorf("the socket path %s is too long for a Unix socket (%d bytes; the limit is about 104); set state_dir to a shorter path", sock, len(sock))
	}
	// The socket lives in a folder of its own that every sandbox hides: a
	// step connecting to it could queue runs the factory did not sandbox.
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %v", filepath.Dir(sock), err)
	}
	os.Remove(sock) // a stale socket: the serve lock says nobody owns it
	// The socket is created 0600 from the start: no moment where another
	// user could connect.
	old := syscall.Umask(0o177)
	ul, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %v", sock, err)
	}
	defer os.Remove(sock)
	lim := s.opts.Limits.withDefaults()
	servers := []*http.Server{lim.httpServer(s.Handler(""))}
	// No sandbox of any factory drives serve: whoever can see the socket,
	// only a process in kusaw's own user and PID namespaces is served.
	hostOnly := peercred.Listener(ul.(*net.UnixListener), peercred.HostPeer, func(c net.Conn, err error) {
		s.log.Warn().Str("socket", sock).Str("why", err.Error()).Msg("refused a connection to serve's socket")
		refusePeer(c, err)
	})
	listeners := []net.Listener{httpframe.Listener(newCapListener(hostOnly, lim.MaxUnixConns, 0))}
	if s.opts.Listen != "" {
		if s.opts.Token == "" {
			ul.Close()
			return fmt.Errorf("serve.listen is %s but no token is stored; store one: kusaw config set %s --secret", s.opts.Listen, TokenSecretKey)
		}
		tl, err := net.Listen("tcp", s.opts.Listen)
		if err != nil {
			ul.Close()
			return fmt.Errorf("cannot listen on %s: %v (fix serve.listen)", s.opts.Listen, err)
		}
		s.mu.Lock()
		s.opts.Listen = tl.Addr().String()
		s.mu.Unlock()
		servers = append(servers, lim.httpServer(s.Handler(s.opts.Token)))
		s.tcp = newCapListener(tl, lim.MaxConns, lim.MaxConnsPerAddr)
		listeners = append(listeners, httpframe.Listener(s.tcp))
	}
	info := client.ServeInfo{PID: os.Getpid(), Socket: sock, Listen: s.opts.Listen, Cluster: s.clusterAddr(), MaxParallel: s.max, Started: s.started, Factory: s.F.Path}
	b, _ := json.MarshalIndent(info, "", "  ")
	_ = config.WriteFileAtomic(filepath.Join(s.F.StateDir, record.ServeInfoFile), append(b, '\n'), record.FileMode())
	defer os.Remove(filepath.Join(s.F.StateDir, record.ServeInfoFile))
	errc := make(chan error, len(servers))
	for i, hs := range servers {
		go func() { errc <- hs.Serve(listeners[i]) }()
	}
	ev := s.log.Info().Str("socket", sock).Int("max_parallel", s.max).Str("state_dir", s.F.StateDir)
	if s.opts.Listen != "" {
		ev = ev.Str("listen", s.opts.Listen)
	}
	if a := s.clusterAddr(); a != "" {
		ev = ev.Str("cluster", a)
	}
	q, _ := s.Counts()
	ev.Int("queued", q).Msg("kusaw serve ready")
	dctx, dstop := context.WithCancel(context.Background())
	defer dstop()
	go s.dispatch(dctx)
	go s.schedules(dctx)
	go s.retention(dctx)

	var serveErr error
	select {
	case <-ctx.Done():
		s.log.Info().Dur("grace", s.opts.StopGrace).Msg("stopping: no new runs; running attempts get the grace period")
	case serveErr = <-errc:
		s.log.Error().Err(serveErr).Msg("API listener failed; stopping")
	}
	s.stop()
	s.cl.close()
	// Serve's one engine owns the one egress proxy every attempt leased.
	if err := s.E.Close(); err != nil {
		s.log.Warn().Err(err).Msg("closing the egress proxy")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, hs := range servers {
		if err := hs.Shutdown(sctx); err != nil {
			hs.Close()
		}
	}
	s.log.Info().Msg("kusaw serve stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// ServeAddr returns the TCP address serve listens on ("" for none); valid
// once Serve has started listening.
func (s *Server) ServeAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.Listen
}

// writeSSE writes one event as an unnamed server-sent event (its type is
// in the data), so an EventSource's onmessage sees every type; only the
// stream's last message is named: "end".
func writeSSE(w io.Writer, ev record.Event, b []byte) {
	fmt.Fprintf(w, "id: %s/%d/%d\ndata: %s\n\n", ev.Step, ev.Attempt, ev.Seq, b)
}
