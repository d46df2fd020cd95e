// Command egressclient is the e2e suite's Go client inside the sandbox. It
// takes the proxy from HTTPS_PROXY explicitly (Go's ProxyFromEnvironment
// skips loopback names) and prints one line per check.
//
//	egressclient get URL CAFILE              GET through the proxy; prints the status and body
//	egressclient sni HOST:PORT NAME CAFILE   CONNECT to HOST:PORT, then a ClientHello naming NAME
//	egressclient ws URL                      WebSocket-style upgrade over plain HTTP, one echo
//	egressclient exact N COUNT HTTPURL TLSHOST:PORT CAFILE   read exactly N bytes, COUNT times each way
//	egressclient bench HOST:PORT SECONDS NAME [direct]        CONNECT set-up latency and throughput
//	egressclient raw HOST:PORT LINE [direct]  send LINE over raw TCP (through a CONNECT, or straight) and print the answer line
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: egressclient get|sni|ws|exact|bench ...")
	}
	switch os.Args[1] {
	case "get":
		get(os.Args[2], os.Args[3])
	case "sni":
		sni(os.Args[2], os.Args[3], os.Args[4])
	case "ws":
		ws(os.Args[2])
	case "exact":
		n, _ := strconv.Atoi(os.Args[2])
		count, _ := strconv.Atoi(os.Args[3])
		exact(n, count, os.Args[4], os.Args[5], os.Args[6])
	case "raw":
		raw(os.Args[2], os.Args[3], len(os.Args) > 4 && os.Args[4] == "direct")
	case "bench":
		secs, _ := strconv.ParseFloat(os.Args[3], 64)
		bench(os.Args[2], time.Duration(secs*float64(time.Second)), os.Args[4], len(os.Args) > 5 && os.Args[5] == "direct")
	default:
		fail("unknown mode " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "egressclient:", msg)
	os.Exit(1)
}

func proxyURL() *url.URL {
	p := os.Getenv("HTTPS_PROXY")
	if p == "" {
		fail("HTTPS_PROXY is not set")
	}
	u, err := url.Parse(p)
	if err != nil {
		fail(err.Error())
	}
	return u
}

func pool(caFile string) *x509.CertPool {
	b, err := os.ReadFile(caFile)
	if err != nil {
		fail(err.Error())
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(b)
	return p
}

func get(u, caFile string) {
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL()), TLSClientConfig: &tls.Config{RootCAs: pool(caFile)}}}
	resp, err := c.Get(u)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status: %d\nbody: %s\n", resp.StatusCode, strings.TrimSpace(string(b)))
}

// connect opens a CONNECT tunnel through the proxy.
func connect(target string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxyURL().Host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %s", resp.Status)
	}
	if br.Buffered() > 0 {
		c.Close()
		return nil, fmt.Errorf("CONNECT: early bytes")
	}
	return c, nil
}

func sni(target, name, caFile string) {
	c, err := connect(target)
	if err != nil {
		fmt.Println("connect error:", err)
		os.Exit(3)
	}
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: pool(caFile)})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		fmt.Println("handshake error:", err)
		os.Exit(4)
	}
	fmt.Println("handshake ok")
}

func raw(target, line string, direct bool) {
	var c net.Conn
	var err error
	if direct {
		c, err = net.DialTimeout("tcp", target, 10*time.Second)
	} else {
		c, err = connect(target)
	}
	if err != nil {
		fmt.Println("connect error:", err)
		os.Exit(3)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(c, line)
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println("read error:", err)
		os.Exit(4)
	}
	fmt.Print("answer: ", got)
}

func ws(u string) {
	pu, _ := url.Parse(u)
	c, err := net.DialTimeout("tcp", proxyURL().Host, 10*time.Second)
	if err != nil {
		fail(err.Error())
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", u, pu.Host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		fail(err.Error())
	}
	fmt.Println("status:", resp.StatusCode)
	if resp.StatusCode != 101 {
		os.Exit(3)
	}
	msg := "ping through the proxy"
	fmt.Fprint(c, msg)
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(br, buf); err != nil {
		fail(err.Error())
	}
	fmt.Println("echo:", string(buf))
}

