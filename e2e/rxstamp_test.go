//go:build e2e && linux

package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// A request reaches a site when its bytes reach the site's host, which
// its kernel stamps as they arrive (SO_TIMESTAMPNS). The web server's own
// reading of it comes later, later still when its process waits for a
// CPU: a busy server's log says two requests came closer together than
// they did. The site process records both.

// stampingListener accepts connections whose reads carry the kernel's
// arrival time of what they read.
type stampingListener struct{ net.Listener }

// stamping returns ln as a stampingListener, with SO_TIMESTAMPNS on the
// listening socket itself: the kernel stamps only what arrives while some
// socket asks for stamps, and a client that sends its request as soon as
// it has connected (Lightpanda does) can have it there before Accept
// returns. Accepted sockets inherit the option.
func stamping(ln net.Listener) net.Listener {
	if tl, ok := ln.(*net.TCPListener); ok {
		if rc, err := tl.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
			})
		}
	}
	return stampingListener{ln}
}

func (l stampingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	var serr error
	rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	})
	if serr != nil {
		return c, nil
	}
	return &stampedConn{TCPConn: tc, raw: rc}, nil
}

// stampedConn reads with recvmsg, keeping the kernel's arrival time of
// the last bytes read.
type stampedConn struct {
	*net.TCPConn
	raw    syscall.RawConn
	arrive atomic.Int64 // UnixNano of the last read's bytes, as the kernel stamped them
}

func (c *stampedConn) Read(b []byte) (int, error) {
	oob := make([]byte, syscall.CmsgSpace(int(unsafe.Sizeof(syscall.Timespec{}))))
	var n, oobn int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = syscall.Recvmsg(int(fd), b, oob, 0)
		return rerr != syscall.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 && len(b) > 0 {
		return 0, io.EOF
	}
	if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SO_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(syscall.Timespec{})) {
				ts := (*syscall.Timespec)(unsafe.Pointer(&m.Data[0]))
				c.arrive.Store(ts.Nano())
			}
		}
	}
	return n, nil
}

type connKey struct{}

// withConn puts each connection in its requests' context, for arrivedAt.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// arrivedAt is when the kernel received the request r (its last bytes),
// or zero when unknown.
func arrivedAt(r *http.Request) time.Time {
	if c, ok := r.Context().Value(connKey{}).(*stampedConn); ok {
		if ns := c.arrive.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
	}
	return time.Time{}
}
