package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"time"
)

const injectPrefix = "/_kusaw/inject/"

// keyHeaders are stripped from every inject request, whatever the
// provider's own header is: the client only ever holds the placeholder,
// and nothing it sends should reach the provider as a credential.
var keyHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Proxy-Authorization"}

type injector struct {
	in     Inject
	base   *url.URL
	host   string
	port   int
	prefix string // path prefix with the lease's token
	tr     *http.Transport
	rp     *httputil.ReverseProxy
}

func (l *Lease) newInjector(in Inject) (*injector, error) {
	if !injectNameRE().MatchString(in.Name) {
		return nil, fmt.Errorf("egress lease: inject name %q must be lower-case letters, digits, '-' or '_'", in.Name)
	}
	if in.Header == "" || strings.ContainsAny(in.Header, " :\r\n") {
		return nil, fmt.Errorf("egress lease: inject %s needs a header name for the key", in.Name)
	}
	if in.Key == "" {
		return nil, fmt.Errorf("egress lease: inject %s has no key (is the secret set?)", in.Name)
	}
	if strings.ContainsAny(in.Key+in.ValuePrefix, "\r\n") {
		return nil, fmt.Errorf("egress lease: inject %s: the key contains a line break", in.Name)
	}
	base, host, port, err := validUpstream(in.upstream())
	if err != nil {
		return nil, fmt.Errorf("egress lease: inject %s: %v", in.Name, err)
	}
	ij := &injector{in: in, base: base, host: host, port: port, prefix: injectPrefix + in.Name + "/" + l.injectToken}
	roots := l.c.RootCAs
	if in.RootCAs != nil {
		roots = in.RootCAs
	}
	ij.tr = &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t, ref := l.admit(ctx, KindInject, host, port, 443, true)
			if ref == nil {
				var mc *meteredConn
				if mc, ref = l.dial(ctx, t); ref == nil {
					return mc, nil
				}
			}
			return nil, ref
		},
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: l.p.o.HandshakeTimeout,
		ForceAttemptHTTP2:   true,
		IdleConnTimeout:     90 * time.Second,
	}
	header := textproto.CanonicalMIMEHeaderKey(in.Header)
	prefix := injectPrefix + in.Name + "/" + l.injectToken
	ij.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// ServeHTTP checked the path (injectPath) before it got here.
			rest, rawRest, _ := injectPath(strings.TrimPrefix(pr.In.URL.EscapedPath(), prefix))
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = base.Host
			pr.Out.URL.Path = base.Path + rest
			pr.Out.URL.RawPath = base.EscapedPath() + rawRest
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			pr.Out.Host = ""
			for _, h := range keyHeaders {
				pr.Out.Header.Del(h)
			}
			pr.Out.Header.Del(header)
			pr.Out.Header[header] = []string{in.ValuePrefix + in.Key}
		},
		Transport: ij.tr,
		// Server-sent events stream through unbuffered.
		FlushInterval: -1,
		ErrorLog:      discardLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var ref *refusal
			if errors.As(err, &ref) {
				writeRefusal(w, ref)
				return
			}
			if r.Context().Err() != nil {
				return
			}
			if why := untrustedCert(err); why != "" {
				l.untrustedUpstream(w, in, host, port, why)
				return
			}
			// The error text never carries header values, so the key
			// cannot leak through it.
			writeRefusal(w, &refusal{status: 502, reason: ReasonUnreachable,
				line: fmt.Sprintf("kusaw: inject %s: %s failed: %s", in.Name, hostPort(host, port), upstreamMsg(err))})
		},
	}
	return ij, nil
}

// authorized reports whether a request path carries the lease's token.
func (ij *injector) authorized(path string) bool {
	rest, ok := strings.CutPrefix(path, ij.prefix)
	return ok && (rest == "" || rest[0] == '/')
}

// ReasonInjectPath refuses an inject URL whose path could leave base_url's
// path on the upstream.
const ReasonInjectPath = "inject.path"

// injectPath checks the rest of an inject URL's path, as the client sent it
// (escaped), after the lease's prefix, and returns it decoded and escaped.
// Only a clean path is forwarded: no "." or ".." segments, encoded or not,
// no encoded separators ("/", "\\") or NUL in a segment, no empty segment
// but a trailing slash. So what follows base_url's path stays below it on
// the upstream, whatever that upstream (or a gateway in front of it)
// decodes or normalises; rule names what was broken.
func injectPath(raw string) (rest, rawRest, rule string) {
	if raw == "" {
		return "", "", ""
	}
	if raw[0] != '/' {
		return "", "", "the path must continue after the base URL with '/'"
	}
	segs := strings.Split(raw[1:], "/")
	dec := make([]string, len(segs))
	for i, seg := range segs {
		d, err := url.PathUnescape(seg)
		switch {
		case err != nil:
			return "", "", "a path segment has a bad %-escape"
		case d == "." || d == "..":
			return "", "", "dot segments (., .., %2e%2e) are not forwarded"
		case strings.ContainsAny(d, "/\\\x00"):
			return "", "", "encoded separators (%2f, %5c) and NUL are not forwarded"
		case d == "" && i != len(segs)-1:
			return "", "", "empty path segments (//) are not forwarded"
		}
		dec[i] = d
	}
	return "/" + strings.Join(dec, "/"), raw, ""
}

// untrustedCert says why a TLS handshake refused the upstream's
// certificate ("" when err is no such refusal).
func untrustedCert(err error) string {
	var unknown x509.UnknownAuthorityError
	var name x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknown):
		return "its certificate is signed by an authority kusaw's proxy does not trust"
	case errors.As(err, &name):
		return "its certificate does not name it (" + sanitize(name.Error()) + ")"
	case errors.As(err, &invalid):
		return "its certificate is not valid (" + sanitize(invalid.Error()) + ")"
	case errors.As(err, &verify):
		return "its certificate could not be verified (" + sanitize(verify.Err.Error()) + ")"
	}
	return ""
}

// untrustedStatus is the status of an inject request whose upstream's
// certificate was refused: a 4xx, which the agent CLIs' API clients do not
// retry (they retry 408, 409, 429 and 5xx: a 502 cost ten retries and
// three minutes), with X-Should-Retry: false, which Anthropic's and
// OpenAI's SDKs obey before the status. 495 is nginx's "SSL Certificate
// Error".
const untrustedStatus = 495

// untrustedUpstream answers an inject request whose upstream's
// certificate was refused so that the client stops, and records the
// failure (the attempt's last line names the cause and the CA setting).
func (l *Lease) untrustedUpstream(w http.ResponseWriter, in Inject, host string, port int, why string) {
	fix := "give the upstream a certificate from a CA the system trusts"
	if in.CAKey != "" {
		fix = "set " + in.CAKey + " to the PEM file of the CA that signed it"
	}
	line := fmt.Sprintf("kusaw: inject %s: %s refused: %s; %s", in.Name, hostPort(host, port), why, fix)
	l.record(Decision{Time: time.Now(), Kind: KindInject, Host: host, Port: port, Decision: Fail, Reason: ReasonUpstreamTLS, Detail: line})
	body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": "kusaw_upstream_untrusted", "message": line}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Should-Retry", "false")
	w.Header().Set("X-Kusaw-Reason", ReasonUpstreamTLS)
	w.WriteHeader(untrustedStatus)
	w.Write(body)
}
