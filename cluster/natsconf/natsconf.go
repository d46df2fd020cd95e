// Package natsconf writes what an operator needs to run kusaw on NATS
// servers of their own (docs/cluster.md, "An existing NATS cluster"),
// without nsc: each server's configuration (TLS, routes, JetStream,
// operator-mode JWT auth with a full resolver), the certificates, the
// operator's and accounts' JWTs, and what serve needs (the URLs, the CA,
// the account and its signing key).
package natsconf

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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/kusaw/kusaw/cluster/enroll"
	"github.com/kusaw/kusaw/cluster/limits"
)

// Options say what to write.
type Options struct {
	// Dir is the folder the files go to; it must not hold a configuration
	// already (new keys would lock out a running cluster).
	Dir string
	// Servers are the client addresses (host:port) as serve and the workers
	// write them in their URLs: each certificate names its host so.
	Servers []string
	// Routes are each server's route address (host:port), in the order of
	// Servers; empty: each server's host, its client port + 2000 (NATS's
	// 4222 and 6222).
	Routes []string
	// Monitor are the monitoring ports (loopback only), in the order of
	// Servers; empty: the client port + 4000 (8222).
	Monitor []int
	// InstallDir is where the files will be on the servers (the paths
	// written into each configuration); empty: Dir.
	InstallDir string
	// StoreDir is the JetStream store's parent (each server's store is
	// StoreDir/<server name>); empty: InstallDir/jetstream.
	StoreDir string
	// MaxFileStore is what each server's JetStream keeps on disk at most;
	// zero: DefaultMaxFileStore.
	MaxFileStore int64
	// CACert and CAKey: the operator's own CA (PEM files) to sign the
	// server certificates with; empty: a new CA.
	CACert, CAKey string
	// Certs and Keys: the operator's own server certificates and keys (PEM
	// files), one per server in the order of Servers, with CACert the CA
	// bundle they chain to. Each must name its server's host.
	Certs, Keys []string
}

// DefaultMaxFileStore is each server's JetStream room by default: kusaw's
// streams (limits.StoreNeeded with one pool, about 5.3 GiB) and two more
// pools' claims and objects.
const DefaultMaxFileStore int64 = 16 << 30

// ClusterName is the NATS cluster's name (cluster.name) in what Write makes.
const ClusterName = "kusaw"

// SigningKeyFile is the file that holds the account signing key's seed,
// what serve.cluster.signing_key must hold in serve's secret store.
const SigningKeyFile = "kusaw-signing.nk"

// OperatorKeyFile holds an operator signing key's seed (SO...), what
// serve.cluster.operator_key holds: serve signs kusaw's account JWT anew
// with it to revoke a retired worker's user key.
const OperatorKeyFile = "operator-signing.nk"

// SystemKeyFile holds a scoped signing key's seed of the system account
// (SA...), what serve.cluster.system_key holds: its users may only look up
// and update kusaw's account JWT (enroll.RevokerPerms), which is how serve
// pushes a revocation to the servers.
const SystemKeyFile = "sys-revoke.nk"

// Result is what serve needs, and what was written.
type Result struct {
	// URLs is serve.cluster.nats_url.
	URLs string
	// Account is serve.cluster.account (the account's public key).
	Account string
	// CAFile is serve.cluster.ca, as on the machine that ran Write.
	CAFile string
	// SigningKeyFile is the path of the signing seed (SA...).
	SigningKeyFile string
	// SystemAccount is serve.cluster.system_account (the system
	// account's public key); OperatorKeyFile and SystemKeyFile the paths
	// of the seeds serve.cluster.operator_key and system_key hold.
	SystemAccount                  string
	OperatorKeyFile, SystemKeyFile string
	// Replicas is serve.cluster.replicas (the number of servers).
	Replicas int
	// Names are the servers' names (server_name), ConfFiles their
	// configurations, in the order of Options.Servers.
	Names     []string
	ConfFiles []string
	// Files are every file written, relative to Dir.
	Files []string
}

