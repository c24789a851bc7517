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
)

// ParseBucket reads "host" or "site".
func ParseBucket(s string) (Bucket, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "host":
		return ByHost, nil
	case "site":
		return BySite, nil
	}
	return ByHost, fmt.Errorf("--bucket %q: want host or site", s)
}

func (b Bucket) String() string {
	if b == BySite {
		return "site"
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
