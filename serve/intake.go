package serve

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/deliver"
	"github.com/kusaw/kusaw/factory"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// Intake (docs/intake.md): POST /v1/hooks/{forge} takes the forge's
// webhooks without serve's token. A delivery is checked against the
// forge's webhook secret over its raw bytes before anything in it is
// read, a delivery id seen before is answered and ignored, and only users
// the trigger allows start work or command a run. The event's text
// reaches a run only as its parameters.

const (
	maxHookBody = 5 << 20 // GitHub caps its payloads at 25 MB; issues and reviews are far smaller
	// rateRuns runs per repository per rateWindow may be started by
	// deliveries; the rest are refused (429) and counted.
	rateRuns   = 30
	rateWindow = time.Hour
	// seenKeep deliveries are remembered (on disk, across restarts).
	seenKeep = 20000
)

type intake struct {
	mu     sync.Mutex
	seen   map[string]bool
	order  []string
	file   string
	lines  int                    // lines in file
	starts map[string][]time.Time // forge/repo → when deliveries started runs
	hooks  *prometheus.CounterVec
	now    func() time.Time
}

func newIntake(stateDir string, now func() time.Time) *intake {
	in := &intake{seen: map[string]bool{}, starts: map[string][]time.Time{}, now: now,
		file: filepath.Join(stateDir, "serve", "deliveries.log"),
		hooks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kusaw_hooks_total",
			Help: "Webhook deliveries by forge and result: run, command, ignored, duplicate, unsigned, forged, unknown_forge, unknown_repository, not_allowed, rate_limited, bad_request."},
			[]string{"forge", "result"})}
	if in.now == nil {
		in.now = time.Now
	}
	if f, err := os.Open(in.file); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			in.remember(sc.Text())
			in.lines++
		}
		f.Close()
	}
	return in
}

func (in *intake) remember(key string) {
	if key == "" || in.seen[key] {
		return
	}
	in.seen[key] = true
	in.order = append(in.order, key)
	if len(in.order) > seenKeep {
		delete(in.seen, in.order[0])
		in.order = in.order[1:]
	}
}

// firstTime records a delivery's ids (its delivery id and bodyKey) and
// says whether none was seen before. They are written before the delivery
// is acted on: a crash in between loses the delivery rather than running
// it twice.
func (in *intake) firstTime(forge string, ids ...string) (bool, error) {
	var keys []string
	for _, id := range ids {
		keys = append(keys, forge+" "+strings.Map(func(r rune) rune {
			if r < ' ' || r == 0x7f {
				return -1
			}
			return r
		}, id))
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	fresh, lines, n := true, "", 0
	for _, key := range keys {
		if in.seen[key] {
			fresh = false
		} else {
			lines, n = lines+key+"\n", n+1
		}
	}
	if lines != "" {
		f, err := os.OpenFile(in.file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return false, err
		}
		_, err = f.WriteString(lines)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return false, err
		}
	}
	for _, key := range keys {
		in.remember(key)
	}
	if in.lines += n; in.lines > 2*seenKeep {
		in.compact()
	}
	return fresh, nil
}

// bodyKey names a delivery by its signed bytes. The delivery id and the
// event header are not signed: a replay may change them, not the body.
func bodyKey(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// compact rewrites deliveries.log with the ids still remembered, so the
// file stays bounded.
func (in *intake) compact() {
	tmp := in.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(in.order, "\n")+"\n"), 0o600); err == nil && os.Rename(tmp, in.file) == nil {
		in.lines = len(in.order)
	}
}

// allowRate says whether a repository may have one more run started by
// deliveries now.
func (in *intake) allowRate(forge, repo string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	key, now := forge+"/"+strings.ToLower(repo), in.now()
	kept := in.starts[key][:0]
	for _, t := range in.starts[key] {
		if now.Sub(t) < rateWindow {
			kept = append(kept, t)
		}
	}
	if len(kept) >= rateRuns {
		in.starts[key] = kept
		return false
	}
	in.starts[key] = append(kept, now)
	return true
}

