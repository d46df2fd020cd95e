package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kusaw/kusaw/record"
)

// Client talks to a running kusaw serve over its Unix socket (or TCP with
// a token). kusaw run, runs, show, logs and cancel use it when serve is up.
type Client struct {
	hc       *http.Client
	stream   *http.Client // no overall timeout: event streams last a run
	base     string
	token    string
	stateDir string
}

// ErrServeDown is returned by DialServe when no serve listens.
var ErrServeDown = errors.New("kusaw serve is not running")

// APIError is an error answer of the API.
type APIError struct {
	Status int
	APIErrorBody
}

func (e *APIError) Error() string {
	if e.Fix != "" {
		return e.Message + " (fix: " + e.Fix + ")"
	}
	return e.Message
}

// Unwrap lets errors.Is(err, record.ErrNoRun) work across the API.
func (e *APIError) Unwrap() error {
	switch e.Code {
	case "run_not_found":
		return record.ErrNoRun
	case "run_ambiguous":
		return record.ErrAmbiguousRun
	case "unknown_pipeline":
		return record.ErrUnknownPipeline
	case "run_ended":
		return record.ErrRunEnded
	}
	return nil
}

// DialServe connects to the serve of a state directory through its socket
// and checks it answers. ErrServeDown means: work in-process.
func DialServe(stateDir string) (*Client, error) {
	sock := filepath.Join(stateDir, record.ServeSocketFile)
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	c := &Client{
		hc:       &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 30 * time.Second},
		stream:   &http.Client{Transport: &http.Transport{DialContext: dial}},
		base:     "http://kusaw-serve",
		stateDir: stateDir,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Health(ctx); err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			return nil, err
		}
		return nil, fmt.Errorf("%w (%v)", ErrServeDown, err)
	}
	return c, nil
}

// NewTCPClient is a client of serve's TCP listener with its token.
func NewTCPClient(addr, token, stateDir string) *Client {
	return &Client{hc: &http.Client{Timeout: 30 * time.Second}, stream: &http.Client{}, base: "http://" + addr, token: token, stateDir: stateDir}
}

