package egress

import (
	"context"
	"crypto/tls"
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
		TLSClientConfig:     &tls.Config{RootCAs: l.c.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: l.p.o.HandshakeTimeout,
		ForceAttemptHTTP2:   true,
		IdleConnTimeout:     90 * time.Second,
	}
	header := textproto.CanonicalMIMEHeaderKey(in.Header)
	prefix := injectPrefix + in.Name + "/" + l.injectToken
	ij.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rest := strings.TrimPrefix(pr.In.URL.Path, prefix)
			if rest != "" && !strings.HasPrefix(rest, "/") {
				rest = "/" + rest
			}
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = base.Host
			pr.Out.URL.Path = base.Path + rest
			pr.Out.URL.RawPath = ""
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