func (in *intake) count(forge, result string) { in.hooks.WithLabelValues(forge, result).Inc() }

// hookPattern is the one route the TCP listener serves without the token.
const hookPattern = "POST /v1/hooks/{forge}"

func (s *Server) intakeRoutes(mux *http.ServeMux) {
	mux.HandleFunc(hookPattern, s.apiHook)
}

// hookAnswer is what a delivery gets back, and what is counted.
type hookAnswer struct {
	status    int
	result    string // the metric's result label
	code, msg string
	fix       string
	run       string
}

func (s *Server) apiHook(w http.ResponseWriter, r *http.Request) {
	a := s.hook(r)
	forge := r.PathValue("forge")
	if s.F.Forges[forge] == nil {
		forge = "unknown" // a sender without the secret picks no metric label
	}
	s.intake.count(forge, a.result)
	ev := s.log.Info()
	if a.status >= 400 {
		ev = s.log.Warn()
	}
	ev.Str("forge", r.PathValue("forge")).Str("remote", r.RemoteAddr).Str("result", a.result).Str("run", a.run).Msg("webhook: " + a.msg)
	if a.status >= 400 {
		apiError(w, a.status, a.code, a.msg, a.fix)
		return
	}
	body := map[string]any{"result": a.result, "message": a.msg}
	if a.run != "" {
		body["run"] = a.run
	}
	writeJSONResponse(w, a.status, body)
}

func refuse(st int, result, code, msg, fix string) hookAnswer {
	return hookAnswer{status: st, result: result, code: code, msg: msg, fix: fix}
}

func ignored(msg string) hookAnswer {
	return hookAnswer{status: http.StatusOK, result: "ignored", msg: msg}
}

func (s *Server) hook(r *http.Request) hookAnswer {
	forge := r.PathValue("forge")
	fg := s.F.Forges[forge]
	if fg == nil || fg.WebhookSecret == nil {
		return refuse(http.StatusNotFound, "unknown_forge", "unknown_forge", fmt.Sprintf("this factory takes no webhooks from %q", forge),
			"add forges."+forge+".webhook_secret to the factory file (docs/intake.md)")
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxHookBody))
	if err != nil {
		return refuse(http.StatusRequestEntityTooLarge, "bad_request", "too_large", "the delivery is larger than 5 MiB or was cut off", "")
	}
	secret, err := s.E.SecretValue(fg.WebhookSecret)
	if err != nil {
		return refuse(http.StatusServiceUnavailable, "bad_request", "secret_missing", "forges."+forge+".webhook_secret is not in the secret store",
			"kusaw config set forges."+forge+".webhook_secret --secret (the value the forge's webhook is set up with)")
	}
	switch err := verifyDelivery(forge, secret, r.Header, body); {
	case errors.Is(err, errUnsigned):
		return refuse(http.StatusUnauthorized, "unsigned", "unsigned", err.Error(), "set the webhook's secret on the forge to the value of forges."+forge+".webhook_secret")
	case err != nil:
		return refuse(http.StatusUnauthorized, "forged", "bad_signature", errForged.Error(), "set the webhook's secret on the forge to the value of forges."+forge+".webhook_secret")
	}
	id := deliveryID(forge, r.Header)
	if id == "" {
		return refuse(http.StatusBadRequest, "bad_request", "no_delivery_id", "the delivery has no delivery id header", "send the forge's own webhook")
	}
	ev, err := parseDelivery(forge, r.Header, body)
	if err != nil {
		return refuse(http.StatusBadRequest, "bad_request", "bad_payload", "the delivery is not JSON kusaw can read: "+err.Error(), "")
	}
	fresh, err := s.intake.firstTime(forge, id, bodyKey(body))
	if err != nil {
		return refuse(http.StatusServiceUnavailable, "bad_request", "state", "cannot record the delivery: "+err.Error(), "check that serve's state directory is writable")
	}
	if !fresh {
		return hookAnswer{status: http.StatusOK, result: "duplicate", msg: "delivery " + id + " was seen before: ignored"}
	}
	if ev.Event == "" {
		return ignored("kusaw does not act on this event")
	}
	if !s.knownRepo(forge, ev.Repo) {
		return refuse(http.StatusForbidden, "unknown_repository", "unknown_repository", fmt.Sprintf("no trigger takes %s's events from %q", forge, ev.Repo),
			"add a trigger with on: {forge: "+forge+", repo: "+ev.Repo+", ...}, or remove the webhook from that repository")
	}
	if cmd, arg, ok := parseCommand(ev.Comment); ok && ev.Event == "issue_comment.created" {
		return s.command(ev, cmd, arg)
	}
	for _, t := range s.F.TriggerOrderFor(forge) {
		if matches(t, ev) {
			return s.fire(t, ev, "")
		}
	}
	return ignored("no trigger matches " + ev.Event)
}

