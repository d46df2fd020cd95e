package factory

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
)

// Notifications (docs/pipelines.md): webhooks POSTed by the process that
// runs the run (serve, or kusaw run), outside every sandbox. A delivery
// never fails or blocks the run: it runs beside it and is retried with
// backoff for up to NotifyFor. Outcomes go to the run's events while they
// are open, later ones (retries after the run ended) to notify.jsonl, a
// chained, sealed log of its own beside them.

// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 of the body
// with the notification's secret.
const SignatureHeader = "X-Kusaw-Signature"

// NotifyFile is the run's log of deliveries made after its events closed.
const NotifyFile = "notify.jsonl"

// Notification is the JSON body of a webhook.
type Notification struct {
	Event      string `json:"event"` // run.finished, run.waiting, step.failed
	Run        string `json:"run"`
	Pipeline   string `json:"pipeline"`
	State      string `json:"state"`
	Reason     string `json:"reason,omitempty"`
	Message    string `json:"message,omitempty"`
	Step       string `json:"step,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Link       string `json:"link"`
	At         string `json:"at"`
}

// Delivery timing.
const (
	defaultNotifyFor = 10 * time.Minute
	notifyTimeout    = 5 * time.Second
	notifyMaxBackoff = time.Minute
)

// notifier holds the deliveries of one run.
type notifier struct {
	mu    sync.Mutex
	first sync.WaitGroup // first tries, which the run's end waits for briefly
	all   sync.WaitGroup // every delivery, before notify.jsonl is sealed
	late  *attempt.Sink  // notify.jsonl, opened on the first late outcome
	open  bool           // the run's events take outcomes
}

// hooks are the webhooks of a run's pipeline that listen for event.
func (e *Engine) hooks(pipeline, event string) []config.Notify {
	all := append([]config.Notify(nil), e.F.Notify...)
	if pl := e.F.Pipelines[pipeline]; pl != nil {
		all = append(all, pl.Notify...)
	}
	var out []config.Notify
	for _, h := range all {
		if slices.Contains(h.On, event) {
			out = append(out, h)
		}
	}
	return out
}

// notify sends event's webhooks for the run in the background.
func (e *Engine) notify(r *Run, event, step string) {
	hooks := e.hooks(r.Record.Pipeline, event)
	if len(hooks) == 0 {
		return
	}
	r.mu.Lock()
	rec := r.Record
	n := Notification{Event: event, Run: rec.ID, Pipeline: rec.Pipeline, State: string(rec.State), Reason: string(rec.Reason),
		Message: rec.Message, Step: step, At: time.Now().UTC().Format(time.RFC3339Nano)}
	if rec.Started != nil {
		end := time.Now()
		if rec.Finished != nil {
			end = *rec.Finished
		}
		n.DurationMS = end.Sub(*rec.Started).Milliseconds()
	}
	r.mu.Unlock()
	n.Link = "file://" + r.Dir
	if e.opts.RunLink != nil {
		n.Link = e.opts.RunLink(rec.ID)
	}
	body, _ := json.Marshal(n)
	nt := r.notifier()
	for _, h := range hooks {
		nt.first.Add(1)
		nt.all.Add(1)
		e.notifyWG.Add(1)
		go e.sendHook(r, nt, h, event, body)
	}
}

func (r *Run) notifier() *notifier {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notes == nil {
		r.notes = &notifier{open: true}
	}
	return r.notes
}

// sendHook POSTs one webhook until it is taken or NotifyFor has passed.
func (e *Engine) sendHook(r *Run, nt *notifier, h config.Notify, event string, body []byte) {
	defer e.notifyWG.Done()
	defer nt.all.Done()
	firstDone := sync.OnceFunc(nt.first.Done)
	defer firstDone()
	where := safeURL(h.URL)
	var sig string
	var signKey []byte
	if h.Secret != nil {
		src, err := e.secretSource()
		var key string
		if err == nil {
			key, err = src.Get(h.Secret.Key)
		}
		if err != nil {
			nt.record(e, r, record.EvNotifyFailed, map[string]any{"event": event, "url": where, "final": true,
				"error": "secret " + h.Secret.Key + " is not in the secret store (kusaw config set " + h.Secret.Key + " --secret)"})
			return
		}
		m := hmac.New(sha256.New, []byte(key))
		m.Write(body)
		sig = "sha256=" + hex.EncodeToString(m.Sum(nil))
		signKey = standardKey(key)
	}
	msgID := newMessageID()
	limit := e.opts.NotifyFor
	if limit <= 0 {
		limit = defaultNotifyFor
	}
	deadline := time.Now().Add(limit)
	backoff := e.opts.NotifyBackoff
	if backoff <= 0 {
		backoff = time.Second
	}
	client := &http.Client{Timeout: notifyTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for try := 1; ; try++ {
		code, err := post(e.closing, client, h.URL, event, sig, standardHeaders(msgID, signKey, time.Now(), body), body)
		data := map[string]any{"event": event, "url": where, "try": try}
		if err == nil && code >= 200 && code < 300 {
			data["status"] = code
			nt.record(e, r, record.EvNotifyDelivered, data)
			return
		}
		if err != nil {
			data["error"] = err.Error()
		} else {
			data["status"] = code
		}
		final := time.Now().Add(backoff).After(deadline) || e.closing.Err() != nil
		data["final"] = final
		if !final {
			data["retry_in_ms"] = backoff.Milliseconds()
		}
		nt.record(e, r, record.EvNotifyFailed, data)
		firstDone()
		if final {
			return
		}
		select {
		case <-time.After(backoff):
		case <-e.closing.Done():
		}
		backoff = min(backoff*2, notifyMaxBackoff)
	}
}

// Standard Webhooks (standardwebhooks.com): the message id is the same on
// every try, so a receiver refuses a replay or a repeat; the signature
// covers id, timestamp and body. The body-only X-Kusaw-Signature stays
// beside it for a release.

// standardKey is the signing key of a secret: the bytes of a "whsec_"
// base64 secret, else the secret's own bytes.
func standardKey(secret string) []byte {
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(b64); err == nil {
			return k
		}
	}
	return []byte(secret)
}

func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "msg_" + hex.EncodeToString(b[:])
}

// standardHeaders are webhook-id, webhook-timestamp and (with a key)
// webhook-signature for one try.
func standardHeaders(id string, key []byte, now time.Time, body []byte) http.Header {
	h := http.Header{}
	ts := strconv.FormatInt(now.Unix(), 10)
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	if key != nil {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return h
}

func post(ctx context.Context, c *http.Client, u, event, sig string, std http.Header, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "kusaw")
	req.Header.Set("X-Kusaw-Event", event)
	for k, v := range std {
		req.Header[k] = v
	}
	if sig != "" {
		req.Header.Set(SignatureHeader, sig)
	}
	resp, err := c.Do(req)
	if err != nil {
		// The URL may hold a secret path (many chat webhooks do): the
		// error names only scheme and host.
		if ue, ok := err.(*url.Error); ok {
			return 0, fmt.Errorf("%s %s: %v", ue.Op, safeURL(u), ue.Err)
		}
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// safeURL is a webhook URL for records: scheme and host only, since the
// path or query of many webhooks is their secret.
func safeURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "(invalid URL)"
	}
	return p.Scheme + "://" + p.Host + "/…"
}

// record writes a delivery's outcome to the run's events while they are
// open, else to notify.jsonl.
func (nt *notifier) record(e *Engine, r *Run, typ string, data map[string]any) {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if nt.open {
		r.events.Emit(typ, data)
		return
	}
	if nt.late == nil {
		nt.late = e.openSink(filepath.Join(r.Dir, NotifyFile), r.ID(), "", 0, r.redact)
	}
	nt.late.Emit(typ, data)
}

// closeNotes is called as the run's events close: first tries get a short
// while to land in them; later outcomes go to notify.jsonl.
func (r *Run) closeNotes(wait time.Duration) {
	nt := r.notes
	if nt == nil {
		return
	}
	done := make(chan struct{})
	go func() { nt.first.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
	}
	nt.mu.Lock()
	nt.open = false
	nt.mu.Unlock()
	go func() { nt.all.Wait(); nt.closeLate() }()
}

// closeLate seals notify.jsonl once a run's deliveries are over.
func (nt *notifier) closeLate() {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if nt.late != nil {
		_ = nt.late.Close()
		nt.late = nil
	}
}

// WaitNotifications waits up to d for the engine's deliveries in flight
// (kusaw run before it exits); it reports whether they all ended.
func (e *Engine) WaitNotifications(d time.Duration) bool {
	done := make(chan struct{})
	go func() { e.notifyWG.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
