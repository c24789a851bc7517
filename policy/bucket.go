package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// Bucket chooses which hosts share one schedule.
type Bucket int

const (
	// ByHost gives every host a schedule of its own (the default).
	ByHost Bucket = iota
	// BySite gives all the hosts of one registrable domain (eTLD+1 from
	// the public suffix list) one schedule: www.example.com,
	// static.example.com and example.com share one, a.github.io and
	// b.github.io do not.
	BySite
	// ByIP gives all the hosts on one server address one schedule (and one
	// cap on navigations in flight): the address the browser connected to,
	// or the resolver gives, as package resolve learns it; a host whose
	// address is not known yet is its own bucket meanwhile.
	ByIP
)

// ParseBucket reads "host", "site" or "ip".
func ParseBucket(s string) (Bucket, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "host":
		return ByHost, nil
	case "site":
		return BySite, nil
	case "ip":
		return ByIP, nil
	}
	return ByHost, fmt.Errorf("--bucket %q: want host, site or ip", s)
}

func (b Bucket) String() string {
	switch b {
	case BySite:
		return "site"
	case ByIP:
		return "ip"
	}
	return "host"
}

// Site returns the registrable domain of host (a bucket as limiter.Key
// returns it, so lower-case and punycode): its public suffix and one label
// more. An IP address, a single-label name and a host that is itself a
// public suffix (github.io, co.uk) are their own site.
func Site(host string) string {
	if host == "" || host[0] == '[' || !strings.Contains(host, ".") {
		return host
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return host
	}
	site, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil {
		return host
	}
	return site
}
