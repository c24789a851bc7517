//go:build !linux

package relay

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not known:
// keepalive alone finds an idle peer gone, the write timeout one that
// stops reading.
func setUserTimeout(*net.TCPConn, time.Duration) {}
