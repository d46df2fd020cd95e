// Package unit writes the user services that run kusaw serve and kusaw
// worker (a systemd user unit on Linux, a launchd agent on macOS). It is
// apart from package serve so that kusaw, which installs them, does not
// link the daemon's code (nats-server, prometheus).
package unit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Unit is a user service that runs kusaw serve for one factory: a
// systemd user unit on Linux, a launchd agent on macOS.
type Unit struct {
	Kind    string   // "systemd" or "launchd"
	Name    string   // unit name or launchd label
	Path    string   // the file to write
	Content string   // its text
	Enable  []string // commands that start it (printed, not run)
	Disable []string // commands that stop it before removal
}

var unsafeName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9_.-]+`) })

// NewServe builds the service of the factory at factoryPath (both
// paths absolute) for goos, under home (and XDG_CONFIG_HOME on Linux).
func NewServe(goos, kusaw, factoryPath, stateDir, home, xdgConfig string) (*Unit, error) {
	if !filepath.IsAbs(kusaw) || !filepath.IsAbs(factoryPath) {
		return nil, fmt.Errorf("service paths must be absolute: %q, %q", kusaw, factoryPath)
	}
	sum := sha256.Sum256([]byte(factoryPath))
	base := unsafeName().ReplaceAllString(filepath.Base(filepath.Dir(factoryPath)), "-")
	id := strings.Trim(base, "-.") + "-" + hex.EncodeToString(sum[:4])
	dir := filepath.Dir(factoryPath)
	switch goos {
	case "linux":
		if xdgConfig == "" {
			xdgConfig = filepath.Join(home, ".config")
		}
		name := "kusaw-" + id + ".service"
		content := fmt.Sprintf(`# Written by kusaw service install: kusaw serve for %s
[Unit]
Description=kusaw serve (%s)

[Service]
Type=simple
WorkingDirectory=%s
ExecStart=%s serve -f %s
KillSignal=SIGTERM
# serve gives running attempts 30s, then interrupts them (SIGTERM, SIGKILL
# after the kill grace) and records them: give it time before SIGKILL.
TimeoutStopSec=60
Restart=on-failure
RestartSec=2

[Install]
WantedBy=default.target
`, factoryPath, factoryPath, strings.ReplaceAll(dir, "%", "%%"), systemdQuote(kusaw), systemdQuote(factoryPath))
		return &Unit{Kind: "systemd", Name: name, Path: filepath.Join(xdgConfig, "systemd", "user", name), Content: content,
			Enable:  []string{"systemctl --user daemon-reload", "systemctl --user enable --now " + name},
			Disable: []string{"systemctl --user disable --now " + name, "systemctl --user daemon-reload"}}, nil
	case "darwin":
		label := "dev.kusaw.serve." + id
		content := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by kusaw service install: kusaw serve for %s -->
<plist version="1.0">
<dict>
  <key>Label</key><string>%s</string>
  <key>ProgramArguments</key>
  <array><string>%s</string><string>serve</string><string>-f</string><string>%s</string></array>
  <key>WorkingDirectory</key><string>%s</string>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
  <key>ExitTimeOut</key><integer>60</integer>
  <key>StandardErrorPath</key><string>%s</string>
</dict>
</plist>
`, xmlText(factoryPath), label, xmlText(kusaw), xmlText(factoryPath), xmlText(dir), xmlText(filepath.Join(stateDir, "serve.log")))
		p := filepath.Join(home, "Library", "LaunchAgents", label+".plist")
		return &Unit{Kind: "launchd", Name: label, Path: p, Content: content,
			Enable:  []string{"launchctl bootstrap gui/$(id -u) " + p},
			Disable: []string{"launchctl bootout gui/$(id -u)/" + label}}, nil
	}
	return nil, fmt.Errorf("kusaw service install supports Linux (systemd) and macOS (launchd), not %s; run kusaw serve under your own supervisor", goos)
}

// NewWorker builds the service that runs kusaw worker with its
// state folder (absolute) for goos. Its stop drains: SIGTERM goes to the
// worker alone (the attempts' processes go on while it drains), and the
// service manager waits drainTimeout and a minute more before it kills
// what is left.
func NewWorker(goos, kusaw, stateDir, home, xdgConfig string, drainTimeout time.Duration) (*Unit, error) {
	if !filepath.IsAbs(kusaw) || !filepath.IsAbs(stateDir) {
		return nil, fmt.Errorf("service paths must be absolute: %q, %q", kusaw, stateDir)
	}
	sum := sha256.Sum256([]byte(stateDir))
	id := hex.EncodeToString(sum[:4])
	stop := int((drainTimeout + time.Minute).Seconds())
	switch goos {
	case "linux":
		if xdgConfig == "" {
			xdgConfig = filepath.Join(home, ".config")
		}
		name := "kusaw-worker-" + id + ".service"
		content := fmt.Sprintf(`# Written by kusaw service install --worker: kusaw worker for %s
[Unit]
Description=kusaw worker (%s)
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
ExecStart=%s worker --state-dir %s
# A stop drains: SIGTERM to the worker only (KillMode=mixed), whose running
# attempts may finish within worker.drain_timeout (%s) before they go back
# to serve; SIGKILL to all only after that and a minute more.
KillMode=mixed
KillSignal=SIGTERM
TimeoutStopSec=%d
Restart=on-failure
RestartSec=2

[Install]
WantedBy=default.target
`, stateDir, stateDir, systemdQuote(kusaw), systemdQuote(stateDir), drainTimeout, stop)
		return &Unit{Kind: "systemd", Name: name, Path: filepath.Join(xdgConfig, "systemd", "user", name), Content: content,
			Enable:  []string{"systemctl --user daemon-reload", "systemctl --user enable --now " + name},
			Disable: []string{"systemctl --user disable --now " + name, "systemctl --user daemon-reload"}}, nil
	case "darwin":
		label := "dev.kusaw.worker." + id
		content := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by kusaw service install --worker: kusaw worker for %s -->
<plist version="1.0">
<dict>
  <key>Label</key><string>%s</string>
  <key>ProgramArguments</key>
  <array><string>%s</string><string>worker</string><string>--state-dir</string><string>%s</string></array>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
  <key>ExitTimeOut</key><integer>%d</integer>
  <key>StandardErrorPath</key><string>%s</string>
</dict>
</plist>
`, xmlText(stateDir), label, xmlText(kusaw), xmlText(stateDir), stop, xmlText(filepath.Join(stateDir, "worker.log")))
		p := filepath.Join(home, "Library", "LaunchAgents", label+".plist")
		return &Unit{Kind: "launchd", Name: label, Path: p, Content: content,
			Enable:  []string{"launchctl bootstrap gui/$(id -u) " + p},
			Disable: []string{"launchctl bootout gui/$(id -u)/" + label}}, nil
	}
	return nil, fmt.Errorf("kusaw service install --worker supports Linux (systemd) and macOS (launchd), not %s; run kusaw worker under your own supervisor, stopping it with SIGTERM", goos)
}

// systemdQuote quotes a path for a unit file's command line.
func systemdQuote(s string) string {
	if !strings.ContainsAny(s, " \t\"'\\%$") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `%`, `%%`, `$`, `$$`)
	return `"` + r.Replace(s) + `"`
}

func xmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Write writes the unit (0644) and its folder.
func (u *Unit) Write() error {
	if err := os.MkdirAll(filepath.Dir(u.Path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(u.Path, []byte(u.Content), 0o644)
}
