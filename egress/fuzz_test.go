package egress

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
)

// FuzzRequestParsing feeds raw bytes to the request reader and the
// proxy's classification: never a panic, and every target it accepts has
// a host and a port in range.
func FuzzRequestParsing(f *testing.F) {
	for _, s := range []string{
		"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
		"CONNECT allowed.test HTTP/1.1\r\n\r\n",
		"CONNECT allowed.test:0x1bb HTTP/1.1\r\n\r\n",
		"GET http://allowed.test/x HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"GET http://allowed.test:8080/ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"GET https://allowed.test/ HTTP/1.1\r\n\r\n",
		"POST /_kusaw/inject/claude-code/v1/messages HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n\r\n",
		"GET http://127.0.0.1:3128/_kusaw/inject/p/v1 HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		rc := classify(r, "127.0.0.1:3128")
		switch rc.kind {
		case KindConnect, KindHTTP, KindWebSocket:
			if rc.host == "" || rc.port < 1 || rc.port > 65535 || rc.bad != "" {
				t.Fatalf("accepted %+v", rc)
			}
			// What admit does first must not panic either, and an IP
			// literal never normalises to a name.
			if h, err := config.NormalizeHostName(rc.host); err == nil && (strings.Contains(h, ":") || h == "") {
				t.Fatalf("normalised %q to %q", rc.host, h)
			}
		case KindInject:
			if rc.inject == "" {
				t.Fatalf("inject without a name: %+v", rc)
			}
		case "":
			if rc.bad == "" || strings.ContainsAny(rc.bad, "\r\n") {
				t.Fatalf("bad request without a one-line reason: %+v", rc)
			}
		default:
			t.Fatalf("unknown kind %+v", rc)
		}
	})
}

// FuzzReadClientHello: the SNI reader never panics, forwards exactly the
// bytes it consumed, and a name it returns came from the input.
func FuzzReadClientHello(f *testing.F) {
	rec := captureHello(f, "allowed.test")
	f.Add(rec)
	f.Add(fragment(rec, 1))
	f.Add(fragment(rec, 100))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		raw, sni, err := readClientHello(bytes.NewReader(b))
		if err != nil {
			return
		}
		if !bytes.HasPrefix(b, raw) {
			t.Fatal("the bytes to forward are not what was read")
		}
		var payload []byte
		for r := raw; len(r) >= 5; {
			n := int(r[3])<<8 | int(r[4])
			payload = append(payload, r[5:5+n]...)
			r = r[5+n:]
		}
		if sni != "" && !bytes.Contains(payload, []byte(sni)) {
			t.Fatalf("SNI %q is not in the handshake", sni)
		}
	})
}
