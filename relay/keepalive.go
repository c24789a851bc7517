package relay

import (
	"net"
	"time"
)

// Keepalive finds a peer whose host is gone without asking it for
// anything a browser would not: TCP keepalive probes after
// keepaliveIdle of silence, every keepaliveInterval, and the connection
// closed after keepaliveCount unanswered, keepaliveIdle +
// keepaliveCount × keepaliveInterval (30 s) after the peer was last
// heard; userTimeout closes one whose data goes unacknowledged that
// long, when keepalive, which waits while data is unacknowledged, would
// not.
const (
	keepaliveIdle     = 15 * time.Second
	keepaliveInterval = 5 * time.Second
	keepaliveCount    = 3
	userTimeout       = keepaliveIdle + keepaliveCount*keepaliveInterval
)

// keepAlive sets up keepalive and the user timeout on nc, when it is a
// TCP connection.
func keepAlive(nc net.Conn) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepaliveIdle, Interval: keepaliveInterval, Count: keepaliveCount})
	setUserTimeout(tc, userTimeout)
}