func (s *Server) knownRepo(forge, repo string) bool {
	for _, t := range s.F.TriggerOrderFor(forge) {
		if strings.EqualFold(t.On.Repo, repo) {
			return true
		}
	}
	return false
}

func matches(t *config.Trigger, ev *forgeEvent) bool {
	if !strings.EqualFold(t.On.Repo, ev.Repo) || t.On.Event != ev.Event {
		return false
	}
	switch {
	case t.On.Label != "" && ev.Label != "":
		return t.On.Label == ev.Label
	case t.On.Label != "":
		// Gitea names the labels an issue has, not the one just added.
		for _, l := range ev.Labels {
			if l == t.On.Label {
				return true
			}
		}
		return false
	case t.On.State != "":
		return t.On.State == ev.ReviewState
	}
	return true
}

// allowed says whether the event's sender may start t: a name on its
// allow list, or (without one) a user the forge says may write.
func allowed(t *config.Trigger, ev *forgeEvent) bool {
	if len(t.Allow) > 0 {
		for _, u := range t.Allow {
			if strings.EqualFold(u, ev.Sender) {
				return true
			}
		}
		return false
	}
	return ev.WriteAccess
}

// parseCommand reads "/kusaw VERB [text]" from a comment's first line.
func parseCommand(comment string) (cmd, arg string, ok bool) {
	line, rest, _ := strings.Cut(strings.TrimSpace(comment), "\n")
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "/kusaw" {
		return "", "", false
	}
	arg = strings.TrimSpace(strings.Join(f[2:], " ") + "\n" + rest)
	return f[1], arg, true
}

