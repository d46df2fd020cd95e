package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Suggestion is one allow entry a run needed: a host the allowlist lacked,
// admitted by audit mode (with what went to and from it) or refused by
// allowlist mode (Refused counts those connections).
type Suggestion struct {
	Entry       string `json:"entry"` // ready to paste under allow:
	Host        string `json:"host"`
	Port        int    `json:"port"`
	Connections int    `json:"connections"`
	BytesUp     int64  `json:"bytes_up"`
	BytesDown   int64  `json:"bytes_down"`
	Refused     int    `json:"refused,omitempty"`
}

// EgressSuggest reads egress.log contents and lists the entries of every
// would_refuse decision (network: audit), with the bytes of the
// connections audit mode admitted to that host and port, and of every
// refusal an allow entry would have admitted (network: allowlist; not the
// refusals no entry lifts: a metadata address, an IP literal, a private
// address). Sorted by entry.
func EgressSuggest(logs ...[]byte) []Suggestion {
	// Bytes are reported when a connection ends, after its would_refuse
	// line: collect both by entry, then keep the would_refuse ones.
	would := map[string]bool{}
	by := map[string]*Suggestion{}
	for _, log := range logs {
		sc := bufio.NewScanner(bytes.NewReader(log))
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			host, _ := field(m, "host").(string)
			port := int(num(field(m, "port")))
			if host == "" || port == 0 {
				continue
			}
			e := entryFor(host, port, fmt.Sprint(field(m, "kind")))
			s := by[e]
			if s == nil {
				s = &Suggestion{Entry: e, Host: host, Port: port}
				by[e] = s
			}
			switch fmt.Sprint(field(m, "decision")) {
			case "would_refuse":
				would[e] = true
			case "refuse":
				switch field(m, "reason") {
				case "host.not_allowed", "host.port_not_allowed", "local.port_not_allowed":
					would[e] = true
					s.Refused++
				}
			case "allow", "close":
				s.Connections++
				s.BytesUp += num(field(m, "bytes_up"))
				s.BytesDown += num(field(m, "bytes_down"))
			}
		}
	}
	out := []Suggestion{}
	for e := range would {
		out = append(out, *by[e])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Entry < out[j].Entry })
	return out
}

// entryFor writes host:port the way an allow entry says it: the port
// only when it is not the default of the request's kind (443 for a
// tunnel, 80 for plain HTTP).
func entryFor(host string, port int, kind string) string {
	def := 443
	if kind == "http" || kind == "websocket" {
		def = 80
	}
	if port == def {
		return host
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return fmt.Sprintf("%s:%d", host, port)
}
