// Package natstest starts, for tests, what a team runs as an existing NATS
// cluster (docs/cluster.md, "An existing NATS cluster"): a nats-server in
// operator mode (decentralized JWT auth) with JetStream, TLS from a CA the
// test makes, on loopback only. It trusts one operator, a system account
// and one account for kusaw with a signing key, like an nsc setup.
package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Cluster is one operator-mode server with the keys around it.
type Cluster struct {
	// Server is the first server; Servers all of them.
	Server  *server.Server
	Servers []*server.Server
	// URL is tls://127.0.0.1:PORT (several, comma-separated, for a cluster).
	URL string
	// CAFile is the CA bundle (PEM) the server's certificate chains to.
	CAFile string
	CAPEM  []byte
	// Account is kusaw's account (its public key); SigningSeed is a
	// signing key of it (SA...), what serve.cluster.signing_key holds.
	Account     string
	SigningSeed string
	// AccountKey is the account's identity key: a test may sign with it
	// to show what the server accepts, or forge with another.
	AccountKey nkeys.KeyPair

	opts []*server.Options // each server's, with the port it got
}

// Stop shuts every server down (an outage); Restart starts them again on
// the same ports with the same stores.
func (c *Cluster) Stop() {
	for _, ns := range c.Servers {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Restart starts the servers Stop shut down.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	for i, o := range c.opts {
		ns, err := server.NewServer(o.Clone())
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("the NATS server did not start again")
		}
		c.Servers[i] = ns
	}
	c.Server = c.Servers[0]
	if len(c.Servers) > 1 {
		waitMetaLeader(t, c.Servers)
	}
}

// Start runs the server in dir until the test ends; it sends only the
// server certificate (not the CA), as a typical deployment does.
func Start(t testing.TB, dir string) *Cluster { return StartCluster(t, dir, 1) }

// StartCluster is StartWith without changes to the account.
func StartCluster(t testing.TB, dir string, n int) *Cluster { return StartWith(t, dir, n, nil) }

// StartWith runs n such servers routed into one NATS cluster with
// clustered JetStream (n > 1), each with its own store under dir. URL
// lists them all, comma-separated; Servers holds each. edit, when set,
// changes kusaw's account before it is signed.
func StartWith(t testing.TB, dir string, n int, edit func(*jwt.AccountClaims)) *Cluster {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	op, err := nkeys.CreateOperator()
	must(err)
	opPub, _ := op.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "test-operator"
	opJWT, err := oc.Encode(op)
	must(err)
	oc, err = jwt.DecodeOperatorClaims(opJWT)
	must(err)

	sys, _ := nkeys.CreateAccount()
	sysPub, _ := sys.PublicKey()
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	sysJWT, err := sc.Encode(op)
	must(err)

	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	sk, _ := nkeys.CreateAccount()
	skPub, _ := sk.PublicKey()
	skSeed, _ := sk.Seed()
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "KUSAW"
	ac.SigningKeys.Add(skPub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	if edit != nil {
		edit(ac)
	}
	accJWT, err := ac.Encode(op)
	must(err)

	caPEM, tc := makeTLS(t)
	caFile := filepath.Join(dir, "nats-ca.pem")
	must(os.MkdirAll(dir, 0o755))
	must(os.WriteFile(caFile, caPEM, 0o644))
	c := &Cluster{CAFile: caFile, CAPEM: caPEM, Account: accPub, SigningSeed: string(skSeed), AccountKey: acc}
	// A route port picked free can be taken by another test's listener
	// before its server binds it (the packages' tests run side by side):
	// that server never gets ready, and the whole cluster starts again on
	// other ports.
	for try := 1; ; try++ {
		// Each try in stores of its own: a server that did not start may
		// have written its cluster's first state.
		err := c.start(dir, fmt.Sprint(try), n, tc, oc, sysPub, sysJWT, accPub, accJWT)
		if err == nil {
			break
		}
		if try == 3 {
			t.Fatalf("%v (3 tries, each on other route ports)", err)
		}
		t.Logf("%v; again on other route ports", err)
	}
	t.Cleanup(c.Stop)
	c.Server = c.Servers[0]
	if n > 1 {
		waitMetaLeader(t, c.Servers)
	}
	return c
}

// start starts the n servers, each ready for connections; on an error
// none is left running.
func (c *Cluster) start(dir, store string, n int, tc *tls.Config, oc *jwt.OperatorClaims, sysPub, sysJWT, accPub, accJWT string) error {
	c.Servers, c.opts = nil, nil
	var routes []*url.URL
	if n > 1 {
		for range n {
			host, err := freePort()
			if err != nil {
				return err
			}
			routes = append(routes, &url.URL{Scheme: "nats", Host: host})
		}
	}
	var urls []string
	for i := range n {
		res := &server.MemAccResolver{}
		if err := errors.Join(res.Store(sysPub, sysJWT), res.Store(accPub, accJWT)); err != nil {
			return err
		}
		opts := &server.Options{ServerName: fmt.Sprintf("nats-test-%d", i), Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
			TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: res, SystemAccount: sysPub,
			JetStream: true, StoreDir: filepath.Join(dir, "jetstream", store, fmt.Sprint(i)), MaxPayload: 8 << 20,
			TLS: true, TLSConfig: tc, TLSTimeout: 5}
		if n > 1 {
			h, p, _ := net.SplitHostPort(routes[i].Host)
			opts.Cluster = server.ClusterOpts{Name: "nats-test", Host: h}
			opts.Cluster.Port, _ = strconv.Atoi(p)
			opts.Routes = routes
		}
		kept := opts.Clone() // the server fills in what it derives
		ns, err := server.NewServer(opts)
		if err != nil {
			c.Stop()
			return err
		}
		go ns.Start()
		c.Servers = append(c.Servers, ns)
		if !ns.ReadyForConnections(10 * time.Second) {
			c.Stop()
			return fmt.Errorf("the operator-mode NATS server %d of %d did not start", i+1, n)
		}
		urls = append(urls, "tls://"+ns.Addr().String())
		kept.Port = ns.Addr().(*net.TCPAddr).Port
		c.opts = append(c.opts, kept)
	}
	c.URL = strings.Join(urls, ",")
	return nil
}

// freePort is a loopback host:port nothing listens on now.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitMetaLeader waits until the servers agree on a JetStream leader.
func waitMetaLeader(t testing.TB, servers []*server.Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the NATS cluster elected no JetStream leader in 30s")
}

// makeTLS makes a CA and a server certificate for 127.0.0.1 and localhost.
func makeTLS(t testing.TB) ([]byte, *tls.Config) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nats test CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	lt := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats test server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	der, err := x509.CreateCertificate(rand.Reader, lt, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}
