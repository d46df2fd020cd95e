// Package egress is kusaw's allowlist proxy: host matching, the address
// guard, per-attempt leases, the in-namespace bridge, key injection and the
// per-decision egress log.
//
// One Proxy per process (serve, or kusaw run without serve); one Lease per
// attempt with network: allowlist. Wiring for Linux (bwrap without
// --share-net):
//
//	p, _ := egress.NewProxy(egress.Options{Resolver: cfg.Egress.Resolver})
//	l, err := p.Lease(egress.LeaseConfig{
//		ID: attemptID, SocketDir: shortPrivateDir, // path+"/egress.sock" <= 107 bytes
//		Allow: rules, AllowRanges: ranges, Budgets: budgets, Inject: injects,
//		PolicyKey: "steps.test.sandbox.egress.allow", Observer: obs,
//	})
//	// plan: ro-bind filepath.Dir(l.SocketPath()); env += l.Env();
//	// argv = l.BridgeArgv(kusawExe) + stepArgv, run under bwrap.
//	// after the process: !l.HandedOver() means the bridge failed
//	// (status.ReasonEgressBridgeFailed) and the step never ran.
//	summary := l.Close()
//
// On macOS set LeaseConfig.Listen = "127.0.0.1:0" instead of SocketDir: the
// lease listens itself and ListenAddr is the port the Seatbelt profile
// admits.
//
// What the proxy serves on a lease's listener: CONNECT host:port (a TLS
// tunnel whose ClientHello must name the host; plain HTTP only to port 80,
// request by request), absolute-form http:// requests and WebSocket
// upgrades (through httputil.ReverseProxy), and the inject endpoints
// /_kusaw/inject/<name>/..., which the step reaches directly because
// NO_PROXY covers 127.0.0.1.
//
// Every connection and refusal is one Decision to the lease's Observer;
// Close returns the per-host Summary. Budgets count bytes sent upstream,
// on the wire.
package egress
