#!lua name=sluice_limits
-- limits.lua - the action limits of src/limits/ as a Redis 7 Functions library: one atomic FCALL per check, all levels.
--
-- A port of src/limits/ (token_bucket.c ... concurrency.c, adaptive.c, limitset.c):
-- the same integers in, the same answers out (docs/limits.md, "On Redis"). The caller
-- (src/backend/redis/limits_fcall.c) resolves the levels of a check from its own
-- configuration (which limits, which key of each, how many units) and passes, per
-- level, the two keys of its state and its parameters; this library keeps no
-- configuration of its own. All keys of one check share one hash tag, that of the
-- limit tree (the limits connected by `parents`), so a check is one atomic call in one
-- Cluster slot.
--
-- Keys of one (limit, key) state:
--   S  string: the record, 12 little-endian doubles packed with Redis's `struct`:
--      t (token: last refill; gcra: TAT; leaky: drain free; windows: window index;
--      sliding: newest entry's time; concurrency: newest hold's end), level (tokens),
--      cur, prev (window counts), rate (adaptive, 0 = configured), seen (latest time
--      seen), sum (units in the log), aux (concurrency: the member counter; sliding: the
--      oldest entry's slot), fresh (1: the algorithm state is a fresh key's), head
--      (sliding: the oldest entry's time), gexp (until when G's or R's TTL is known to
--      last), sexp (the same for the record). token_bucket, gcra
--      and leaky_bucket keep 6 of them: t, level, rate, seen, fresh, sexp. A record of 11
--      (library version 1) reads with sexp 0.
--   G  zset: concurrency's holds (score = end, member "end:n:units"), at most `rate`
--      members live, dead ones removed at the next commit.
--   sliding_window has its own kinds (library version 3; version 2's S and G zset of
--   the same limit are ignored and expire): W, its record (as S: t = the newest entry's
--   time, level = the ring's size in slots, sum = units in the log, aux = the oldest
--   entry's slot, head = its time), and R, the log: a ring of 8-byte little-endian
--   doubles (one slot per unit, its time in us) in one string, at most `rate`
--   (<= 10,000; the largest rate it has had, when adaptive) slots, so 8 bytes a unit; a check reads and writes only the slots it
--   needs (GETRANGE, SETRANGE), and one whose oldest entry is still live reads none
--   to allow and at most one to deny.
--   O  string: an adaptive key's last `window` outcomes, one byte '0'/'1' each,
--      oldest first (<= 65,536 bytes).
-- Every key lives at least the time until its state is at rest (it would answer as
-- a fresh key) plus a second, and a day at least for adaptive limits (whose adapted
-- rate the memory engine keeps until it is back at the start). Its TTL is set to twice
-- that when it would run out sooner, so most checks do not renew it (S is then written
-- with KEEPTTL: a SET with PX costs Redis about twice a plain one, as it is rewritten
-- to PXAT for replication); a G or R that outlives its record is dropped by the next
-- commit.
--
-- Time: ARGV[1] is the time in us ("" = Redis TIME; a number pins it, for the
-- conformance runner only). Integers (us, units) stay below 2^53 and are computed
-- with the C library's operations in the same order, so doubles give the same results.

local VERSION = '3'
local EPS = 1e-9
local RFMT, RLEN = '<dddddddddddd', 96
local RFMT1, RLEN1 = '<ddddddddddd', 88 -- version 1's record
-- token_bucket, gcra and leaky_bucket read and write no other fields than these (their
-- record's other fields stay whatever the reused table held): half the packing.
local SFMT, SLEN = '<dddddd', 48 -- t, level, rate, seen, fresh, sexp
local TOKEN, LEAKY, FIXED, SLIDING, APPROX, GCRA, CONC = 0, 1, 2, 3, 4, 5, 6
local SHORT = {[TOKEN] = true, [GCRA] = true, [LEAKY] = true}
local ALLOWED, RATE, NEVER = 0, 1, 2
local ADAPTIVE_TTL_MS = 86400000
local WALK = 64 -- log entries fetched at once when a deny looks for its retry time

local function trunc(x)
  if x >= 0 then return math.floor(x) end
  return math.ceil(x)
end

local function ceil_us(us)
  if not (us > 0) then return 0 end
  local c = math.ceil(us - 1e-6)
  if c < 0 then return 0 end
  return c
end

local function now_of(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Why tables are reused: in Redis's Lua every fresh table costs about as much as a
-- small command (sluice.lua measured it), so each level's parameters, state and answer
-- live in tables made once, when the library loads, and refilled by every call.
local function new_state(s)
  s.t, s.level, s.cur, s.prev, s.rate, s.seen, s.sum, s.aux, s.fresh = 0, 0, 0, 0, 0, 0, 0, 0, true
  s.head, s.gexp, s.sexp = 0, 0, 0
  return s
end

-- The record at `key` into `s`, or nil when there is none; `raw` is what GET gave when
-- the caller asked already.
local function load(key, s, raw)
  if raw == nil then raw = redis.call('GET', key) end
  if not raw then return nil end
  local fresh, len = nil, #raw
  if len == SLEN then
    s.t, s.level, s.rate, s.seen, fresh, s.sexp = struct.unpack(SFMT, raw)
  elseif len == RLEN1 then
    s.t, s.level, s.cur, s.prev, s.rate, s.seen, s.sum, s.aux, fresh, s.head, s.gexp =
      struct.unpack(RFMT1, raw)
    s.sexp = 0
  else
    s.t, s.level, s.cur, s.prev, s.rate, s.seen, s.sum, s.aux, fresh, s.head, s.gexp, s.sexp =
      struct.unpack(RFMT, raw)
  end
  s.fresh = fresh == 1
  return s
end

-- Writes level L's record `s` so that it lives `ttl_ms` after `now` (the clock of the
-- call) at least: with its TTL kept when that already holds, else with twice that.
local function put(key, rec, keep, ttl_ms)
  if keep then redis.call('SET', key, rec, 'KEEPTTL')
  else redis.call('SET', key, rec, 'PX', 2 * ttl_ms) end
end

local function store(L, s, ttl_ms, now)
  local keep = s.sexp >= now + ttl_ms * 1000
  if not keep then s.sexp = now + 2 * ttl_ms * 1000 end
  local rec
  if SHORT[L.algo] then
    rec = struct.pack(SFMT, s.t, s.level, s.rate, s.seen, s.fresh and 1 or 0, s.sexp)
  else
    rec = struct.pack(RFMT, s.t, s.level, s.cur, s.prev, s.rate, s.seen, s.sum, s.aux,
                      s.fresh and 1 or 0, s.head, s.gexp, s.sexp)
  end
  put(L.skey, rec, keep, ttl_ms)
end

-- ---- parameters of one level: L = {algo, rate, period, burst, ttl, units, adaptive} ----

local function rate_of(L, s)
  if s and s.rate > 0 then return s.rate end
  return L.rate
end

local function whole_rate(L, s)
  local r = math.floor(rate_of(L, s))
  if r < 1 then return 1 end
  return r
end

local function interval_of(period, rate)
  local t = trunc(period / rate)
  if t < 1 then return 1 end
  return t
end

local function interval(L, s) return interval_of(L.period, rate_of(L, s)) end

local function is_fresh(s) return s == nil or s.fresh end

-- ---- concurrency's holds: members "end:n:units" ----

local function units_of(member)
  return tonumber(string.match(member, '(%d+)$'))
end

-- Units and count of the entries with score <= cutoff (dead at now): usually none.
local function dead(L, cutoff)
  local m = redis.call('ZRANGEBYSCORE', L.gkey, '-inf', cutoff)
  local u = 0
  for i = 1, #m do u = u + units_of(m[i]) end
  return u, #m
end

local function prune(L, s, cutoff)
  if L.dead_n == nil then L.dead_u, L.dead_n = dead(L, cutoff) end
  if L.dead_n > 0 then
    redis.call('ZREMRANGEBYSCORE', L.gkey, '-inf', cutoff)
    s.sum = s.sum - L.dead_u
  end
  L.dead_u, L.dead_n = 0, 0
end

-- The time (score) of the first live entry after which `units` more fit, walking the
-- oldest live entries: count - (units of entries up to it) + units <= limit.
local function walk(L, cutoff, count, units, limit)
  local left, off = count, 0
  -- Every entry holds a unit at least: the answer is within the first `need` entries.
  local batch = count + units - limit
  if batch > WALK then batch = WALK end
  while true do
    local m = redis.call('ZRANGEBYSCORE', L.gkey, string.format('(%d', cutoff), '+inf', 'WITHSCORES', 'LIMIT', off, batch)
    if #m == 0 then return nil end
    for i = 1, #m, 2 do
      left = left - units_of(m[i])
      if left + units <= limit then return tonumber(m[i + 1]) end
    end
    off = off + batch
    batch = WALK
  end
end

-- ---- the algorithms: probe (no change) and commit, as src/limits/*.c ----

local A = {}

-- token_bucket.c
-- The level of a bucket last at `level` at time t, refilled until now (not a fresh key's).
local function refill(level, t, now, cap, per_us)
  local dt = 0
  if now > t then dt = now - t end
  level = level + dt * per_us
  if level > cap then return cap end
  return level
end

local function tb_level(L, s, now)
  if is_fresh(s) then return L.burst end
  return refill(s.level, s.t, now, L.burst, rate_of(L, s) / L.period)
end

-- The answer for `units` from a bucket at `level`: reason, remaining, retry, reset.
local function tb_answer(level, units, cap, per_us)
  if units <= level + EPS then
    local after = level - units
    return ALLOWED, math.floor(after + EPS), 0, ceil_us((cap - after) / per_us)
  end
  local remaining, reset = math.floor(level + EPS), ceil_us((cap - level) / per_us)
  if units > cap then return NEVER, remaining, -1, reset end
  return RATE, remaining, ceil_us((units - level) / per_us), reset
end

A[TOKEN] = {
  probe = function(L, s, units, now, a)
    local level = tb_level(L, s, now)
    L.level = level -- for commit: the same state at the same time
    a.limit, a.delay = L.burst, 0
    a.reason, a.remaining, a.retry, a.reset = tb_answer(level, units, L.burst, rate_of(L, s) / L.period)
  end,
  commit = function(L, s, units, now)
    local level = L.level - units
    if level < 0 then level = 0 end
    s.level = level
    if now > s.t or s.fresh then s.t = now end
    s.fresh = false
  end,
  rescale = function(L, s, old_rate, now)
    local rate = s.rate
    s.rate = old_rate
    local level = tb_level(L, s, now)
    s.rate = rate
    if not s.fresh then
      s.level = level
      if now > s.t then s.t = now end
    end
  end,
}

-- gcra.c
local function tat_of(s, now)
  if is_fresh(s) or s.t < now then return now end
  return s.t
end

-- The answer for `units` at interval t, tolerance tau, TAT tat: reason, remaining, retry,
-- reset and the TAT after an allowed check.
local function gcra_answer(t, tau, tat, units, now)
  local increment = t * units
  local new_tat = tat + increment
  local allow_at = new_tat - tau
  local reason, retry, ttl
  if now < allow_at then
    if increment <= tau then reason, retry = RATE, allow_at - now
    else reason, retry = NEVER, -1 end
    ttl = tat - now
  else
    reason, retry = ALLOWED, 0
    ttl = new_tat - now
  end
  local next, remaining = tau - ttl, 0
  if next > -t then remaining = trunc(next / t) end
  return reason, remaining, retry, ttl, new_tat
end

A[GCRA] = {
  probe = function(L, s, units, now, a)
    local t = interval(L, s)
    a.limit, a.delay = L.burst, 0
    -- L.tat for commit: the same state at the same time
    a.reason, a.remaining, a.retry, a.reset, L.tat = gcra_answer(t, t * L.burst, tat_of(s, now), units, now)
  end,
  commit = function(L, s, units, now)
    s.t = L.tat
    s.fresh = false
  end,
  rescale = function(L, s, old_rate, now)
    if s.fresh or s.t <= now then return end
    local rate = s.rate
    s.rate = old_rate
    local t_old = interval(L, s)
    s.rate = rate
    local owed = (s.t - now) / t_old
    s.t = now + trunc(owed * interval(L, s))
  end,
}

-- leaky_bucket.c
local function backlog(s, now)
  if is_fresh(s) or s.t <= now then return 0 end
  return s.t - now
end

A[LEAKY] = {
  probe = function(L, s, units, now, a)
    local t = interval(L, s)
    local room, bl, need = t * L.burst, backlog(s, now), t * units
    a.limit = L.burst
    if bl + need <= room then
      a.reason, a.retry = ALLOWED, 0
      if units > 0 then a.delay = bl else a.delay = 0 end
      a.reset = bl + need
      a.remaining = trunc((room - bl - need) / t)
      return
    end
    a.delay, a.reset = 0, bl
    a.remaining = trunc((room - bl) / t)
    if need > room then a.reason, a.retry = NEVER, -1; return end
    a.reason, a.retry = RATE, bl + need - room
  end,
  commit = function(L, s, units, now)
    s.t = now + backlog(s, now) + interval(L, s) * units
    s.fresh = false
  end,
  rescale = function(L, s, old_rate, now)
    local bl = backlog(s, now)
    if bl == 0 then return end
    local rate = s.rate
    s.rate = old_rate
    local t_old = interval(L, s)
    s.rate = rate
    s.t = now + trunc((bl / t_old) * interval(L, s))
  end,
}

-- fixed_window.c
local function fw_count(L, s, now)
  if not is_fresh(s) and s.t == math.floor(now / L.period) then return s.cur end
  return 0
end

A[FIXED] = {
  probe = function(L, s, units, now, a)
    local limit, count = whole_rate(L, s), fw_count(L, s, now)
    local to_end = (math.floor(now / L.period) + 1) * L.period - now
    a.limit, a.delay = limit, 0
    if count + units <= limit then
      a.reason, a.retry = ALLOWED, 0
      a.remaining = limit - count - units
      if count + units > 0 then a.reset = to_end else a.reset = 0 end
      return
    end
    if limit > count then a.remaining = limit - count else a.remaining = 0 end
    if count > 0 then a.reset = to_end else a.reset = 0 end
    if units > limit then a.reason, a.retry = NEVER, -1 else a.reason, a.retry = RATE, to_end end
  end,
  commit = function(L, s, units, now)
    local k = math.floor(now / L.period)
    if s.fresh or s.t < k then s.t, s.cur = k, 0 end
    s.cur = s.cur + units
    s.fresh = false
  end,
}

-- sliding_window_approx.c
local C = {}
local function swa_counts(L, s, now)
  local k = math.floor(now / L.period)
  local c = C
  c.k, c.cur, c.prev, c.off = k, 0, 0, now - k * L.period
  if is_fresh(s) then return c end
  if s.t == k then c.cur, c.prev = s.cur, s.prev
  elseif s.t == k - 1 then c.prev = s.cur end
  return c
end

local function swa_reset(c, cur, next_start, p, now)
  if cur > 0 then return next_start + p - now end
  if c.prev > 0 then return next_start - now end
  return 0
end

local function swa_offset(L, prev, room)
  if prev <= 0 or prev <= room then return 0 end
  return ceil_us(L.period - room * L.period / prev)
end

A[APPROX] = {
  probe = function(L, s, units, now, a)
    local limit, c = whole_rate(L, s), swa_counts(L, s, now)
    local p = L.period
    local est = c.prev * (p - c.off) / p + c.cur
    local next_start = (c.k + 1) * p
    a.limit, a.delay = limit, 0
    if est + units <= limit + EPS then
      a.reason, a.retry = ALLOWED, 0
      a.remaining = math.floor(limit - est - units + EPS)
      a.reset = swa_reset(c, c.cur + units, next_start, p, now)
      return
    end
    local left = limit - est
    if left > 0 then a.remaining = math.floor(left + EPS) else a.remaining = 0 end
    a.reset = swa_reset(c, c.cur, next_start, p, now)
    if units > limit then a.reason, a.retry = NEVER, -1; return end
    a.reason = RATE
    if c.cur + units <= limit then
      local at = c.k * p + swa_offset(L, c.prev, limit - c.cur - units)
      if at > now then a.retry = at - now else a.retry = 1 end
    else
      a.retry = next_start + swa_offset(L, c.cur, limit - units) - now
    end
  end,
  commit = function(L, s, units, now)
    local c = swa_counts(L, s, now)
    s.t, s.prev, s.cur = c.k, c.prev, c.cur + units
    s.fresh = false
  end,
}

-- concurrency.c: `cutoff` is the score at or below which a hold has ended at now, `span`
-- what a live entry's score adds to its end (0: the score is the end).
local function log_probe(L, s, units, now, a, cutoff, span, fresh_reset)
  local limit = whole_rate(L, s)
  local count = 0
  if not is_fresh(s) then
    if L.dead_n == nil then L.dead_u, L.dead_n = dead(L, cutoff) end
    count = s.sum - L.dead_u
  end
  local live = count > 0
  a.limit, a.delay = limit, 0
  if count + units <= limit then
    a.reason, a.retry = ALLOWED, 0
    a.remaining = limit - count - units
    if units > 0 then a.reset = fresh_reset
    elseif live then a.reset = s.t + span - now
    else a.reset = 0 end
    return
  end
  if limit > count then a.remaining = limit - count else a.remaining = 0 end
  if live then a.reset = s.t + span - now else a.reset = 0 end
  if units > limit then a.reason, a.retry = NEVER, -1; return end
  a.reason = RATE
  local at = walk(L, cutoff, count, units, limit)
  if at then a.retry = at + span - now else a.retry = fresh_reset end
end

-- sliding_window.c, one slot per unit: the log is a ring of `cap` (s.level) 8-byte
-- little-endian doubles (a unit's time in us) in the string R; its entries, oldest
-- first, are the `sum` slots from s.aux (the tail), in time order (a clock that goes
-- back writes the newest time again). A check reads and writes only the slots it needs.
local SLOT = '<d'
local SCAN = 16 -- slots read at once when looking for the first live entry

local function slot_at(L, s, j) -- the time of the log's j-th entry (0: oldest)
  local i = (s.aux + j) % s.level
  return (struct.unpack(SLOT, redis.call('GETRANGE', L.gkey, 8 * i, 8 * i + 7)))
end

-- How many of the log's entries have left the window at `cutoff` (time <= cutoff).
local function sw_dead(L, s, cutoff)
  if L.dead_n ~= nil then return L.dead_n end
  local n = 0
  if s.sum > 0 and s.head <= cutoff then
    if s.t <= cutoff then n = s.sum
    else
      -- the newest is live: the first slots at once, then a binary search
      local k = s.sum
      if k > SCAN then k = SCAN end
      if k > s.level - s.aux then k = s.level - s.aux end
      local raw = redis.call('GETRANGE', L.gkey, 8 * s.aux, 8 * (s.aux + k) - 1)
      while n < k and struct.unpack(SLOT, raw, 8 * n + 1) <= cutoff do n = n + 1 end
      if n == k then
        local lo, hi = k - 1, s.sum - 1 -- lo dead, hi live
        while hi - lo > 1 do
          local mid = math.floor((lo + hi) / 2)
          if slot_at(L, s, mid) <= cutoff then lo = mid else hi = mid end
        end
        n = hi
      end
    end
  end
  L.dead_n = n
  return n
end

local function sw_count(L, s, cutoff)
  if is_fresh(s) then return 0 end
  return s.sum - sw_dead(L, s, cutoff)
end

-- Writes `units` slots of time t after the log's newest entry.
local function sw_write(L, s, units, t)
  local at, left = (s.aux + s.sum) % s.level, units
  local one = struct.pack(SLOT, t)
  while left > 0 do
    local k = s.level - at
    if k > left then k = left end
    if k == 1 then redis.call('SETRANGE', L.gkey, 8 * at, one)
    else redis.call('SETRANGE', L.gkey, 8 * at, string.rep(one, k)) end
    left, at = left - k, 0
  end
end

-- A ring of `limit` slots, the live entries first (a new key, a rate that grew), written
-- at its full size at once (a string grown by SETRANGE keeps Redis's spare room: 1,584
-- bytes for 100 slots instead of 800 and their header).
local function sw_grow(L, s, limit)
  local log = ''
  if s.sum > 0 then
    local a, e = s.aux, s.aux + s.sum
    if e <= s.level then log = redis.call('GETRANGE', L.gkey, 8 * a, 8 * e - 1)
    else
      log = redis.call('GETRANGE', L.gkey, 8 * a, 8 * s.level - 1) ..
            redis.call('GETRANGE', L.gkey, 0, 8 * (e - s.level) - 1)
    end
  end
  redis.call('SET', L.gkey, log .. string.rep('\0', 8 * (limit - s.sum)))
  s.gexp = 0 -- SET dropped the TTL
  s.aux, s.level = 0, limit
end

A[SLIDING] = {
  probe = function(L, s, units, now, a)
    local cutoff, limit = now - L.period, whole_rate(L, s)
    local count = sw_count(L, s, cutoff)
    local live = count > 0
    a.limit, a.delay = limit, 0
    if count + units <= limit then
      a.reason, a.retry = ALLOWED, 0
      a.remaining = limit - count - units
      if units > 0 then a.reset = L.period
      elseif live then a.reset = s.t + L.period - now
      else a.reset = 0 end
      return
    end
    if limit > count then a.remaining = limit - count else a.remaining = 0 end
    if live then a.reset = s.t + L.period - now else a.reset = 0 end
    if units > limit then a.reason, a.retry = NEVER, -1; return end
    -- when the (count + units - limit)-th oldest live unit leaves
    a.reason = RATE
    a.retry = slot_at(L, s, sw_dead(L, s, cutoff) + count + units - limit - 1) + L.period - now
  end,
  commit = function(L, s, units, now)
    local cutoff = now - L.period
    if s.sum > 0 and s.head <= cutoff then
      local d = sw_dead(L, s, cutoff)
      s.sum = s.sum - d
      if s.sum > 0 then
        s.aux = (s.aux + d) % s.level
        s.head = slot_at(L, s, 0)
      end
    end
    L.dead_n = 0
    local t = now
    if s.sum > 0 and s.t > now then t = s.t end -- a clock that went back
    if units > 0 then
      local limit = whole_rate(L, s)
      if s.level < limit then sw_grow(L, s, limit) end
      if s.sum == 0 then s.head = t end
      sw_write(L, s, units, t)
      s.t = t
      s.sum = s.sum + units
    end
    s.fresh = false
  end,
}

A[CONC] = {
  probe = function(L, s, units, now, a)
    log_probe(L, s, units, now, a, now, 0, L.ttl)
  end,
  commit = function(L, s, units, now)
    prune(L, s, now)
    local e = now + L.ttl
    if s.sum > 0 and s.t > e then e = s.t end -- a clock that went back
    if units > 0 then
      s.aux = s.aux + 1
      redis.call('ZADD', L.gkey, e, string.format('%d:%d:%d', e, s.aux, units))
      s.t = e
      s.sum = s.sum + units
    end
    s.fresh = false
  end,
}

-- ---- a check: every level probed, then all commit or none (limitset.c) ----

-- ARGV after the time and mode: the number of levels, then per level its parameters
-- as one string "algo:rate:period_us:burst_units:ttl_us:adaptive(0/1)" and its units;
-- KEYS: per level S, G.
local NPARAM = 2

local MAX_LEVELS = 8
local LV = {}
for i = 1, MAX_LEVELS do LV[i] = {a = {}, st = {}} end
local OUT = {}

-- Why the parameters are one string: Lua interns every argument, so a table keyed by it
-- finds a limit's parsed parameters at the cost of one lookup, where parsing six numbers
-- per level cost about a sixth of a check. The cache holds what the callers' limits
-- are (at most SPEC_MAX strings, then it starts over), never state.
local SPEC_MAX = 1024
local SPECS, NSPECS = {}, 0

local function spec_of(str)
  local p = SPECS[str]
  if p then return p end
  local algo, rate, period, burst, ttl, adaptive =
    string.match(str or '', '^(%d+):([^:]+):(%d+):(%d+):(%d+):([01])$')
  rate = tonumber(rate)
  if not algo or not rate or not A[tonumber(algo)] then error('limit parameters: ' .. tostring(str)) end
  p = {tonumber(algo), rate, tonumber(period), tonumber(burst), tonumber(ttl), adaptive == '1',
       A[tonumber(algo)]}
  if NSPECS >= SPEC_MAX then SPECS, NSPECS = {}, 0 end
  SPECS[str], NSPECS = p, NSPECS + 1
  return p
end

-- Fills LV[1..n] from argv[from] (n) and the parameters after it; returns n.
local function levels_of(keys, argv, from)
  local n = tonumber(argv[from])
  if n < 1 or n > MAX_LEVELS then error('levels: ' .. tostring(n) .. ' not in 1..8') end
  for i = 1, n do
    local b, L = from + (i - 1) * NPARAM, LV[i]
    local p = spec_of(argv[b + 1])
    L.algo, L.rate, L.period, L.burst, L.ttl, L.adaptive, L.fn = p[1], p[2], p[3], p[4], p[5], p[6], p[7]
    L.units, L.skey, L.gkey = tonumber(argv[b + 2]), keys[2 * i - 1], keys[2 * i]
    L.dead_u, L.dead_n, L.live = nil, nil, nil
  end
  return n
end

-- A rate for the reply: an integer as itself, else its 17 digits.
local function rate_reply(r)
  if r % 1 == 0 and r < 1e15 then return r end
  return string.format('%.17g', r)
end

local function tighter(a, b, denied)
  if denied then
    if b.retry < 0 then return false end
    return a.retry < 0 or a.retry > b.retry
  end
  return a.remaining < b.remaining
end

-- What the key expires after: its rest time and a second; a day at least when adaptive.
local function ttl_ms(adaptive, rest_us)
  local ms = math.ceil(rest_us / 1000) + 1000
  if adaptive and ms < ADAPTIVE_TTL_MS then ms = ADAPTIVE_TTL_MS end
  return ms
end

-- A check of one token_bucket or gcra level: check() below on locals, without its
-- level, state and answer tables (their traffic cost about a fifth of such a check).
-- The same cores (refill, tb_answer, gcra_answer), so the same answers. nil and the
-- record when it is not in the short form (version 1's): check() then does it.
local function check_short(keys, argv, p, clock)
  local now = clock
  local algo, rate, period, cap, adaptive = p[1], p[2], p[3], p[4], p[6]
  local units = tonumber(argv[5])
  local key = keys[1]
  local raw = redis.call('GET', key)
  local t, level, srate, seen, fresh, sexp = 0, 0, 0, 0, 1, 0
  if raw then
    if #raw ~= SLEN then return nil, raw end
    t, level, srate, seen, fresh, sexp = struct.unpack(SFMT, raw)
  end
  if seen > now then now = seen end
  if srate > 0 then rate = srate end
  local reason, remaining, retry, reset
  if algo == TOKEN then
    local per_us = rate / period
    if fresh ~= 1 then level = refill(level, t, now, cap, per_us) else level = cap end
    reason, remaining, retry, reset = tb_answer(level, units, cap, per_us)
    if reason == ALLOWED and units > 0 then
      level = level - units
      if level < 0 then level = 0 end
      if now > t or fresh == 1 then t = now end
    end
  else
    local T = interval_of(period, rate)
    local tat = t
    if fresh == 1 or t < now then tat = now end
    local new_tat
    reason, remaining, retry, reset, new_tat = gcra_answer(T, T * cap, tat, units, now)
    if reason == ALLOWED and units > 0 then t = new_tat end
  end
  if units == 0 and reason ~= ALLOWED then reason, retry = ALLOWED, 0 end
  if reason == ALLOWED and units > 0 then
    if now > seen then seen = now end
    local ms = ttl_ms(adaptive, reset)
    local keep = sexp >= clock + ms * 1000
    if not keep then sexp = clock + 2 * ms * 1000 end
    put(key, struct.pack(SFMT, t, level, srate, seen, 0, sexp), keep, ms)
  end
  local out = OUT
  out[1], out[2], out[3], out[4], out[5], out[6], out[7] =
    reason, cap, remaining, retry, reset, 0, rate_reply(rate)
  for i = #out, 8, -1 do out[i] = nil end
  return out
end

-- One sliding_window level in check mode, in its common cases: a fresh key and one unit
-- (allowed: both keys written), or a record whose oldest entry is live (no log to
-- prune) and at least one unit, either allowed (one unit, the ring large enough, the
-- log's TTL long enough: one slot written) or denied (no write; the retry time is the
-- oldest entry's, or the one read slot's when more than one must leave):
-- check() below on locals, the same steps. Otherwise nil and the record (as GET gave
-- it), and check() does it.
local function check_sliding(keys, argv, p, clock)
  local rate, period, adaptive = p[2], p[3], p[6]
  local raw = redis.call('GET', keys[1])
  local units = tonumber(argv[5])
  local out = OUT
  if not raw and units == 1 then
    -- a fresh key: allowed; its ring at full size with this unit in slot 0, both keys
    -- with twice the rest time to live (the steps of check() on a new state)
    local limit = math.floor(rate)
    if limit < 1 then limit = 1 end
    local ms = ttl_ms(adaptive, period)
    local exp = clock + 2 * ms * 1000
    redis.call('SET', keys[2], struct.pack(SLOT, clock) .. string.rep('\0', 8 * (limit - 1)), 'PX', 2 * ms)
    put(keys[1], struct.pack(RFMT, clock, limit, 0, 0, 0, clock, 1, 0, 0, clock, exp, exp), false, ms)
    out[1], out[2], out[3], out[4], out[5], out[6], out[7] =
      ALLOWED, limit, limit - 1, 0, period, 0, rate_reply(rate)
    for i = #out, 8, -1 do out[i] = nil end
    return out
  end
  if not raw or #raw ~= RLEN or not units or units < 1 then return nil, raw end
  local t, level, cur, prev, srate, seen, sum, aux, fresh, head, gexp, sexp = struct.unpack(RFMT, raw)
  local now = clock
  if seen > now then now = seen end
  if srate > 0 then rate = srate end
  local limit = math.floor(rate)
  if limit < 1 then limit = 1 end
  if fresh == 1 or (sum > 0 and head <= now - period) then return nil, raw end
  if sum + units > limit then
    -- denied: nothing has left the window, so the live count is sum
    local reason, remaining, retry, reset = RATE, 0, 0, 0
    if limit > sum then remaining = limit - sum end
    if sum > 0 then reset = t + period - now end
    if units > limit then reason, retry = NEVER, -1
    else
      local k = sum + units - limit -- the k-th oldest entry's leaving lets `units` in
      local at = head
      if k > 1 then
        local i = 8 * ((aux + k - 1) % level)
        at = struct.unpack(SLOT, redis.call('GETRANGE', keys[2], i, i + 7))
      end
      retry = at + period - now
    end
    out[1], out[2], out[3], out[4], out[5], out[6], out[7] =
      reason, limit, remaining, retry, reset, 0, rate_reply(rate)
    for i = #out, 8, -1 do out[i] = nil end
    return out
  end
  local ms = ttl_ms(adaptive, period)
  if now + ms * 1000 > gexp or level < limit or units > 1 then return nil, raw end
  if not (sum > 0 and t > now) then t = now end -- else a clock that went back
  if sum == 0 then head = t end
  redis.call('SETRANGE', keys[2], 8 * ((aux + sum) % level), struct.pack(SLOT, t))
  sum = sum + 1
  if now > seen then seen = now end
  local keep = sexp >= clock + ms * 1000
  if not keep then sexp = clock + 2 * ms * 1000 end
  put(keys[1], struct.pack(RFMT, t, level, cur, prev, srate, seen, sum, aux, 0, head, gexp, sexp), keep, ms)
  out[1], out[2], out[3], out[4], out[5], out[6], out[7] =
    ALLOWED, limit, limit - sum, 0, period, 0, rate_reply(rate)
  for i = #out, 8, -1 do out[i] = nil end
  return out
end

local ONE = {[TOKEN] = check_short, [GCRA] = check_short, [SLIDING] = check_sliding}

local function check(keys, argv)
  local now = now_of(argv[1])
  local mode = argv[2] -- 'check', 'probe' or 'info' (one level, no units)
  local pre -- level 1's record when a one-level path read it and left the check here
  if mode == 'check' and argv[3] == '1' then
    local p = spec_of(argv[4])
    local one = ONE[p[1]]
    if one then
      local out
      out, pre = one(keys, argv, p, now)
      if out then return out end
    end
  end
  local n = levels_of(keys, argv, 3)
  local lv = LV
  local allowed = true
  for i = 1, n do
    local L = lv[i]
    local raw = nil
    if i == 1 then raw = pre end
    L.s = load(L.skey, L.st, raw)
    L.now = now
    if L.s and L.s.seen > now then L.now = L.s.seen end
    local a = L.a
    L.fn.probe(L, L.s, L.units, L.now, a)
    if L.units == 0 and a.reason ~= ALLOWED then a.reason, a.retry = ALLOWED, 0 end
    if a.reason ~= ALLOWED then allowed = false end
  end
  local top = 1
  for i = 2, n do
    if allowed or lv[i].a.reason ~= ALLOWED then
      if (not allowed and lv[top].a.reason == ALLOWED) or tighter(lv[i].a, lv[top].a, not allowed) then
        top = i
      end
    end
  end
  if allowed and mode == 'check' then
    for i = 1, n do
      local L = lv[i]
      if L.units > 0 then
        if L.s == nil and (L.algo == SLIDING or L.algo == CONC) then
          redis.call('DEL', L.gkey) -- a log that outlived its record: not this state's
          L.dead_u, L.dead_n = 0, 0
        end
        local s = L.s or new_state(L.st)
        L.fn.commit(L, s, L.units, L.now)
        if L.now > s.seen then s.seen = L.now end
        local ms = ttl_ms(L.adaptive, L.a.reset)
        if (L.algo == SLIDING or L.algo == CONC) and L.now + ms * 1000 > s.gexp then
          -- twice as long as needed, so the next checks of this period need not renew it
          redis.call('PEXPIRE', L.gkey, 2 * ms)
          s.gexp = L.now + 2 * ms * 1000
        end
        store(L, s, ms, now)
      end
    end
  end
  -- The reply: per level reason, limit, remaining, retry, reset, delay, rate, after
  -- allowed, top, denied_by when there are several levels (one level's reason says it
  -- all: each element of a reply costs Redis about a tenth of a small command).
  local out = OUT
  local m = 0
  if n > 1 then
    out[1], out[2], out[3] = allowed and 1 or 0, top, allowed and 0 or top
    m = 3
  end
  for i = 1, n do
    local L = lv[i]
    local a = L.a
    out[m + 1], out[m + 2], out[m + 3], out[m + 4] = a.reason, a.limit, a.remaining, a.retry
    out[m + 5], out[m + 6], out[m + 7] = a.reset, a.delay, rate_reply(rate_of(L, L.s))
    m = m + 7
  end
  if mode == 'info' then
    local L = lv[1]
    local held = 0
    if L.algo == CONC and not is_fresh(L.s) then held = L.s.sum - L.dead_u end
    out[m + 1], out[m + 2] = L.s and 1 or 0, held
    m = m + 2
  end
  for i = #out, m + 1, -1 do out[i] = nil end
  return out
end

-- KEYS S, G; ARGV now, 1, one level's parameters (as check's; units ignored). Ends the
-- oldest live hold. Reply {1, held, remaining} or {0} when no hold is live.
local function release(keys, argv)
  local clock = now_of(argv[1])
  local now = clock
  levels_of(keys, argv, 2)
  local L = LV[1]
  local s = load(L.skey, L.st)
  if s == nil then return {0} end
  if s.seen > now then now = s.seen end
  prune(L, s, now)
  if s.sum <= 0 then
    store(L, s, ttl_ms(L.adaptive, 0), clock)
    return {0}
  end
  local m = redis.call('ZPOPMIN', L.gkey)
  s.sum = s.sum - units_of(m[1])
  if now > s.seen then s.seen = now end
  local rest = 0
  if s.sum > 0 then rest = s.t - now end
  if now + ttl_ms(L.adaptive, rest) * 1000 > s.gexp then
    redis.call('PEXPIRE', L.gkey, ttl_ms(L.adaptive, rest))
    s.gexp = now + ttl_ms(L.adaptive, rest) * 1000
  end
  store(L, s, ttl_ms(L.adaptive, rest), clock)
  local remaining = whole_rate(L, s) - s.sum
  if remaining < 0 then remaining = 0 end
  return {1, s.sum, remaining}
end

-- KEYS S, G, O (outcomes); ARGV now, 1, the level's parameters (as check's; units
-- ignored), successes, errors, min_rate, max_rate, decrease, increase, high_error,
-- low_error, window. Reply {old_rate, new_rate, error_rate, outcomes in the window}.
local function report(keys, argv)
  local clock = now_of(argv[1])
  local now = clock
  levels_of(keys, argv, 2)
  local L = LV[1]
  local okey = keys[3]
  local b = 2 + NPARAM
  local successes, errors = tonumber(argv[b + 1]), tonumber(argv[b + 2])
  local min_rate, max_rate = tonumber(argv[b + 3]), tonumber(argv[b + 4])
  local decrease, increase = tonumber(argv[b + 5]), tonumber(argv[b + 6])
  local high, low, w = tonumber(argv[b + 7]), tonumber(argv[b + 8]), tonumber(argv[b + 9])
  local s = load(L.skey, L.st) or new_state(L.st)
  if s.seen > now then now = s.seen end
  -- adaptive.c: only the last `window` outcomes can matter
  local total = successes + errors
  local skip = 0
  if total > w then skip = total - w end
  local bits = {}
  for i = skip, total - 1 do
    if math.floor((i + 1) * errors / total) > math.floor(i * errors / total) then
      bits[#bits + 1] = '1'
    else
      bits[#bits + 1] = '0'
    end
  end
  local o = (redis.call('GET', okey) or '') .. table.concat(bits)
  if #o > w then o = string.sub(o, #o - w + 1) end
  local _, nerr = string.gsub(o, '1', '')
  local er = nerr / #o
  local old_rate = rate_of(L, s)
  local rate = old_rate
  if er > high then rate = rate * decrease elseif er < low then rate = rate * increase end
  if rate < min_rate then rate = min_rate end
  if rate > max_rate then rate = max_rate end
  if rate ~= old_rate then
    s.rate = rate
    local r = A[L.algo].rescale
    if r then r(L, s, old_rate, now) end
  elseif s.rate <= 0 then
    s.rate = old_rate
  end
  if now > s.seen then s.seen = now end
  if (L.algo == SLIDING or L.algo == CONC) and now + ADAPTIVE_TTL_MS * 1000 > s.gexp then
    redis.call('PEXPIRE', L.gkey, ADAPTIVE_TTL_MS)
    s.gexp = now + ADAPTIVE_TTL_MS * 1000
  end
  store(L, s, ADAPTIVE_TTL_MS, clock)
  redis.call('SET', okey, o, 'PX', ADAPTIVE_TTL_MS)
  return {string.format('%.17g', old_rate), string.format('%.17g', rate),
          string.format('%.17g', er), #o}
end

redis.register_function{function_name = 'sluice_limits_version', callback = function() return VERSION end,
                        flags = {'no-writes'}}
redis.register_function('sluice_limit_check', check)
redis.register_function('sluice_limit_release', release)
redis.register_function('sluice_limit_report', report)