func (c *Client) do(ctx context.Context, hc *http.Client, method, p string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+p, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var e struct {
			Error APIErrorBody `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(b, &e) != nil || e.Error.Code == "" {
			return nil, &APIError{Status: resp.StatusCode, APIErrorBody: APIErrorBody{Code: "http_" + strconv.Itoa(resp.StatusCode), Message: strings.TrimSpace(string(b))}}
		}
		return nil, &APIError{Status: resp.StatusCode, APIErrorBody: e.Error}
	}
	return resp, nil
}

func (c *Client) getJSON(ctx context.Context, method, p string, body, out any) error {
	resp, err := c.do(ctx, c.hc, method, p, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// Health asks serve how it is.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	return &h, c.getJSON(ctx, "GET", "/v1/health", nil, &h)
}

// Submit queues a run.
func (c *Client) Submit(ctx context.Context, pipeline string, params map[string]string) (*record.RunRecord, error) {
	var out struct {
		Run *record.RunRecord `json:"run"`
	}
	return out.Run, c.getJSON(ctx, "POST", "/v1/runs", SubmitRequest{Pipeline: pipeline, Params: params}, &out)
}

// RunsCtx lists runs, newest first.
func (c *Client) RunsCtx(ctx context.Context) ([]*record.RunRecord, error) {
	var out struct {
		Runs []*record.RunRecord `json:"runs"`
	}
	return out.Runs, c.getJSON(ctx, "GET", "/v1/runs", nil, &out)
}

// Detail reads a run with its attempts and exit code.
func (c *Client) Detail(ctx context.Context, id string) (*RunDetail, error) {
	var d RunDetail
	return &d, c.getJSON(ctx, "GET", "/v1/runs/"+url.PathEscape(id), nil, &d)
}

// CancelCtx cancels a run.
func (c *Client) CancelCtx(ctx context.Context, id string) (*record.RunRecord, error) {
	var out struct {
		Run *record.RunRecord `json:"run"`
	}
	return out.Run, c.getJSON(ctx, "POST", "/v1/runs/"+url.PathEscape(id)+"/cancel", struct{}{}, &out)
}

// DecideGate approves or rejects the gate a run waits at.
func (c *Client) DecideGate(id string, d record.GateDecision) (*record.RunRecord, error) {
	var out struct {
		Run *record.RunRecord `json:"run"`
	}
	verb := "reject"
	if d.Approve {
		verb = "approve"
	}
	err := c.getJSON(context.Background(), "POST", "/v1/runs/"+url.PathEscape(id)+"/"+verb, GateRequest{Step: d.Step, Reason: d.Reason, By: d.By}, &out)
	return out.Run, err
}

// Egress reads an attempt's egress per host.
func (c *Client) Egress(ctx context.Context, id, step string, n int) (*record.EgressReport, error) {
	var r record.EgressReport
	return &r, c.getJSON(ctx, "GET", fmt.Sprintf("/v1/runs/%s/attempts/%s/%d/egress", url.PathEscape(id), url.PathEscape(step), n), nil, &r)
}

// Follow calls fn for each event of a run, recorded and live, until the
// run ends (it returns the final state) or ctx ends.
func (c *Client) Follow(ctx context.Context, id string, fn func(record.Event)) (string, error) {
	resp, err := c.do(ctx, c.stream, "GET", "/v1/runs/"+url.PathEscape(id)+"/events", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var typ string
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if typ == "end" {
				var e struct {
					State string `json:"state"`
				}
				_ = json.Unmarshal(data, &e)
				return e.State, nil
			}
			if len(data) > 0 {
				var ev record.Event
				if err := json.Unmarshal(data, &ev); err == nil {
					fn(ev)
				}
			}
			typ, data = "", nil
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: ")...)
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	return "", errors.New("kusaw serve closed the event stream before the run ended")
}

// The methods below give the CLI one view of runs whether it reads the
// state directory itself (*factory.State) or asks serve (*Client).

// Runs lists runs, newest first.
func (c *Client) Runs() ([]*record.RunRecord, error) { return c.RunsCtx(context.Background()) }

// LoadRun reads a run's record (a unique prefix of its id works).
func (c *Client) LoadRun(id string) (*record.RunRecord, error) {
	d, err := c.Detail(context.Background(), id)
	if err != nil {
		return nil, err
	}
	return d.Run, nil
}

// Attempts reads a run's attempt records.
func (c *Client) Attempts(r *record.RunRecord) ([]*record.AttemptRecord, error) {
	d, err := c.Detail(context.Background(), r.ID)
	if err != nil {
		return nil, err
	}
	return d.Attempts, nil
}

// Helpers reads the attempts of a run's helpers (fixers, judges, resolve
// steps), in the order they ran; a serve from before helpers were listed
// gives none.
func (c *Client) Helpers(r *record.RunRecord) ([]*record.AttemptRecord, error) {
	d, err := c.Detail(context.Background(), r.ID)
	if err != nil {
		return nil, err
	}
	return d.Helpers, nil
}

// RunDir is the run's folder (on this machine's state directory).
func (c *Client) RunDir(id string) string { return record.RunDir(c.stateDir, id) }

// AttemptDir is an attempt's folder.
func (c *Client) AttemptDir(run, step string, n int) string {
	return record.AttemptDir(record.RunDir(c.stateDir, run), step, n)
}

// RequestCancel cancels a run through serve.
func (c *Client) RequestCancel(id string) (*record.RunRecord, error) {
	return c.CancelCtx(context.Background(), id)
}

// ReadLog reads one of a run's logs from offset through serve.
func (c *Client) ReadLog(runID, rel string, offset, max int64) ([]byte, error) {
	q := url.Values{"path": {rel}, "offset": {strconv.FormatInt(offset, 10)}}
	resp, err := c.do(context.Background(), c.hc, "GET", "/v1/runs/"+url.PathEscape(runID)+"/log?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, max))
}

// ClusterToken asks serve for a one-time join token; addr, when set, is
// the address workers reach serve's cluster by (default: its listen
// address). pools are the pools its worker may take (none: default);
// anyPool lets it take every pool.
func (c *Client) ClusterToken(ctx context.Context, addr string, pools []string, anyPool bool) (*ClusterToken, error) {
	var out ClusterToken
	q := url.Values{}
	if addr != "" {
		q.Set("addr", addr)
	}
	for _, p := range pools {
		q.Add("pool", p)
	}
	if anyPool {
		q.Set("any_pool", "true")
	}
	p := "/v1/cluster/token"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return &out, c.getJSON(ctx, http.MethodPost, p, nil, &out)
}

// DrainWorker asks a worker to take no new attempts and to stop once its
// running ones ended (within timeout; 0: its drain_timeout).
func (c *Client) DrainWorker(ctx context.Context, name string, timeout time.Duration) error {
	p := "/v1/workers/" + url.PathEscape(name) + "/drain"
	if timeout > 0 {
		p += "?timeout=" + url.QueryEscape(timeout.String())
	}
	var out map[string]any
	return c.getJSON(ctx, http.MethodPost, p, nil, &out)
}

// RetireWorker revokes a worker's enrollment; it returns how many
// attempts it held (they go to other workers) and a note for an existing
// NATS cluster.
func (c *Client) RetireWorker(ctx context.Context, name string) (held int, note string, err error) {
	var out struct {
		Held int    `json:"attempts_lost"`
		Note string `json:"note"`
	}
	err = c.getJSON(ctx, http.MethodPost, "/v1/workers/"+url.PathEscape(name)+"/retire", nil, &out)
	return out.Held, out.Note, err
}

// Workers lists the cluster's enrolled workers.
func (c *Client) Workers(ctx context.Context) ([]Worker, error) {
	var out struct {
		Workers []Worker `json:"workers"`
	}
	return out.Workers, c.getJSON(ctx, http.MethodGet, "/v1/workers", nil, &out)
}

// TokenSecretKey is the secret-store key of serve's TCP listener token
// (kusaw config set serve.token --secret).
const TokenSecretKey = "serve.token"
