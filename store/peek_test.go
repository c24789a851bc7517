package store

import "time"

// peek reports host's pressure drained to now without changing it; ok is
// false when Redis does not know the host.
func (s *Redis) peek(host string, now time.Time) (pressure int, ok bool, err error) {
	v, err := s.run(host, now, "p", settingOf(s.cfg), noArgs)
	if err != nil {
		return 0, false, err
	}
	if v[2] < 0 {
		return 0, false, nil
	}
	return int(v[2]), true, nil
}