// fire starts a run of t for ev. A review (or a command on kusaw's pull
// request) starts a follow-up that continues the pull request's run.
func (s *Server) fire(t *config.Trigger, ev *forgeEvent, command string) hookAnswer {
	if !allowed(t, ev) {
		return refuse(http.StatusForbidden, "not_allowed", "not_allowed", fmt.Sprintf("%s may not start trigger %s", ev.Sender, t.Name),
			"add them to triggers."+t.Name+".allow, or give them write access to "+ev.Repo)
	}
	req := factory.RunRequest{Pipeline: t.Pipeline, Trigger: &record.Trigger{Name: t.Name, Forge: ev.Forge, Delivery: ev.Delivery, Event: ev.Event,
		Repo: ev.Repo, Sender: ev.Sender, Issue: ev.Issue, PullRequest: ev.PullRequest, Command: command}}
	vals := s.eventValues(t, ev)
	if ev.PullRequest > 0 && (ev.Event == "pull_request_review.submitted" || command != "") {
		prev := s.runOfPull(ev.Forge, ev.Repo, ev.PullRequest)
		if prev == nil {
			return ignored(fmt.Sprintf("pull request %d is not one kusaw opened", ev.PullRequest))
		}
		req.Continues = prev.ID
		if t.Pipeline == "" {
			req.Pipeline = prev.Pipeline
		}
	}
	req.Params = map[string]string{}
	for _, name := range t.ParamOrder {
		req.Params[name] = config.ExpandTemplate(t.Params[name], vals)
	}
	if len(req.Params) == 0 {
		// Without params the event's own text is the task.
		req.Params["TASK"] = defaultTask(ev, vals)
	}
	for k, v := range req.Params {
		if len(v) > 8<<10 {
			req.Params[k] = v[:8<<10] // CheckParams' bound: a long issue is cut, not refused
		}
		req.Params[k] = strings.ReplaceAll(req.Params[k], "\x00", "")
	}
	if active := s.activeRunOf(t, ev); active != "" && command == "" {
		// Gitea names the labels an issue has, not the one added: any
		// label change while it is on would start the trigger again.
		return ignored(fmt.Sprintf("run %s of trigger %s for this issue is still running", active, t.Name))
	}
	if !s.intake.allowRate(ev.Forge, ev.Repo) {
		return refuse(http.StatusTooManyRequests, "rate_limited", "rate_limited", fmt.Sprintf("%s has started %d runs in the last hour", ev.Repo, rateRuns), "wait, or start the run with kusaw run")
	}
	rec, err := s.SubmitRequest(req)
	if err != nil {
		return refuse(http.StatusServiceUnavailable, "bad_request", "not_started", "cannot start the run: "+err.Error(), "")
	}
	s.commentLater(ev, fmt.Sprintf("kusaw started run `%s` (pipeline `%s`)%s.", rec.ID, rec.Pipeline, s.linkTo(rec.ID)))
	return hookAnswer{status: http.StatusAccepted, result: "run", msg: "trigger " + t.Name + " started run " + rec.ID, run: rec.ID}
}

// eventValues are the fields a trigger's params may name.
func (s *Server) eventValues(t *config.Trigger, ev *forgeEvent) map[string]string {
	v := map[string]string{"issue.title": ev.IssueTitle, "issue.body": ev.IssueBody, "issue.url": ev.URL, "comment.body": ev.Comment,
		"review.state": ev.ReviewState, "review.body": ev.ReviewBody, "pull_request.branch": ev.Branch,
		"sender": ev.Sender, "repo": ev.Repo, "label": ev.Label, "trigger": t.Name, "event": ev.Event}
	if ev.Issue > 0 {
		v["issue.number"] = strconv.Itoa(ev.Issue)
	}
	if ev.PullRequest > 0 {
		v["pull_request.number"] = strconv.Itoa(ev.PullRequest)
	}
	if ev.Event == "pull_request_review.submitted" {
		v["review.comments"] = s.reviewComments(ev)
	}
	return v
}

func defaultTask(ev *forgeEvent, vals map[string]string) string {
	switch {
	case ev.Event == "pull_request_review.submitted":
		task := "A review of your pull request asks for changes. Address them.\n\n" + ev.ReviewBody
		if c := vals["review.comments"]; c != "" {
			task += "\n\nComments on the code:\n" + c
		}
		return strings.TrimSpace(task)
	case ev.Comment != "" && ev.IsPull:
		return strings.TrimSpace(ev.Comment)
	}
	return strings.TrimSpace(ev.IssueTitle + "\n\n" + ev.IssueBody)
}

// reviewComments reads a review's comments from the forge, one per line
// as "path:line: text"; "" when the forge has no token or cannot say.
func (s *Server) reviewComments(ev *forgeEvent) string {
	th, ok := s.thread(ev.Forge, ev.Repo, ev.PullRequest, true)
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list, err := deliver.ReviewComments(ctx, th, ev.ReviewID, ev.Sender)
	if err != nil {
		s.log.Warn().Err(err).Int("pull_request", ev.PullRequest).Msg("webhook: cannot read the review's comments")
		return ""
	}
	var b strings.Builder
	for _, c := range list {
		fmt.Fprintf(&b, "%s:%d: %s\n", c.Path, c.Line, strings.TrimSpace(c.Body))
	}
	return strings.TrimSpace(b.String())
}

