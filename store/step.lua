-- One step of the navigation limiter for one host, run atomically by Redis.
-- It is limiter.Limiter's rule (SPEC §1) step for step; store.go fills in
-- the {{...}} constants from package limiter when it loads the script.
--
-- Times are whole microseconds. Lua numbers are doubles, which hold every
-- integer below 2^53 exactly: microseconds since 1970 need 2^51 today.
--
-- KEYS[1]  the host's hash: t = tat, p = pressure, c = clock, s = the
--          start of its last booking as jitter moved it (absent: none),
--          and the setting of its last booking: m = '1' adaptive or '0'
--          fixed, b = base, u = tau, f = floor; sf = the least spacing
--          the host's server asked for (RateLimit-Policy) until su
--          (absent: none), sr = when the quota its server said was spent
--          resets (absent: none; shown by Busiest only); pu = how far, in
--          all, late departures pushed its schedule (absent: 0), which a
--          slot booked before a push waits out too (Redis.Pushed).
-- ARGV[1]  'r' reserve, 'o' observe, 'p' peek (drain a copy, write nothing),
--          'l' late (push the host's schedule: a navigation left late).
-- ARGV[2]  '1' adaptive, '0' fixed.
-- ARGV[3]  base interval.
-- ARGV[4]  tau, the burst allowance.
-- ARGV[5]  observe: the pressure the answer adds; late: how far to push.
-- ARGV[6]  observe: the Retry-After wait, or -1 when there is none.
-- ARGV[7]  now, or '' to read the server's clock. Only tests pass it, to
--          replay the rule on a simulated clock.
-- ARGV[8]  floor: the least spacing (a robots.txt Crawl-delay), 0 for none.
-- ARGV[9]  jitter F in [0, 1), 0 or absent for none (limiter/jitter.go).
-- ARGV[10] reserve with jitter: u, uniform in [−1, 1), drawn by the caller.
-- ARGV[11] observe: the spacing the answer's server asks for, 0 or absent
--          for none: the host's least spacing, with no burst, for
--          SERVER_LIFE from now (limiter.Outcome.Server). Its spent quota
--          comes as ARGV[6], as a Retry-After does.
-- ARGV[12] reserve: the setting's MaxWait, 0 or absent for none: a
--          navigation whose start lies further ahead books nothing, and
--          its spacing comes back -1 (limiter.Reservation.Deferred).
-- ARGV[13] observe: the server's own wait for its spent quota, 0 or
--          absent for none (already in ARGV[6]): kept as sr, for Busiest.
-- ARGV[2..4], [8] and [9] are the setting of this booking: it travels with the
-- booking, so relays with different rules for a host share its schedule,
-- each booking spaced by its own relay's setting. Peek ignores them and
-- reads the setting of the host's last booking.
-- Returns {start, spacing, pressure, now, adaptive (1 or 0), floor, slack,
-- headroom, server, server until, reset, pushed}; slack and headroom are those of
-- limiter.Reservation (reserve only, 0 otherwise); server is sf while the
-- server's policy holds (until su), else 0 and 0; reset is sr while it is
-- ahead, else 0 (limiter.HostState's Server, ServerEnds, ServerReset);
-- pushed is pu as it stands (limiter.Reservation.Pushed).
-- Peek writes nothing, returns the start a navigation would get and the
-- spacing it would add (the server's policy counted, as reserve counts
-- it), and pressure -1 for a host it does not know.

local COOLDOWN = {{COOLDOWN}}          -- elapsed time that forgives one unit
local MAX_SPACING = {{MAX_SPACING}}    -- spacing cap
local MAX_PRESSURE = {{MAX_PRESSURE}}  -- pressure at which the spacing reaches the cap
local RAMP = {{RAMP}}                  -- units of pressure per extra base interval
local MARGIN_MS = {{MARGIN_MS}}        -- kept past the moment the host is idle
local SERVER_LIFE = {{SERVER_LIFE}}    -- how long a server's policy lasts after the answer that sent it
{{CLOCK}}

local key, op = KEYS[1], ARGV[1]
local adaptive = ARGV[2] == '1'
local base, tau, floor = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[8]) or 0
local jitter, u = tonumber(ARGV[9]) or 0, tonumber(ARGV[10]) or 0
local maxwait = tonumber(ARGV[12]) or 0
local now = clock(ARGV[7])

local h = redis.call('HMGET', key, 't', 'p', 'c', 'm', 'b', 'u', 'f', 's', 'sf', 'su', 'sr', 'pu')
local tat, p, clock, last = tonumber(h[1]), tonumber(h[2]), tonumber(h[3]), tonumber(h[8])
local sf, su, sr = tonumber(h[9]), tonumber(h[10]), tonumber(h[11])
local known = tat ~= nil and p ~= nil and clock ~= nil

-- underServer reports whether the host's server's policy holds now.
local function underServer()
  return sf ~= nil and su ~= nil and sf > 0 and su > now
end

-- idleAt is when the host turns idle: its booked slots have run out
-- (tat), its pressure has drained (clock + p × COOLDOWN) and its
-- server's policy has ended (su).
local function idleAt()
  local at = math.max(tat, clock + p * COOLDOWN)
  if underServer() then at = math.max(at, su) end
  return at
end

-- spacing is how far a booking at pressure q pushes the schedule.
local function spacing(q)
  local s = base
  if adaptive then
    s = math.min(base * (1 + math.floor(q / RAMP)), MAX_SPACING)
  end
  return math.max(s, floor)
end

-- drain credits the time elapsed since clock against p, one unit per whole
-- COOLDOWN; clock moves by whole steps only, so nothing is lost to rounding.
-- fmod truncates toward zero as Go's integer division does, and leaves an
-- exact multiple of COOLDOWN to divide.
local function drain()
  local d = now - clock
  local steps = (d - math.fmod(d, COOLDOWN)) / COOLDOWN
  if steps >= p then
    p = 0
    if now > clock then clock = now end
  elseif steps > 0 then
    p = p - steps
    clock = clock + steps * COOLDOWN
  end
end

-- save writes the host back and lets Redis forget it once it is idle
-- (idleAt). A host forgotten then is booked exactly as one never seen, so
-- expiry replaces limiter.Limiter's sweeps.
local function save()
  local m = '0'
  if adaptive then m = '1' end
  redis.call('HSET', key, 't', string.format('%d', tat), 'p', string.format('%d', p), 'c', string.format('%d', clock),
    'm', m, 'b', string.format('%d', base), 'u', string.format('%d', tau), 'f', string.format('%d', floor))
  if last then redis.call('HSET', key, 's', string.format('%d', last)) end
  if underServer() then redis.call('HSET', key, 'sf', string.format('%d', sf), 'su', string.format('%d', su)) end
  if sr and sr > now then redis.call('HSET', key, 'sr', string.format('%d', sr)) end
  local idle = idleAt() - now
  local ttl = math.max(math.ceil(idle / 1000), 1) + MARGIN_MS
  redis.call('PEXPIRE', key, string.format('%d', ttl))
end

-- jittered is limiter/jitter.go's jittered: the start of a held
-- navigation whose unjittered start is grid, spaced by s and at least
-- least, uniform over where it may go.
local function jittered(grid, s, least)
  local d = math.floor(jitter * s)
  local lo, hi = math.max(now, grid - d), grid + d
  if last then
    lo = math.max(lo, last + math.max(s - d, least))
    hi = math.min(hi, last + s + d)
  end
  if lo >= hi then return lo end
  return lo + math.floor((u + 1) / 2 * (hi - lo))
end

local function flag()
  if adaptive then return 1 end
  return 0
end

-- server returns the server's policy and until when it holds, and when
-- its spent quota resets: the last three values of every answer.
local function server()
  local f, u, r = 0, 0, 0
  if underServer() then f, u = sf, su end
  if sr and sr > now then r = sr end
  return f, u, r
end

-- reply is the script's answer: the values given, then server()'s.
local function reply(start, s, q, adaptiveFlag, fl, slack, headroom)
  local f, u, r = server()
  return {start, s, q, now, adaptiveFlag, fl, slack, headroom, f, u, r, tonumber(h[12]) or 0}
end

if op == 'r' then
  local start, s, slack, headroom
  if not known then
    start, s = now, spacing(0)
    slack, headroom = 0, tau
    tat, clock, last = now + s, now, now
    if adaptive then p = 1 else p = 0 end
  else
    drain()
    s = spacing(p)
    local fl, tu = floor, tau
    if underServer() then
      -- The stricter of the rule and the server; a server's policy, as
      -- a Crawl-delay, leaves no burst.
      s, fl, tu = math.max(s, sf), math.max(floor, sf), 0
    end
    start = math.max(now, tat - tu)
    if underServer() and last then
      -- The server's policy spaces it from the one before, booked perhaps
      -- before the policy was heard (limiter.Limiter's reserve).
      start = math.max(start, last + sf)
    end
    slack, headroom = math.max(0, tat - start), start - (tat - tu)
    local booked = math.max(tat, start) + s
    if jitter > 0 and start > now then
      -- A held slot moves; tat stays on the grid (limiter.Limiter's reserve).
      start, slack = jittered(start, s, fl), 0
    end
    if maxwait > 0 and start - now > maxwait then
      -- Too far ahead to wait for: nothing is booked or written.
      return reply(start, -1, p, flag(), floor, 0, 0)
    end
    tat = booked
    if adaptive then p = math.min(p + 1, MAX_PRESSURE) end
    last = start
  end
  save()
  return reply(start, s, p, flag(), floor, slack, headroom)
end

if op == 'o' then
  local add, wait, asked, spent = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[11]) or 0, tonumber(ARGV[13]) or 0
  if known then
    drain()
  else
    -- A redirect can land on a host that was never reserved.
    tat, clock, p = now, now, 0
  end
  p = math.min(p + add, MAX_PRESSURE)
  if asked > 0 then
    -- The policy the server sends now is its policy: it replaces the one
    -- before, and lasts while the server keeps sending it.
    sf, su = asked, now + SERVER_LIFE
  end
  if spent > 0 and (not sr or now + spent > sr) then sr = now + spent end
  if wait >= 0 then
    -- The wait counts from the answer and the burst must not shorten it:
    -- the next start, max(now, tat - tau), lands at now + wait (with no
    -- burst under a server's policy, as reserve books).
    local tu = tau
    if underServer() then tu = 0 end
    tat = math.max(tat, now + wait + tu)
    -- Nor may jitter: the next slot is spaced from the end of the wait.
    if jitter > 0 then last = math.max(last or now + wait, now + wait) end
  end
  save()
  return reply(0, 0, p, flag(), floor, 0, 0)
end

if op == 'l' then
  -- A navigation left the browser late: the slots booked after this move
  -- by as much. A host Redis does not know has no schedule to move, and
  -- the setting of its last booking stays as it is.
  if known then
    tat = tat + tonumber(ARGV[5])
    redis.call('HSET', key, 't', string.format('%d', tat))
    redis.call('HINCRBY', key, 'pu', tonumber(ARGV[5]))
    if last then redis.call('HSET', key, 's', string.format('%d', last + tonumber(ARGV[5]))) end
    local idle = idleAt() - now
    redis.call('PEXPIRE', key, string.format('%d', math.max(math.ceil(idle / 1000), 1) + MARGIN_MS))
  end
  return reply(0, 0, p or 0, flag(), floor, 0, 0)
end

if op == 'p' then
  if not known then return reply(0, 0, -1, flag(), floor, 0, 0) end
  if h[4] then
    -- The setting of the host's last booking, whichever relay made it.
    adaptive = h[4] == '1'
    base, tau, floor = tonumber(h[5]) or base, tonumber(h[6]) or tau, tonumber(h[7]) or 0
  end
  drain()
  -- The earliest a navigation would go, max(now, tat - tau), and its
  -- spacing, as reserve books them: under the server's policy, the
  -- stricter, with no burst.
  local s, tu = spacing(p), tau
  if underServer() then s, tu = math.max(s, sf), 0 end
  return reply(math.max(now, tat - tu), s, p, flag(), floor, 0, 0)
end

return redis.error_reply('cdp-throttle: unknown op ' .. tostring(op))
