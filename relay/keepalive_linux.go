package relay

import (
	"golang.org/x/sys/unix"
	"net"
	"time"
)

// setUserTimeout sets TCP_USER_TIMEOUT: data the peer leaves
// unacknowledged for d ends the connection.
func setUserTimeout(tc *net.TCPConn, d time.Duration) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	})
}
