-- The places of one bucket's navigations in flight, for every relay that
-- shares this Redis (inflight.Table). Each place is a lease: a member of
-- a sorted set whose score is when it expires, in microseconds. Its relay
-- renews it while the navigation is in flight; a relay that dies stops
-- renewing, and its leases expire, so it holds no place for long.
--
-- KEYS[1]  the bucket's leases.
-- ARGV[1]  'enter', 'leave', 'renew' or 'count'.
-- ARGV[2]  now, or '' to read the server's clock. Only tests pass it.
-- ARGV[3]  how long a lease lives unless renewed.
-- ARGV[4]  enter: the cap.
-- ARGV[5…] the leases: one for enter and leave, any number for renew.
-- Returns {1 when the lease was taken (enter), the places taken now}.

local MARGIN_MS = {{MARGIN_MS}}
{{CLOCK}}

local key, op = KEYS[1], ARGV[1]
local now = clock(ARGV[2])
local ttl = tonumber(ARGV[3])
local expires = string.format('%d', now + ttl)

-- Leases that ran out are no places.
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))

-- keep lets Redis forget the key once its last lease has run out.
local function keep()
  redis.call('PEXPIRE', key, string.format('%d', math.ceil(ttl / 1000) + MARGIN_MS))
end

if op == 'enter' then
  local n = redis.call('ZCARD', key)
  if n < tonumber(ARGV[4]) then
    redis.call('ZADD', key, expires, ARGV[5])
    keep()
    return {1, n + 1}
  end
  return {0, n}
end

if op == 'leave' then
  redis.call('ZREM', key, ARGV[5])
  return {0, redis.call('ZCARD', key)}
end

if op == 'renew' then
  for i = 5, #ARGV do
    redis.call('ZADD', key, 'XX', expires, ARGV[i])
  end
  local n = redis.call('ZCARD', key)
  if n > 0 then keep() end
  return {0, n}
end

if op == 'count' then
  return {0, redis.call('ZCARD', key)}
end

return redis.error_reply('cdp-throttle: unknown op ' .. tostring(op))
