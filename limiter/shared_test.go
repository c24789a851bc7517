package limiter_test

import (
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/limiter/limitertest"
)

// The rule's tables live in limitertest, so that the Redis store in package
// store is held to exactly the same steps.

func newSubject(_ *testing.T, cfg limiter.Config) limitertest.Subject {
	l := limiter.New(cfg)
	return limitertest.Subject{
		Limiter:    l,
		PressureAt: func(host string, now time.Time) (int, bool) { return limiter.PressureAt(l, host, now) },
	}
}

func TestReserveRule(t *testing.T)            { limitertest.Rule(t, newSubject) }
func TestPressureCapAndDrain(t *testing.T)    { limitertest.PressureCapAndDrain(t, newSubject) }
func TestDrainFromPlateau(t *testing.T)       { limitertest.DrainFromPlateau(t, newSubject) }
func TestDrainWholeSteps(t *testing.T)        { limitertest.DrainWholeSteps(t, newSubject) }
func TestIdleHostStartsFromZero(t *testing.T) { limitertest.IdleHostStartsFromZero(t, newSubject) }
func TestSeedGolden(t *testing.T)             { limitertest.Golden(t, newSubject) }
func TestSettings(t *testing.T)               { limitertest.Settings(t, newSubject) }
func TestPush(t *testing.T)                   { limitertest.Push(t, newSubject) }
func TestSlackAndHeadroom(t *testing.T)       { limitertest.SlackAndHeadroom(t, newSubject) }
func TestJitter(t *testing.T)                 { limitertest.Jitter(t, newSubject) }
func TestServerLimits(t *testing.T)           { limitertest.ServerLimits(t, newSubject) }