// exact reads an upstream that sends exactly n bytes and closes, over
// plain HTTP and over CONNECT with TLS, count times each.
func exact(n, count int, httpURL, tlsTarget, caFile string) {
	px := proxyURL()
	host, _, _ := net.SplitHostPort(tlsTarget)
	cfg := &tls.Config{ServerName: host, RootCAs: pool(caFile)}
	bad := 0
	for i := 0; i < count; i++ {
		// Plain HTTP: the upstream answers HTTP/1.0 without a length.
		c, err := net.DialTimeout("tcp", px.Host, 10*time.Second)
		if err != nil {
			fail(err.Error())
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", httpURL, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		got := int64(-1)
		if err == nil {
			got, _ = io.Copy(io.Discard, resp.Body)
		}
		c.Close()
		if got != int64(n) {
			fmt.Printf("http %d: got %d bytes, want %d (%v)\n", i, got, n, err)
			bad++
		}
		tc, err := connect(tlsTarget)
		if err != nil {
			fail(err.Error())
		}
		t := tls.Client(tc, cfg)
		got, err = io.Copy(io.Discard, t)
		t.Close()
		if got != int64(n) {
			fmt.Printf("connect %d: got %d bytes, want %d (%v)\n", i, got, n, err)
			bad++
		}
	}
	fmt.Printf("exact: %d rounds of %d bytes, %d wrong\n", count, n, bad)
	if bad > 0 {
		os.Exit(5)
	}
}

// clientHello returns the first TLS record a client naming name sends:
// the proxy checks a tunnel's SNI, so the benchmark opens each tunnel
// with a real ClientHello and then streams raw bytes.
func clientHello(name string) []byte {
	a, b := net.Pipe()
	go func() {
		tls.Client(a, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
		a.Close()
	}()
	var hdr [5]byte
	if _, err := io.ReadFull(b, hdr[:]); err != nil {
		fail(err.Error())
	}
	rec := make([]byte, 5+int(hdr[3])<<8|int(hdr[4]))
	copy(rec, hdr[:])
	if _, err := io.ReadFull(b, rec[5:]); err != nil {
		fail(err.Error())
	}
	b.Close()
	return rec
}

// bench measures CONNECT set-up (dial, CONNECT, ClientHello, one byte
// back) and download throughput to target, through the proxy or, with
// direct, straight to it. The upstream answers the hello with one byte,
// then closes on 'c' or streams on 's'.
func bench(target string, d time.Duration, name string, direct bool) {
	hello := clientHello(name)
	open := func() (net.Conn, error) {
		var c net.Conn
		var err error
		if direct {
			c, err = net.DialTimeout("tcp", target, 10*time.Second)
		} else {
			c, err = connect(name + target[strings.LastIndexByte(target, ':'):])
		}
		if err != nil {
			return nil, err
		}
		c.Write(hello)
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	var lat []time.Duration
	deadline := time.Now().Add(d / 2)
	for time.Now().Before(deadline) || len(lat) < 50 {
		start := time.Now()
		c, err := open()
		if err != nil {
			fail(err.Error())
		}
		lat = append(lat, time.Since(start))
		c.Write([]byte{'c'})
		c.Close()
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	down := stream(open, d/4, false)
	up := stream(open, d/4, true)
	out := map[string]any{"p50_us": float64(lat[len(lat)/2].Nanoseconds()) / 1e3, "p99_us": float64(lat[len(lat)*99/100].Nanoseconds()) / 1e3,
		"samples": len(lat), "mib_per_s": down, "up_mib_per_s": up}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

// stream moves bytes through one tunnel for d: the upstream sends
// (download), or, with up, the client sends and the upstream discards.
func stream(open func() (net.Conn, error), d time.Duration, up bool) float64 {
	c, err := open()
	if err != nil {
		fail(err.Error())
	}
	defer c.Close()
	buf := make([]byte, 256<<10)
	var total int64
	start := time.Now()
	end := start.Add(d)
	if up {
		c.Write([]byte{'u'})
	} else {
		c.Write([]byte{'s'})
	}
	for time.Now().Before(end) {
		var n int
		var err error
		if up {
			n, err = c.Write(buf)
		} else {
			n, err = c.Read(buf)
		}
		total += int64(n)
		if err != nil {
			break
		}
	}
	return float64(total) / time.Since(start).Seconds() / (1 << 20)
}
