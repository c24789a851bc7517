-- One step of a bucket's circuit breaker, for every relay that shares this
-- Redis, run atomically. It is breaker.Local's rule (breaker/local.go) step
-- for step, in whole microseconds; breakertest holds both to the same
-- tables.
--
-- KEYS[1]  the bucket's hash: f = the failures within the window, oldest
--          first, separated by spaces (closed); u = when the pause ends, 0
--          while closed; p = the pause it opened for last, without the
--          jitter, 0 while closed; q = when the probe went, 0 for none.
-- ARGV[1]  'a' allow, 'o' observe, 's' state (writes nothing).
-- ARGV[2]  now, or '' to read the server's clock. Only tests pass it.
-- ARGV[3]  the failures that open it (N); ARGV[4] the window.
-- ARGV[5]  the first pause; ARGV[6] the longest.
-- ARGV[7]  the jitter J; ARGV[8] the probe's bound.
-- ARGV[9]  observe of a failure: u, uniform in [−1, 1), drawn by the caller.
-- ARGV[10] observe: '1' a failure; ARGV[11] its Retry-After, 0 for none;
--          ARGV[12] '1' the probe's answer; ARGV[13] '1' the probe was lost.
-- ARGV[3..8] are the relay's setting: it travels with each step.
-- Returns {code, phase, has until, until − now, pause, failures, probe out}:
-- code is, for allow, 1 go, 2 go as the probe, 0 deferred; for observe, 1
-- when it opened the breaker. phase is 0 closed, 1 open, 2 half-open. until
-- is the decision's (deferred) or the state's.

local MARGIN_MS = {{MARGIN_MS}}
{{CLOCK}}

local key, op = KEYS[1], ARGV[1]
local now = clock(ARGV[2])
local N, window = tonumber(ARGV[3]), tonumber(ARGV[4])
local first, maxp = tonumber(ARGV[5]), tonumber(ARGV[6])
local jitter, bound = tonumber(ARGV[7]), tonumber(ARGV[8])

local h = redis.call('HMGET', key, 'f', 'u', 'p', 'q')
local fails = {}
if h[1] then
  for t in string.gmatch(h[1], '%d+') do fails[#fails + 1] = tonumber(t) end
end
local untilT, pause, probeAt = tonumber(h[2]) or 0, tonumber(h[3]) or 0, tonumber(h[4]) or 0

local function phase()
  if untilT == 0 then return 0 end
  if now < untilT then return 1 end
  return 2
end

local function probeOut()
  return probeAt ~= 0 and now < probeAt + bound
end

local function fmt(x) return string.format('%d', x) end

-- save writes the breaker back, or deletes it when it is closed with no
-- failure: it expires once idle, as breaker.Local forgets it.
local function save()
  if untilT == 0 and #fails == 0 then
    redis.call('DEL', key)
    return
  end
  local horizon
  if untilT == 0 then
    horizon = fails[#fails] + window
  else
    horizon = math.max(untilT, probeAt + bound) + maxp
  end
  local f = {}
  for i, t in ipairs(fails) do f[i] = fmt(t) end
  redis.call('HSET', key, 'f', table.concat(f, ' '), 'u', fmt(untilT), 'p', fmt(pause), 'q', fmt(probeAt))
  redis.call('PEXPIRE', key, fmt(math.ceil((horizon - now) / 1000) + MARGIN_MS))
end

if op == 'a' then
  local ph = phase()
  if ph == 1 then
    return {0, 1, 1, untilT - now, pause, 0, 0}
  end
  if ph == 2 then
    if probeOut() then
      return {0, 2, 1, probeAt + bound - now, pause, 0, 1}
    end
    probeAt = now
    save()
    return {2, 2, 0, 0, pause, 0, 1}
  end
  return {1, 0, 0, 0, 0, 0, 0}
end

if op == 'o' then
  local u = tonumber(ARGV[9]) or 0
  local failed, ra = ARGV[10] == '1', tonumber(ARGV[11]) or 0
  local probe, lost = ARGV[12] == '1', ARGV[13] == '1'
  local opened = 0
  local function open(p)
    pause = p
    untilT = now + p + math.floor(p * jitter * (u + 1) / 2)
    if now + ra > untilT then untilT = now + ra end
    probeAt = 0
    fails = {}
    opened = 1
  end
  local ph = phase()
  if ph == 0 then
    if failed then
      local kept = {}
      for _, t in ipairs(fails) do
        if t > now - window then kept[#kept + 1] = t end
      end
      fails = kept
      fails[#fails + 1] = now
      if #fails >= N then open(first) end
      save()
    end
  elseif ph == 1 then
    -- Answers of navigations that went before it opened: only a
    -- Retry-After further than its end is heard.
    if failed and now + ra > untilT then
      untilT = now + ra
      save()
    end
  elseif probe and probeAt ~= 0 then
    if lost then
      probeAt = 0
    elseif failed then
      open(math.min(2 * pause, maxp))
    else
      untilT, pause, probeAt, fails = 0, 0, 0, {}
    end
    save()
  end
  return {opened, phase(), 0, 0, pause, 0, 0}
end

if op == 's' then
  local ph = phase()
  if ph == 0 then
    local n = 0
    for _, t in ipairs(fails) do
      if t > now - window then n = n + 1 end
    end
    return {0, 0, 0, 0, pause, n, 0}
  end
  if ph == 1 then
    return {0, 1, 1, untilT - now, pause, 0, 0}
  end
  if probeOut() then
    return {0, 2, 1, probeAt + bound - now, pause, 0, 1}
  end
  return {0, 2, 0, 0, pause, 0, 0}
end

return redis.error_reply('cdp-throttle: unknown breaker op ' .. tostring(op))
