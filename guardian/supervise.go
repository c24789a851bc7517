package guardian

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Supervisor runs the relay as two processes: this one, which does nothing
// but guard (a Guardian on a unix socket in a private directory), and a
// child, the relay itself, told where its guardian is (EnvSocket). The
// child is the one an OOM killer picks (its oom_score_adj is raised), it
// is in a process group of its own (a terminal's Ctrl-C reaches it once,
// through this process), and it is sent SIGTERM if this process dies
// (its own stop then fails closed). Set its fields, then Run.
type Supervisor struct {
	// Path and Args are the relay's command (Args without the program's
	// name); Env is its environment, EnvSocket added.
	Path string
	Args []string
	Env  []string
	// Guardian guards the child's connections.
	Guardian *Guardian
	// Stop, when closed, sends the child SIGTERM (its stop); Hurry, when
	// closed after it, sends it SIGTERM again (the drain ends at once).
	Stop, Hurry <-chan struct{}
}

// ChildExit is Run's error when the relay's process exited with a status
// of its own (a bad start, say), having said why, and the guardian had
// nothing to do: the command exits with Code and says nothing more.
type ChildExit struct{ Code int }

func (e ChildExit) Error() string {
	return fmt.Sprintf("guardian: the relay exited with status %d", e.Code)
}

// oomScoreAdj is the child's /proc/PID/oom_score_adj: the relay, holding
// the crawl's state, is what the OOM killer takes first, so that its
// guardian outlives it.
const oomScoreAdj = 500

// Run starts the child and guards it until it exits, then waits for what
// the guardian took over. It returns nil when the child exited 0, else
// an error saying how it ended and what the guardian did.
func (s *Supervisor) Run() error {
	dir, err := os.MkdirTemp("", "cdp-throttle-guardian-")
	if err != nil {
		return fmt.Errorf("guardian: %w", err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "guardian.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("guardian: %w", err)
	}
	srv := &http.Server{Handler: s.Guardian, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = append(append([]string(nil), s.Env...), EnvSocket+"="+sock)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("guardian: starting the relay: %w", err)
	}
	os.WriteFile("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/oom_score_adj", []byte(strconv.Itoa(oomScoreAdj)), 0) // best effort
	s.Guardian.log().Debug().Int("pid", cmd.Process.Pid).Int("guardian_pid", os.Getpid()).
		Msg("guardian: the relay runs as a child of this process, which answers what it holds if it dies without a stop")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop, hurry := s.Stop, (<-chan struct{})(nil)
	for {
		select {
		case <-stop:
			cmd.Process.Signal(syscall.SIGTERM)
			stop, hurry = nil, s.Hurry
			continue
		case <-hurry:
			cmd.Process.Signal(syscall.SIGTERM)
			hurry = nil
			continue
		case err = <-exited:
		}
		break
	}
	done := make(chan Stats, 1)
	go func() { done <- s.Guardian.Wait() }()
	var st Stats
	select {
	case st = <-done:
	case <-time.After(s.Guardian.linger() + closeWait + time.Second):
	}
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() && st == (Stats{}) {
		return ChildExit{Code: ee.ExitCode()} // it said why itself
	}
	return fmt.Errorf("guardian: the relay's process ended (%v); its guardian answered %d held navigations with the relay's 429 in %d connections and closed %d pages and %d contexts",
		err, st.Answered, st.Connections, st.Pages, st.Contexts)
}