type srv struct {
	name, host       string
	port, routePort  int
	routeHost        string
	monitor          int
	certFile, keyFil string // in InstallDir
}

// Write makes the keys, certificates and configurations in o.Dir.
func Write(o Options) (*Result, error) {
	if o.Dir == "" {
		return nil, errors.New("no folder to write the NATS configuration to: give --dir")
	}
	n := len(o.Servers)
	if n != 1 && n != 3 && n != 5 {
		return nil, fmt.Errorf("%d NATS servers: give 1, 3 or 5 (--server HOST:PORT for each; JetStream clustering needs a majority, so 3 or 5 for high availability)", n)
	}
	if len(o.Routes) > 0 && len(o.Routes) != n {
		return nil, fmt.Errorf("%d --route for %d --server: give one route address per server, in the same order, or none", len(o.Routes), n)
	}
	if len(o.Monitor) > 0 && len(o.Monitor) != n {
		return nil, fmt.Errorf("%d --monitor-port for %d --server: give one per server, in the same order, or none", len(o.Monitor), n)
	}
	if (len(o.Certs) > 0 || len(o.Keys) > 0) && (len(o.Certs) != n || len(o.Keys) != n || o.CACert == "") {
		return nil, fmt.Errorf("own certificates: give --cert and --key once per server (%d), in the order of --server, and --ca-cert with the CA bundle they chain to", n)
	}
	if len(o.Certs) > 0 && o.CAKey != "" {
		return nil, errors.New("--ca-key signs new server certificates, --cert brings your own: give one or the other")
	}
	if (o.CACert == "") != (o.CAKey == "") && len(o.Certs) == 0 {
		return nil, errors.New("your own CA: give --ca-cert and --ca-key together (the CA's certificate and its key, PEM)")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	inst := o.InstallDir
	if inst == "" {
		inst = dir
	}
	if !filepath.IsAbs(inst) {
		return nil, fmt.Errorf("--install-dir %s is not an absolute path: name where the files will be on the NATS servers", inst)
	}
	store := o.StoreDir
	if store == "" {
		store = filepath.Join(inst, "jetstream")
	}
	if !filepath.IsAbs(store) {
		return nil, fmt.Errorf("--store-dir %s is not an absolute path", store)
	}
	maxStore := o.MaxFileStore
	if maxStore == 0 {
		maxStore = DefaultMaxFileStore
	}
	if maxStore < limits.StoreNeeded {
		return nil, fmt.Errorf("--max-file-store %d MiB is less than kusaw's streams and one pool's stores take (%d MiB): give at least %dG", maxStore>>20, limits.StoreNeeded>>20, (limits.StoreNeeded>>30)+1)
	}

	var servers []srv
	names := map[string]bool{}
	for i, a := range o.Servers {
		host, port, err := hostPort(a)
		if err != nil {
			return nil, fmt.Errorf("--server %s: %v", a, err)
		}
		s := srv{name: fmt.Sprintf("nats%d", i+1), host: host, port: port, routeHost: host, routePort: port + 2000, monitor: port + 4000}
		if len(o.Routes) > 0 {
			if s.routeHost, s.routePort, err = hostPort(o.Routes[i]); err != nil {
				return nil, fmt.Errorf("--route %s: %v", o.Routes[i], err)
			}
		}
		if len(o.Monitor) > 0 {
			s.monitor = o.Monitor[i]
		}
		for _, p := range []int{s.routePort, s.monitor} {
			if p <= 0 || p > 65535 {
				return nil, fmt.Errorf("server %s: port %d is out of range: give --route and --monitor-port for it", a, p)
			}
		}
		key := net.JoinHostPort(host, strconv.Itoa(port))
		if names[key] {
			return nil, fmt.Errorf("--server %s is given twice", a)
		}
		names[key] = true
		servers = append(servers, s)
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "resolver.conf")); err == nil {
		return nil, fmt.Errorf("%s holds a NATS configuration already: new keys would shut serve and every worker out of a cluster that runs on it; choose another --dir, or remove it first", dir)
	}
	w := &writer{dir: dir}

	// TLS: the CA and a certificate per server naming its hosts (client
	// and route), for both ends of a route (mutual TLS between servers).
	var caPEM []byte
	switch {
	case len(o.Certs) > 0:
		if caPEM, err = os.ReadFile(o.CACert); err != nil {
			return nil, fmt.Errorf("--ca-cert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("--ca-cert %s holds no PEM certificate", o.CACert)
		}
		for i := range servers {
			if err := checkOwnCert(o.Certs[i], o.Keys[i], pool, servers[i]); err != nil {
				return nil, err
			}
			servers[i].certFile, servers[i].keyFil = absOr(o.Certs[i]), absOr(o.Keys[i])
		}
	default:
		var ca *x509.Certificate
		var caKey *ecdsa.PrivateKey
		if o.CACert != "" {
			if ca, caKey, caPEM, err = loadCA(o.CACert, o.CAKey); err != nil {
				return nil, err
			}
		} else {
			if ca, caKey, caPEM, err = newCA(); err != nil {
				return nil, err
			}
			kb, _ := x509.MarshalECPrivateKey(caKey)
			if err := w.file("ca-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
				return nil, err
			}
		}
		for i, s := range servers {
			cert, key, err := serverCert(ca, caKey, s)
			if err != nil {
				return nil, err
			}
			cf, kf := s.name+".pem", s.name+"-key.pem"
			if err := w.file(cf, cert, 0o644); err != nil {
				return nil, err
			}
			if err := w.file(kf, key, 0o600); err != nil {
				return nil, err
			}
			servers[i].certFile, servers[i].keyFil = filepath.Join(inst, cf), filepath.Join(inst, kf)
		}
	}
	if err := w.file("ca.pem", caPEM, 0o644); err != nil {
		return nil, err
	}

	// Operator mode: the operator signs the system account and kusaw's;
	// kusaw's lists a signing key, which serve holds.
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "kusaw-operator"
	// serve's key for signing kusaw's account anew (revocations); the
	// operator's own key stays with whoever ran this.
	osk, _ := nkeys.CreateOperator()
	oskPub, _ := osk.PublicKey()
	oc.SigningKeys.Add(oskPub)
	sys, _ := nkeys.CreateAccount()
	sysPub, _ := sys.PublicKey()
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		return nil, err
	}
	acc, _ := nkeys.CreateAccount()
	accPub, _ := acc.PublicKey()
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	// A scoped key: whatever a user JWT it signs says, the servers give
	// that user only these permissions, so serve's system user can touch
	// kusaw's account JWT and nothing else of the servers.
	ssk, _ := nkeys.CreateAccount()
	sskPub, _ := ssk.PublicKey()
	scope := jwt.NewUserScope()
	scope.Key, scope.Role = sskPub, "kusaw-revoke"
	scope.Description = "kusaw serve: look up and update account " + accPub + " (revocations of retired workers)"
	scope.Template.Permissions = enroll.RevokerPerms(accPub)
	sc.SigningKeys.AddScopedSigner(scope)
	sysJWT, err := sc.Encode(op)
	if err != nil {
		return nil, err
	}
	sk, _ := nkeys.CreateAccount()
	skPub, _ := sk.PublicKey()
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "KUSAW"
	ac.SigningKeys.Add(skPub)
	// The account's disk room counts every copy (replicas), so it is the
	// servers' together; a stream must say how large it grows, as kusaw's
	// all do.
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{DiskStorage: maxStore * int64(n), MemoryStorage: limits.AccountMaxMemory,
		Streams: -1, Consumer: -1, MaxBytesRequired: true}
	accJWT, err := ac.Encode(op)
	if err != nil {
		return nil, err
	}
	// A system user, for looking at the servers (nats --creds sys.creds
	// server report jetstream).
	su, _ := nkeys.CreateUser()
	suPub, _ := su.PublicKey()
	uc := jwt.NewUserClaims(suPub)
	uc.Name = "sys"
	suJWT, err := uc.Encode(sys)
	if err != nil {
		return nil, err
	}
	suSeed, _ := su.Seed()
	creds, err := jwt.FormatUserConfig(suJWT, suSeed)
	if err != nil {
		return nil, err
	}
	opSeed, _ := op.Seed()
	accSeed, _ := acc.Seed()
	sysSeed, _ := sys.Seed()
	skSeed, _ := sk.Seed()
	oskSeed, _ := osk.Seed()
	sskSeed, _ := ssk.Seed()
	for _, f := range []struct {
		name string
		b    []byte
		mode os.FileMode
	}{
		{"operator.jwt", []byte(opJWT + "\n"), 0o644},
		{"operator.nk", append(opSeed, '\n'), 0o600},
		{"sys-account.nk", append(sysSeed, '\n'), 0o600},
		{"kusaw-account.nk", append(accSeed, '\n'), 0o600},
		{SigningKeyFile, append(skSeed, '\n'), 0o600},
		{OperatorKeyFile, append(oskSeed, '\n'), 0o600},
		{SystemKeyFile, append(sskSeed, '\n'), 0o600},
		{"sys.creds", creds, 0o600},
	} {
		if err := w.file(f.name, f.b, f.mode); err != nil {
			return nil, err
		}
	}
	// The resolver itself (a full one, in each server's own folder) is in
	// natsN.conf: a memory resolver forgets an account's update when its
	// server restarts, and a revocation must outlive that.
	resolver := fmt.Sprintf(`# The operator and the accounts it signed, preloaded into each server's
# resolver (written by kusaw cluster nats-config). The same on every server.
operator: %q
system_account: %s
resolver_preload: {
  # SYS
  %s: %q
  # KUSAW: kusaw's account (serve.cluster.account)
  %s: %q
}
`, filepath.Join(inst, "operator.jwt"), sysPub, sysPub, sysJWT, accPub, accJWT)
	if err := w.file("resolver.conf", []byte(resolver), 0o644); err != nil {
		return nil, err
	}

	res := &Result{Account: accPub, CAFile: filepath.Join(dir, "ca.pem"), SigningKeyFile: filepath.Join(dir, SigningKeyFile), Replicas: n,
		SystemAccount: sysPub, OperatorKeyFile: filepath.Join(dir, OperatorKeyFile), SystemKeyFile: filepath.Join(dir, SystemKeyFile)}
	var urls []string
	for i, s := range servers {
		urls = append(urls, "tls://"+net.JoinHostPort(s.host, strconv.Itoa(s.port)))
		conf := serverConf(s, servers, i, inst, store, maxStore)
		f := s.name + ".conf"
		if err := w.file(f, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		res.Names = append(res.Names, s.name)
		res.ConfFiles = append(res.ConfFiles, filepath.Join(dir, f))
	}
	res.URLs = strings.Join(urls, ",")
	if err := w.file("serve-cluster.yaml", []byte(ServeYAML(res, "")), 0o644); err != nil {
		return nil, err
	}
	res.Files = w.files
	return res, nil
}

// ServeYAML is the factory file's serve.cluster block for r; ca is the
// CA file's path on serve's machine ("" : r.CAFile).
func ServeYAML(r *Result, ca string) string {
	if ca == "" {
		ca = r.CAFile
	}
	return fmt.Sprintf(`serve:
  cluster:
    nats_url: %s
    account: %s
    signing_key: {secret: serve.cluster.signing_key}
    ca: %s
    replicas: %d
    system_account: %s
    system_key: {secret: serve.cluster.system_key}
    operator_key: {secret: serve.cluster.operator_key}
`, r.URLs, r.Account, ca, r.Replicas, r.SystemAccount)
}

// serverConf is server i's configuration.
func serverConf(s srv, all []srv, i int, inst, store string, maxStore int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, `# NATS server %s of kusaw's cluster (written by kusaw cluster nats-config).
# Start it with: nats-server -c %s
server_name: %s
host: %q
port: %d
# Monitoring (/healthz, /jsz) on loopback only: it has no authentication.
http: "127.0.0.1:%d"
# kusaw sends an attempt's spec in one message (serve checks this at start).
max_payload: %d

tls {
  cert_file: %q
  key_file: %q
  timeout: 5
}

jetstream {
  store_dir: %q
  max_file_store: %d
  max_memory_store: %d
}

# Accounts' JWTs, kept on disk: an update (serve revoking a retired
# worker's key) outlives a restart, and a server that was down takes it
# from the others within the interval (a retired worker's old JWT gets in
# there until then: keep it short). Nothing may delete an account.
resolver {
  type: full
  dir: %q
  allow_delete: false
  interval: "2s"
}
`, s.name, filepath.Join(inst, s.name+".conf"), s.name, listenHost(s.host), s.port, s.monitor, limits.MaxPayload,
		s.certFile, s.keyFil, filepath.Join(store, s.name), maxStore, limits.AccountMaxMemory, filepath.Join(store, s.name, "jwt"))
	if len(all) > 1 {
		var routes []string
		for j, o := range all {
			if j != i {
				routes = append(routes, fmt.Sprintf("    %q", "nats-route://"+net.JoinHostPort(o.routeHost, strconv.Itoa(o.routePort))))
			}
		}
		// Routes are TLS both ways, each end showing a certificate of the
		// CA: without it anyone who reaches the route port joins the
		// cluster and sees every message.
		fmt.Fprintf(&b, `
cluster {
  name: %s
  host: %q
  port: %d
  tls {
    cert_file: %q
    key_file: %q
    ca_file: %q
    verify: true
    timeout: 5
  }
  routes: [
%s
  ]
}
`, ClusterName, listenHost(s.routeHost), s.routePort, s.certFile, s.keyFil, filepath.Join(inst, "ca.pem"), strings.Join(routes, "\n"))
	}
	fmt.Fprintf(&b, "\ninclude \"resolver.conf\"\n")
	return b.String()
}

