package factory

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// ProbeMarker starts the line of `kusaw __probe` output that carries its
// results, so doctor finds it among whatever else the sandbox prints.
const ProbeMarker = "KUSAW-PROBE "

// ProbeSpec is what `kusaw __probe` tries from inside a step's sandbox.
// Paths may name $VARIABLES of the sandbox's environment ($TMPDIR).
type ProbeSpec struct {
	WriteOutside []string `json:"write_outside"` // P3: each must fail
	WriteInside  []string `json:"write_inside"`  // P3's twin: each must work
	Secrets      []string `json:"secrets"`       // P4: none may show content
	Allowed      string   `json:"allowed"`       // P5: GET through the proxy, must answer Token
	Token        string   `json:"token"`
	Denied       string   `json:"denied"` // P6: GET through the proxy, must be refused with 403
	Direct       string   `json:"direct"` // P7: host:port dialled without the proxy, must fail
	// Local are local-service host:ports dialled without the proxy (P8):
	// each must connect, through the bridge on Linux.
	Local []string `json:"local,omitempty"`
	// AgentAPI is an agent's own API (P9): reached through the proxy as
	// its CLI would (CONNECT for https, a GET for http).
	AgentAPI string `json:"agent_api,omitempty"`
}

// ProbeOutput is what the probe saw, reported back as one JSON line.
type ProbeOutput struct {
	Proxy        string      `json:"proxy"` // $HTTP_PROXY inside
	Wrote        []string    `json:"wrote"`
	InsideFailed []string    `json:"inside_failed"`
	Visible      []string    `json:"visible"` // secrets whose content could be read
	Allowed      ProbeAnswer `json:"allowed"`
	Denied       ProbeAnswer `json:"denied"`
	DirectErr    string      `json:"direct_err"`          // empty when the direct connection worked
	LocalErr     []string    `json:"local_err,omitempty"` // "host:port: error" per local service not reached
	AgentAPI     ProbeAnswer `json:"agent_api"`
}

// ProbeAnswer is one HTTP exchange through the proxy.
type ProbeAnswer struct {
	Status int    `json:"status"`
	Line   string `json:"line"` // the status line's reason, or the body's first line
	Body   string `json:"body"`
	Err    string `json:"err,omitempty"`
}

// RunProbe runs spec where it is (inside the sandbox) and writes one
// marker line with the results to w. Failures of what is probed are
// results, not errors.
func RunProbe(spec ProbeSpec, w io.Writer) error {
	out := ProbeOutput{Proxy: os.Getenv("HTTP_PROXY"), Wrote: []string{}, InsideFailed: []string{}, Visible: []string{}}
	for _, p := range spec.WriteOutside {
		p = os.ExpandEnv(p)
		if f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
			f.Close()
			out.Wrote = append(out.Wrote, p)
			os.Remove(p)
		}
	}
	for _, p := range spec.WriteInside {
		p = os.ExpandEnv(p)
		if err := os.WriteFile(p, []byte("kusaw doctor\n"), 0o600); err != nil {
			out.InsideFailed = append(out.InsideFailed, p+": "+errText(err))
		} else {
			os.Remove(p)
		}
	}
	for _, p := range spec.Secrets {
		if visible(os.ExpandEnv(p)) {
			out.Visible = append(out.Visible, p)
		}
	}
	var proxy *url.URL
	if out.Proxy != "" {
		proxy, _ = url.Parse(out.Proxy)
	}
	// Go's ProxyFromEnvironment skips loopback names: the proxy is set
	// explicitly, as any client in the sandbox would be configured.
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{Proxy: func(*http.Request) (*url.URL, error) {
		if proxy == nil {
			return nil, errors.New("HTTP_PROXY is not set in the sandbox")
		}
		return proxy, nil
	}}}
	if spec.Allowed != "" {
		out.Allowed = get(client, spec.Allowed)
	}
	if spec.Denied != "" {
		out.Denied = get(client, spec.Denied)
	}
	if spec.Direct != "" {
		c, err := net.DialTimeout("tcp", spec.Direct, 3*time.Second)
		if err == nil {
			fmt.Fprintf(c, "GET /p7 HTTP/1.0\r\nHost: %s\r\n\r\n", spec.Direct)
			_, _ = io.Copy(io.Discard, io.LimitReader(c, 4096))
			c.Close()
		} else {
			out.DirectErr = errText(err)
		}
	}
	for _, addr := range spec.Local {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			out.LocalErr = append(out.LocalErr, addr+": "+errText(err))
			continue
		}
		// Doctor's own server counts the request; another service only
		// has to accept the connection.
		fmt.Fprintf(c, "GET /p8 HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 4096))
		c.Close()
	}
	if spec.AgentAPI != "" {
		out.AgentAPI = agentAPI(client, proxy, spec.AgentAPI)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s%s\n", ProbeMarker, b)
	return err
}

func get(c *http.Client, u string) ProbeAnswer {
	resp, err := c.Get(u)
	if err != nil {
		return ProbeAnswer{Err: errText(err)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	a := ProbeAnswer{Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	a.Line, _, _ = strings.Cut(a.Body, "\n")
	return a
}

// visible says whether anything of p can be read: a file's bytes or a
// folder's entries. A hidden path is absent, an empty stand-in, or
// unreadable.
func visible(p string) bool {
	fi, err := os.Stat(p)
	if err != nil {
		return false
	}
	if fi.IsDir() {
		es, err := os.ReadDir(p)
		return err == nil && len(es) > 0
	}
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	n, _ := f.Read(make([]byte, 1))
	return n > 0
}

func errText(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// ParseProbeOutput finds the probe's marker line in a sandbox's output.
func ParseProbeOutput(s string) (ProbeOutput, bool) {
	for _, l := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(l, ProbeMarker); ok {
			var out ProbeOutput
			if json.Unmarshal([]byte(rest), &out) == nil {
				return out, true
			}
		}
	}
	return ProbeOutput{}, false
}

// agentAPI reaches an agent's API through the proxy: an https API with a
// CONNECT (the answer to the CONNECT is what the proxy decided; no TLS is
// spoken), an http one with a GET.
func agentAPI(c *http.Client, proxy *url.URL, api string) ProbeAnswer {
	u, err := url.Parse(api)
	if err != nil || u.Host == "" {
		return ProbeAnswer{Err: fmt.Sprintf("%q is not a URL", api)}
	}
	if u.Scheme != "https" {
		return get(c, api)
	}
	if proxy == nil {
		return ProbeAnswer{Err: "HTTP_PROXY is not set in the sandbox"}
	}
	target := u.Host
	if u.Port() == "" {
		target += ":443"
	}
	conn, err := net.DialTimeout("tcp", proxy.Host, 5*time.Second)
	if err != nil {
		return ProbeAnswer{Err: errText(err)}
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return ProbeAnswer{Err: errText(err)}
	}
	defer resp.Body.Close()
	a := ProbeAnswer{Status: resp.StatusCode, Line: resp.Status}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		a.Body = strings.TrimSpace(string(b))
		if l, _, _ := strings.Cut(a.Body, "\n"); l != "" {
			a.Line = l
		}
	}
	return a
}
