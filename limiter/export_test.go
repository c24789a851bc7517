package limiter

// PressureAt exposes pressureAt to the tests of package limiter_test.
var PressureAt = pressureAt