// runOfPull is the newest run whose delivery opened or updated pull
// request n of repo: the one a follow-up continues.
func (s *Server) runOfPull(forge, repo string, n int) *record.RunRecord {
	runs, err := s.E.State.Runs()
	if err != nil {
		return nil
	}
	for _, rec := range runs { // newest first
		if d := rec.Delivery; d != nil && d.PullNumber == n && s.deliversTo(rec.Pipeline, forge, repo) {
			return rec
		}
	}
	return nil
}

// deliversTo says whether pipeline opens its pull requests on forge's
// repo: pull request numbers are per repository, so #100 of another
// repository the factory takes hooks from is not kusaw's #100.
func (s *Server) deliversTo(pipeline, forge, repo string) bool {
	pl := s.F.Pipelines[pipeline]
	if pl == nil || pl.Deliver == nil || pl.Deliver.PullRequest == nil {
		return false
	}
	pr := pl.Deliver.PullRequest
	return pr.Forge == forge && strings.EqualFold(pr.Repo, repo)
}

// runOfThread is the newest run started for an issue, or that delivered
// to a pull request.
func (s *Server) runOfThread(ev *forgeEvent) *record.RunRecord {
	runs, err := s.E.State.Runs()
	if err != nil {
		return nil
	}
	for _, rec := range runs {
		if t := rec.Trigger; t != nil && t.Forge == ev.Forge && strings.EqualFold(t.Repo, ev.Repo) &&
			(ev.Issue > 0 && t.Issue == ev.Issue || ev.PullRequest > 0 && t.PullRequest == ev.PullRequest) {
			return rec
		}
		if d := rec.Delivery; ev.PullRequest > 0 && d != nil && d.PullNumber == ev.PullRequest && s.deliversTo(rec.Pipeline, ev.Forge, ev.Repo) {
			return rec
		}
	}
	return nil
}

// command carries out a comment command by an allowed user.
func (s *Server) command(ev *forgeEvent, cmd, arg string) hookAnswer {
	var t *config.Trigger // the repository's trigger that says who may command it
	for _, c := range s.F.TriggerOrderFor(ev.Forge) {
		if strings.EqualFold(c.On.Repo, ev.Repo) && (t == nil || c.On.Event == "issue_comment.created") {
			t = c
		}
	}
	if t == nil || !allowed(t, ev) {
		return refuse(http.StatusForbidden, "not_allowed", "not_allowed", fmt.Sprintf("%s may not command kusaw on %s", ev.Sender, ev.Repo),
			"add them to the trigger's allow:, or give them write access")
	}
	prev := s.runOfThread(ev)
	switch cmd {
	case "run", "retry":
		if cmd == "retry" && prev == nil {
			return ignored("no run of this thread to retry")
		}
		fire := t
		for _, c := range s.F.TriggerOrderFor(ev.Forge) {
			// /kusaw run on an issue is the issue trigger's run; on a pull
			// request, the review trigger's follow-up.
			if strings.EqualFold(c.On.Repo, ev.Repo) && (ev.IsPull == (c.On.Event == "pull_request_review.submitted")) {
				fire = c
				break
			}
		}
		if arg != "" {
			ev.Comment = arg
		}
		return s.fire(fire, ev, cmd)
	case "cancel":
		if prev == nil || prev.State.Final() {
			return ignored("no running run of this thread to cancel")
		}
		if _, err := s.Cancel(prev.ID); err != nil {
			return refuse(http.StatusConflict, "bad_request", "not_canceled", err.Error(), "")
		}
		s.commentLater(ev, fmt.Sprintf("kusaw canceled run `%s` (asked by @%s).", prev.ID, ev.Sender))
		return hookAnswer{status: http.StatusAccepted, result: "command", msg: "canceled run " + prev.ID, run: prev.ID}
	case "approve", "reject":
		if prev == nil || prev.State != status.RunWaiting {
			return ignored("no run of this thread waits at a gate")
		}
		d := record.GateDecision{Approve: cmd == "approve", By: ev.Forge + ":" + ev.Sender, Reason: strings.TrimSpace(arg + " (" + ev.Forge + " comment)"), At: time.Now().UTC()}
		if _, err := s.E.State.DecideGate(prev.ID, d); err != nil {
			return refuse(http.StatusConflict, "bad_request", "gate", err.Error(), "")
		}
		return hookAnswer{status: http.StatusAccepted, result: "command", msg: cmd + "d the gate of run " + prev.ID, run: prev.ID}
	}
	return ignored("unknown command /kusaw " + cmd + " (run, retry, cancel, approve, reject)")
}