// listenHost is the address a server listens on for host: the address
// itself when it is one (loopback stays loopback), else every interface.
func listenHost(host string) string {
	if host == "localhost" {
		return "127.0.0.1"
	}
	if net.ParseIP(host) != nil {
		return host
	}
	return "0.0.0.0"
}

func hostPort(a string) (string, int, error) {
	a = strings.TrimPrefix(strings.TrimPrefix(a, "tls://"), "nats://")
	h, p, err := net.SplitHostPort(a)
	if err != nil || h == "" {
		return "", 0, errors.New("not HOST:PORT (the host as serve and the workers reach it, e.g. nats1.lan:4222)")
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a port number", p)
	}
	return h, port, nil
}

func absOr(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

type writer struct {
	dir   string
	files []string
}

func (w *writer) file(name string, b []byte, mode os.FileMode) error {
	p := filepath.Join(w.dir, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("cannot write %s: %v", p, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	w.files = append(w.files, name)
	return f.Close()
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func newCA() (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "kusaw NATS cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), err
}

func loadCA(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--ca-cert %s with --ca-key %s: %v", certFile, keyFile, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, nil, fmt.Errorf("--ca-key %s is not an ECDSA key: sign the servers' certificates yourself and give them with --cert and --key", keyFile)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, nil, err
	}
	if !ca.IsCA {
		return nil, nil, nil, fmt.Errorf("--ca-cert %s is not a CA certificate", certFile)
	}
	return ca, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), nil
}

// serverCert is s's certificate, naming its client and route hosts as
// written (an IP address as such), for serving and for dialing routes.
func serverCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, s srv) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: s.name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(2, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, h := range []string{s.host, s.routeHost} {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// checkOwnCert refuses an operator's certificate that would fail later:
// not matching its key, not chaining to the CA, or not naming the host.
func checkOwnCert(certFile, keyFile string, pool *x509.CertPool, s srv) error {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("--cert %s with --key %s: %v", certFile, keyFile, err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if ic, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(ic)
		}
	}
	for _, h := range []string{s.host, s.routeHost} {
		if _, err := c.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("--cert %s cannot serve %s: %v (it must chain to --ca-cert and name the host as serve.cluster.nats_url writes it)", certFile, h, err)
		}
	}
	return nil
}
