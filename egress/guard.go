package egress

import (
	"net/netip"
)

// addrRange is one block of addresses the proxy will not dial. never marks
// blocks that allow_ranges cannot open: link-local (where instance
// metadata lives), metadata addresses, unspecified and multicast.
type addrRange struct {
	prefix netip.Prefix
	what   string
	never  bool
}

var refusedRanges = func() []addrRange {
	list := []struct {
		p, what string
		never   bool
	}{
		// Metadata first, so the reason names it rather than its wider block.
		{"169.254.169.254/32", "a cloud metadata address", true},
		{"169.254.170.2/32", "a cloud metadata address", true},
		{"168.63.129.16/32", "a cloud metadata address (Azure)", true},
		{"100.100.100.200/32", "a cloud metadata address (Alibaba)", true},
		{"fd00:ec2::254/128", "a cloud metadata address (AWS)", true},
		{"0.0.0.0/8", "an unspecified address", true},
		{"10.0.0.0/8", "a private address", false},
		{"100.64.0.0/10", "a carrier-grade NAT address", false},
		{"127.0.0.0/8", "a loopback address", false},
		{"169.254.0.0/16", "a link-local address", true},
		{"172.16.0.0/12", "a private address", false},
		{"192.0.0.0/24", "a reserved address", false},
		{"192.0.2.0/24", "a documentation address", false},
		{"192.88.99.0/24", "a 6to4 relay address", false},
		{"192.168.0.0/16", "a private address", false},
		{"198.18.0.0/15", "a benchmarking address", false},
		{"198.51.100.0/24", "a documentation address", false},
		{"203.0.113.0/24", "a documentation address", false},
		{"224.0.0.0/4", "a multicast address", true},
		{"240.0.0.0/4", "a reserved address", false},
		{"::/128", "an unspecified address", true},
		{"::1/128", "a loopback address", false},
		{"::/96", "an IPv4-compatible address", false},
		{"64:ff9b::/96", "a NAT64 address", false},
		{"64:ff9b:1::/48", "a NAT64 address", false},
		{"100::/64", "a discard address", false},
		{"2001::/32", "a Teredo address", false},
		{"2001:2::/48", "a benchmarking address", false},
		{"2001:db8::/32", "a documentation address", false},
		{"2001:10::/28", "a reserved address", false},
		{"2001:20::/28", "a reserved address", false},
		{"2002::/16", "a 6to4 address", false},
		{"3fff::/20", "a documentation address", false},
		{"fc00::/7", "a unique local address", false},
		{"fe80::/10", "a link-local address", true},
		{"fec0::/10", "a site-local address", false},
		{"ff00::/8", "a multicast address", true},
	}
	out := make([]addrRange, len(list))
	for i, r := range list {
		out[i] = addrRange{netip.MustParsePrefix(r.p), r.what, r.never}
	}
	return out
}()

var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// checkAddr says whether the proxy may dial a. It returns "" when it may,
// else what kind of address it is. An address in allow keeps being refused
// if it is link-local, metadata, unspecified or multicast.
func checkAddr(a netip.Addr, allow []netip.Prefix) string {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return "an invalid address"
	}
	for _, r := range refusedRanges {
		if !r.prefix.Contains(a) {
			continue
		}
		if !r.never && inRanges(a, allow) {
			return ""
		}
		return r.what
	}
	if a.Is6() && !globalUnicast6.Contains(a) {
		if inRanges(a, allow) {
			return ""
		}
		return "not a global unicast address"
	}
	return ""
}

func inRanges(a netip.Addr, ranges []netip.Prefix) bool {
	for _, p := range ranges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