// thread is where kusaw comments for an event: its issue or pull request.
func (s *Server) thread(forge, repo string, n int, pull bool) (deliver.Thread, bool) {
	fg := s.F.Forges[forge]
	if fg == nil || fg.Token == nil || n == 0 {
		return deliver.Thread{}, false
	}
	tok, err := s.E.SecretValue(fg.Token)
	if err != nil {
		return deliver.Thread{}, false
	}
	return deliver.Thread{Forge: forge, APIURL: fg.APIURL, Repo: repo, Token: tok, Number: n, IsPull: pull}, true
}

// commentLater posts a comment on the event's issue or pull request in the
// background; a failure is logged, never the delivery's.
func (s *Server) commentLater(ev *forgeEvent, body string) {
	n, pull := ev.Issue, ev.IsPull
	if n == 0 {
		n, pull = ev.PullRequest, true
	}
	th, ok := s.thread(ev.Forge, ev.Repo, n, pull)
	if !ok {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deliver.Comment(ctx, th, body); err != nil {
			s.log.Warn().Err(err).Str("repo", th.Repo).Int("number", th.Number).Msg("cannot comment on the forge")
		}
	}()
}

// runEnded comments on the issue or pull request a run came from.
func (s *Server) runEnded(rec *record.RunRecord) {
	t := rec.Trigger
	if t == nil || t.Forge == "" {
		return
	}
	ev := &forgeEvent{Forge: t.Forge, Repo: t.Repo, Issue: t.Issue, PullRequest: t.PullRequest, IsPull: t.Issue == 0}
	msg := fmt.Sprintf("kusaw run `%s` %s", rec.ID, rec.State)
	if rec.Message != "" {
		msg += ": " + rec.Message
	}
	if d := rec.Delivery; d != nil && d.PullURL != "" {
		msg += ". Pull request: " + d.PullURL
	}
	s.commentLater(ev, msg+s.linkTo(rec.ID)+".")
}

// linkTo is " (URL)" of a run's page when serve.public_url is set.
func (s *Server) linkTo(id string) string {
	if s.F.Serve.PublicURL == "" {
		return ""
	}
	return " (" + strings.TrimRight(s.F.Serve.PublicURL, "/") + "/#run=" + id + ")"
}

// intakeGather renders the intake's counters (tests).
func (s *Server) intakeGather() (string, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(s.intake.hooks); err != nil {
		return "", err
	}
	fams, err := reg.Gather()
	var b strings.Builder
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				fmt.Fprintf(&b, "%s=%q ", l.GetName(), l.GetValue())
			}
			fmt.Fprintf(&b, "%v\n", m.GetCounter().GetValue())
		}
	}
	return b.String(), err
}

// activeRunOf is a run of trigger t for ev's issue that has not ended.
func (s *Server) activeRunOf(t *config.Trigger, ev *forgeEvent) string {
	if ev.Issue == 0 || ev.IsPull {
		return ""
	}
	runs, err := s.E.State.Runs()
	if err != nil {
		return ""
	}
	for _, rec := range runs {
		if tr := rec.Trigger; tr != nil && tr.Name == t.Name && tr.Issue == ev.Issue && strings.EqualFold(tr.Repo, ev.Repo) && !rec.State.Final() {
			return rec.ID
		}
	}
	return ""
}
