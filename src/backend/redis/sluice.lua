#!lua name=sluice
-- sluice.lua - the engine semantics of docs/design.md as a Redis 7 Functions library: one atomic call per decision.
--
-- This is a port of src/engine/ (docs/engine.md lists the choices it makes where
-- docs/design.md is silent; every one is kept here). Each function works on one pool, and
-- every key of a pool shares the hash tag {pool}, so a pool lives in one Cluster slot
-- and each call is atomic. The layout is in docs/redis.md; in short, with
-- P = "sluice:{pool}:":
--   P.."pool"      hash: field "cfg" the configuration (rewritten only by configure),
--                  field "st" the hot state: limits, levels, margin, clocks, counters
--   P.."q"         zset: the weighted fair queue, score = finish tag, member =
--                  "<seq, 20 digits>:<ticket id>:<need0>:<need1>:<need2>:<need3>"
--                  (ties on the score sort by member, which is by arrival)
--   P.."T:<id>"    string: a queued ticket      P.."ti" zset: unheld tickets by idle deadline
--   P.."L:<id>"    string: a live lease         P.."lx" zset: leases by expiry
--   P.."ended"     string: one byte per id (mod 2^22), how an ended lease ended
--   P.."tend"      hash: ended tickets, "state:lease"; P.."tendz" zset by end time
--   P.."idem" / P.."idemz": first answers to request ids, and their times
--   P.."A:<agent>" string: the agent in this pool; P.."agents" set of names
--   P.."C:<key>"   string: a prompt cache, by identity: an agent's default cache is the one
--                  named by the agent (one namespace with every cache_key)
--   P.."M:<model>" string: calibration of a model
--   P.."ablk"      hash: agent -> until when its own 429 report holds its requests
--                  (dropped whole once st's ablk_until, the latest, has passed)
-- Records (cfg, st and the strings above) are packed with Redis's bundled `struct`
-- library: little-endian doubles, so numbers survive the round trip exactly, and
-- zero-terminated strings (names and signatures never hold a NUL).
-- The task graph lives under "sluice:{graph}:tasks" and the pool registry and the
-- replica heartbeats under "sluice:{registry}:*": they span pools, so they are
-- separate calls (the daemon asks the graph for `unblocks` before a request).
--
-- Ids: lease and ticket ids are pool_no * 2^40 + n, where n counts per pool and
-- pool_no comes from the registry; a replica routes an id to its pool by its upper
-- bits. Numbers in hashes and sorted sets are written with %.17g, exact as well.
--
-- Calling convention: KEYS[1] is the pool hash; ARGV[1] is the time ("" = Redis
-- TIME; a number pins it, for tests), ARGV[2] the calling replica ("" = do not
-- publish events), then name/value pairs. Every reply is
-- { code, message, {name, value, ...}, { {event name/value pairs}, ... }, wake }
-- with code "ok" or an error name of sl_strerror(), and wake the pool's next
-- instant at which `advance` has something to do ("inf" when none).

local VERSION = '26'
local RING = 4194304            -- 2^22 remembered lease ends per pool
local ID_SHIFT = 1099511627776  -- 2^40 ids per pool
local NB = 4                    -- input, output, requests, tokens
local BUCKET = {'input_tokens', 'output_tokens', 'requests', 'tokens'}
local LIMIT_FIELD = {'input_tpm', 'output_tpm', 'rpm', 'tokens_tpm'}
local END_SETTLED, END_CANCELLED, END_REAPED, END_GRANTED, END_EXPIRED, END_REJECTED =
    1, 2, 3, 4, 5, 6
local QUEUE_WAIT = 'queue_wait_exceeds_max'
-- The library's constants, in one table: Lua 5.1 allows a chunk 200 locals, and the
-- library's functions need them more than its numbers do.
local CONST = {
  CALIB_WINDOW = 64, CALIB_MIN_SAMPLES = 5, CALIB_MIN_TOKENS = 100,
  LEASE_MEAN_ALPHA = 0.2,  -- weight of the newest duration in the moving average
  ID_FLOOR_T0 = 1735689600, ID_FLOOR_PER_S = 1000, COLD_S = 60,
  CACHE_TTL_MAX_S = 86400,  -- engine.h SL_CACHE_TTL_MAX_S
  OUTPUT_MIN_SAMPLES = 20,
  WALK_MAX = 128,
  REASON_AGENT = 'agent_cap', REASON_TEAM = 'team_cap', REASON_BUDGET = 'budget_exhausted',
  CACHE_WRITE_5M_PRICE = 1.25, CACHE_WRITE_1H_PRICE = 2.0,
  DEPTH_MAX = 64,
}
-- The parent's request bucket of a pool with request_parent (its section follows the keys').
local RP = {SUFFIX = ':long_context'}  -- sluiced's long-context pools' names end so

-- Integers (ids, tokens, counters: most numbers written) take '%d', which prints what
-- '%.17g' prints for them at half the cost; the rest need 17 digits to round-trip.
-- Small counts (most reply and event values: 0, 1, ttl, tokens) are formatted once and
-- kept in SMALL: a string that is still alive costs no allocation.
local SMALL = {}
local function F(x)
  if type(x) == 'number' then
    if x > 0 and x < 4096 and x == math.floor(x) then
      local s = SMALL[x]
      if not s then s = string.format('%d', x); SMALL[x] = s end
      return s
    end
    if x == math.floor(x) and x > -1e15 and x < 1e15 and x ~= 0 then
      return string.format('%d', x)
    end
    return string.format('%.17g', x)
  end
  if type(x) == 'boolean' then return x and '1' or '0' end
  return tostring(x)
end

-- Errors travel as a table so the top level can tell them from Lua faults.
local function fail(code, fmt, ...)
  error({code = code, msg = string.format(fmt, ...)}, 0)
end

-- ---- records: packed strings loaded once per call, written back at the end ----
-- Ports: Redis-only storage (the C engine keeps these records as structs).
--
-- Why packed strings: in Redis's Lua every fresh string or table a call creates costs
-- about as much as a small Redis command (malloc, then the collector), and reading a
-- hash creates two strings per field. The pool used to be one 65-field hash: reading it
-- cost 25 us of the call's 370. Now a record is one string, decoded with
-- struct.unpack (numbers come out as numbers, no strings), and the configuration, which
-- only configure changes, is decoded once per distinct value and kept in CFGS.

local S = {}  -- per-call state; reset by pool_call()
-- The queue's ETA counts the requests ahead at what they keep after their settles
-- (engine: bucket.c, sl__record_refund and sl__queue_eta_sums): rf1 and rf3, the moving
-- average of the share of a lease's output_tokens and tokens reservation its counted
-- settle gave back; rfn, the settles averaged.
local QE = {}

-- A codec: the record's string fields, then its number fields, then optionally `tail`,
-- an array of numbers filling the rest of the string, or `later`, string fields
-- appended after the numbers (read as '' from an older record). Codecs are built while
-- the library loads, where Redis 7.0 offers neither ipairs nor the string library: the
-- struct format is made on first use.
local function codec(strings, numbers, tail, later)
  local names = {}
  for i = 1, #strings do names[#names + 1] = strings[i] end
  for i = 1, #numbers do names[#names + 1] = numbers[i] end
  local nl = later and #later or 0
  for i = 1, nl do names[#names + 1] = later[i] end
  return {names = names, n = #names, tail = tail, ns = #strings, nl = nl}
end

local function fmt_of(c)
  local f = c.fmt
  if not f then
    f = '<' .. string.rep('s', c.ns) .. string.rep('d', c.n - c.ns - c.nl) .. string.rep('s', c.nl)
    c.fmt = f
  end
  return f
end

local DFMT = {}  -- '<' followed by n 'd's, by n
local function dfmt(n)
  local f = DFMT[n]
  if not f then f = '<' .. string.rep('d', n); DFMT[n] = f end
  return f
end

local function decode(c, s)
  local v = {pcall(struct.unpack, fmt_of(c), s)}
  if not v[1] then
    -- Written by a library before number fields were appended to this record: the
    -- missing ones read as 0 (every appended field's neutral value).
    if c.tail then error(v[2]) end
    v = {true, struct.unpack(fmt_of(c), s .. string.rep('\0', 8 * (c.n - c.ns - c.nl) + c.nl))}
  end
  local r = {}
  local names = c.names
  for i = 1, c.n do r[names[i]] = v[i + 1] end
  if c.tail then
    local pos = v[c.n + 2]
    local k = (#s - pos + 1) / 8
    local t = {}
    if k > 0 then
      t = {struct.unpack(dfmt(k), s, pos)}
      t[k + 1] = nil  -- unpack's last value is the next position
    end
    r[c.tail] = t
  end
  return r
end

local function encode(c, r)
  local v = {}
  local names = c.names
  for i = 1, c.n do v[i] = r[names[i]] end
  local s = struct.pack(fmt_of(c), unpack(v, 1, c.n))
  if c.tail then
    local t = r[c.tail]
    if #t > 0 then s = s .. struct.pack(dfmt(#t), unpack(t)) end
  end
  return s
end

local function load(key, c)
  local r = S.recs[key]
  if r ~= nil then return r or nil end
  local s = redis.call('GET', key)
  if not s then S.recs[key] = false; return nil end
  r = decode(c, s)
  S.recs[key] = r
  S.codecs[key] = c
  return r
end

local function create(key, c, r)
  S.recs[key] = r
  S.codecs[key] = c
  S.dirty[key] = true
  return r
end

local function touch(key) S.dirty[key] = true end

local function drop(key)
  S.recs[key] = false
  S.dirty[key] = nil
  redis.call('DEL', key)
end

local ST  -- the pool's hot state codec, defined with the configuration below
local function flush()
  for key in pairs(S.dirty) do
    local r = S.recs[key]
    if r then redis.call('SET', key, encode(S.codecs[key], r)) end
  end
  S.dirty = {}
  if S.p then
    if S.cfg_new then
      redis.call('HSET', S.pool_key, 'cfg', S.cfg_new, 'st', encode(ST, S.p))
    else
      redis.call('HSET', S.pool_key, 'st', encode(ST, S.p))
    end
  end
end

-- Keys with a fixed suffix, built once per pool and kept: a string that is still alive
-- is not allocated again.
local FIXED = {}
local function K(suffix)
  local k = S.fixed[suffix]
  if not k then k = S.prefix .. suffix; S.fixed[suffix] = k end
  return k
end

-- ---- events ----
-- Ports: src/engine/engine.c (sl__emit); decoded by src/backend/redis/redis_proto.c.

local function emit(kind, fields)
  fields.kind = kind
  fields.now = fields.now or S.now
  fields.pool = S.pool
  S.events[#S.events + 1] = fields
end

-- ---- buckets ----
-- Ports: src/engine/bucket.c, and the dominant-share cost of src/engine/weight.c.

local function margin(p) return p.margin_bp / 10000.0 end
local function limited(p, b) return p['lim' .. b] > 0 end
-- A need above a bucket's starting capacity (limit x margin_start) but within its limit
-- waits for that capacity (t.n* clamped to it); the rest, t.over ('o0,o1,o2,o3'), is
-- charged at the grant (engine: lease.c fit_capacity).
function CONST.fit_capacity(p, t)
  local over, any = {}, false
  for b = 0, NB - 1 do
    local start_cap = math.floor(p['lim' .. b] * p.margin_start)
    over[b + 1] = 0
    if limited(p, b) and t['n' .. b] > start_cap then
      over[b + 1] = t['n' .. b] - start_cap
      t['n' .. b] = start_cap
      any = true
    end
  end
  t.over = any and table.concat(over, ',') or ''
end
-- Adds ticket t's over (CONST.fit_capacity) to lease l's need: all the provider holds.
function CONST.add_over(l, t)
  if not t.over or t.over == '' then return end
  local b = 0
  for o in string.gmatch(t.over, '[^,]+') do
    l['n' .. b] = l['n' .. b] + tonumber(o)
    b = b + 1
  end
end
local function capacity(p, b) return p['lim' .. b] * margin(p) end

local function refill(p, now)
  local dt = now - p.last_refill
  if dt <= 0 then return end
  for b = 0, NB - 1 do
    if limited(p, b) then
      local cap = capacity(p, b)
      local level = p['lv' .. b] + cap / 60.0 * dt
      p['lv' .. b] = level > cap and cap or level
    end
  end
  p.last_refill = now
end

local function clamp_levels(p)
  for b = 0, NB - 1 do
    local cap = capacity(p, b)
    if p['lv' .. b] > cap then p['lv' .. b] = cap end
  end
end

local function adjust(p, b, delta)
  if not limited(p, b) then return end
  local cap = capacity(p, b)
  local level = p['lv' .. b] + delta
  p['lv' .. b] = level > cap and cap or level
end

local function fits(p, need, now)
  if p.blocked_until > now then return false end
  if p.concurrency > 0 and p.in_flight >= p.concurrency then return false end
  for b = 0, NB - 1 do
    if limited(p, b) and p['lv' .. b] < need[b] then return false end
  end
  local q = RP.parent(p)  -- its requests are its parent's
  if q and RP.level(q, now) < need[2] then return false end
  return true
end

-- The lowest score of a sorted set, math.huge when it is empty.
local function zmin(key)
  local top = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #top == 0 then return math.huge end
  return tonumber(top[2])
end

-- p.lx_at and p.ti_at are the lowest scores of `lx` and `ti`, kept exact so that a call
-- with nothing due asks Redis nothing: adding a score lowers them; removing or moving
-- the lowest one looks the new lowest up. `old` is the member's current score (nil when
-- it is not in the set).
local function zput(p, set, field, id, old, at)
  redis.call('ZADD', K(set), F(at), F(id))
  if at < p[field] then p[field] = at elseif old == p[field] then p[field] = zmin(K(set)) end
end

local function zdel(p, set, field, id, old)
  redis.call('ZREM', K(set), F(id))
  if old == p[field] then p[field] = zmin(K(set)) end
end

-- Leases end at a rate of slots / D while the slots are busy (D: the moving average of
-- settled leases' durations, the pool's lease_duration_prior_s before any settle), so
-- the k-th release is expected k x D / slots from now, the first by the earliest expiry
-- at the latest; with a prior of 0 and nothing settled only that bound (bucket.c).
local function release_eta(p, releases, slots, earliest, now)
  local bound = earliest - now > 0 and earliest - now or 0
  local mean = p.lease_samples > 0 and p.lease_mean_s or p.lease_duration_prior_s
  if slots <= 0 or (p.lease_samples == 0 and mean <= 0) then return bound end
  local eta = releases * mean / slots
  if releases == 1 and bound < eta then return bound end
  return eta
end


local function record_lease_duration(p, d)
  if not (d >= 0) or d == math.huge then return end
  if p.lease_samples == 0 then p.lease_mean_s = d
  else p.lease_mean_s = p.lease_mean_s + CONST.LEASE_MEAN_ALPHA * (d - p.lease_mean_s) end
  p.lease_samples = p.lease_samples + 1
end

-- Returns the ETA and what binds (limited_by: a bucket, retry_after, concurrency or nil).
local function eta_for(p, sums, ahead, now)
  local eta = p.blocked_until > now and p.blocked_until - now or 0
  local why = eta > 0 and 'retry_after' or nil
  for b = 0, NB - 1 do
    if limited(p, b) then
      local deficit = sums[b] - p['lv' .. b]
      if deficit > 0 then
        local t = deficit / (capacity(p, b) / 60.0)
        if t > eta then eta = t; why = BUCKET[b + 1] end
      end
    end
  end
  local q = RP.parent(p)  -- its requests refill at its parent's rate
  local deficit = q and sums[2] - RP.level(q, now) or 0
  if deficit > 0 then
    local t = deficit / (capacity(q, 2) / 60.0)
    if t > eta then eta = t; why = BUCKET[3] end
  end
  local releases = ahead + 1 - (p.concurrency - p.in_flight)
  if p.concurrency > 0 and releases > 0 then
    local t = release_eta(p, releases, p.concurrency, p.lx_at, now)
    if t < math.huge and t >= eta then eta = t; why = 'concurrency' end
  end
  return eta, why
end

local function cost(p, need)
  local c = 0
  for b = 0, NB - 1 do
    if limited(p, b) then
      local share = need[b] / p['lim' .. b]
      if share > c then c = share end
    end
  end
  return c
end

-- ---- ids and ends ----
-- Ports: src/engine/engine.c (ids, tombstones); wire ids in src/backend/redis/failopen.c.

local function new_id(p)
  local n = p.next_n
  p.next_n = n + 1
  redis.call('SETRANGE', K('ended'), n % RING, '\0')
  return p.pool_no * ID_SHIFT + n
end

local function id_n(p, id) return id - p.pool_no * ID_SHIFT end

-- ---- epochs: the pool's state as one unbroken history ----
-- Ports: Redis-only (a lost copy); its C side is src/backend/redis/events.c.
--
-- Redis can lose what it held (restarted without persistence, FLUSHALL, a failover to a
-- copy that missed writes). Each such loss starts a new *epoch*: its number is the first
-- id counter it issues (p.first_n, = p.epoch), and the counter of a new epoch starts
-- above every counter the old one can have issued: above the highest a replica tells
-- us it saw (`hw`, `seed_n`), and above ID_FLOOR_PER_S per second since ID_FLOOR_T0, a
-- clock the old epoch's counter could outrun only by issuing more than 1,000 ids per
-- second on average over its whole life. So an id issued before a loss never names a
-- lease or ticket issued after it; an unknown id below p.first_n is "from an earlier
-- epoch". A new epoch starts cold (buckets empty, unless configured `cold_start:
-- full`), for the spending of its last minute is not known, and raises the alert
-- backend_state_lost for COLD_S on every replica (p.lost_until).

local function id_floor(now)
  local n = math.floor((now - CONST.ID_FLOOR_T0) * CONST.ID_FLOOR_PER_S)
  return n > 1 and n or 1
end

-- Starts a new epoch at `now` whose counter is above `seed`; `lost` raises the alert.
local function epoch_start(p, now, seed, lost)
  local n = id_floor(now)
  if seed > n then n = seed end
  if p.next_n and p.next_n > n then n = p.next_n end
  p.next_n, p.first_n, p.epoch = n, n, n
  p.last_refill = now
  p.cold_until = p.cold_empty == 1 and now + CONST.COLD_S or -math.huge
  p.cold_raised = 0  -- buckets whose first provider report came in the window (bits)
  p.lost_until = lost and now + CONST.COLD_S or -math.huge
  for b = 0, NB - 1 do
    local cap = p['lim' .. b] > 0 and p['lim' .. b] * p.margin_bp / 10000.0 or 0
    p['lv' .. b] = p.cold_empty == 1 and 0 or cap
  end
end

local function earlier_epoch(p, id)
  local n = id_n(p, id)
  return n >= 0 and n < p.first_n
end

local function in_ring(p, n) return n >= 1 and n < p.next_n and p.next_n - n <= RING end

local function lease_key(id) return S.prefix .. 'L:' .. F(id) end
local function ticket_key(id) return S.prefix .. 'T:' .. F(id) end

local function lease_forget(p, l, state)
  local id = l.id
  drop(lease_key(id))
  zdel(p, 'lx', 'lx_at', id, l.exp)
  local n = id_n(p, id)
  if in_ring(p, n) then redis.call('SETRANGE', K('ended'), n % RING, string.char(state)) end
end

local function lease_ended_state(p, id)
  local n = id_n(p, id)
  if not in_ring(p, n) then return 0 end
  local c = redis.call('GETRANGE', K('ended'), n % RING, n % RING)
  if c == '' then return 0 end
  return string.byte(c)
end

-- ---- margin (AIMD) ----
-- Ports: src/engine/margin.c.

local function emit_floor_alert(p, at, active)
  p.alert_floor = active and 1 or 0
  emit('alert', {now = at, alert = 'margin_at_floor', active = active and 1 or 0,
                 margin = margin(p)})
end

local function lround(x) return math.floor(x + 0.5) end

-- The climb's ceiling: margin_max, or the start when that is not above it.
local function max_bp(p)
  local m = lround(p.margin_max * 10000.0)
  return m > p.start_bp and m or p.start_bp
end

-- A step above the start moves step_bp of each bucket's reserve into its level, for the
-- buckets whose remaining header agreed (`bits`; margin.c step_into_levels).
local function step_into_levels(p, bits, step_bp)
  for b = 0, NB - 1 do
    if limited(p, b) and math.floor(bits / 2 ^ b) % 2 == 1 then
      p['lv' .. b] = p['lv' .. b] + p['lim' .. b] * step_bp / 10000.0
    end
  end
  clamp_levels(p)
end

local function margin_next_step_at(p)
  local at = math.huge
  if p.margin_bp < p.start_bp then at = p.clean_since + p.recover_every_s end
  if p.floor_since >= 0 and p.alert_floor == 0 then
    local alert_at = p.floor_since + p.margin_floor_alert_s
    if alert_at < at then at = alert_at end
  end
  return at
end

-- Below the start only: above it a step is earned by a header (margin_headers).
local function margin_advance(p, now)
  while p.margin_bp < p.start_bp and p.clean_since + p.recover_every_s <= now do
    local t = p.clean_since + p.recover_every_s
    if p.floor_since >= 0 and p.alert_floor == 0 and
        p.floor_since + p.margin_floor_alert_s <= t then
      emit_floor_alert(p, p.floor_since + p.margin_floor_alert_s, true)
    end
    refill(p, t)  -- refill at the old capacity up to the step
    p.margin_bp = p.margin_bp + p.up_bp > p.start_bp and p.start_bp or p.margin_bp + p.up_bp
    p.climb_n = p.next_n
    p.clean_since = t
    if p.margin_bp > p.floor_bp and p.floor_since >= 0 then
      p.floor_since = -1
      if p.alert_floor == 1 then emit_floor_alert(p, t, false) end
    end
    emit('margin', {now = t, margin = margin(p)})
  end
  if p.floor_since >= 0 and p.alert_floor == 0 and
      p.floor_since + p.margin_floor_alert_s <= now then
    emit_floor_alert(p, now, true)
  end
end

-- What a report's `remaining` headers, from the call of lease `id` (nil: none), say at
-- today's margin, before they are applied: one showing less room than the pool believes
-- takes a margin above the start back to the start; an agreement from a lease granted
-- since the margin last changed earns one step of the climb above the start (margin.c).
local function margin_headers(p, lowered, agreed_bits, id, now)
  if not lowered then
    local top = max_bp(p)
    if agreed_bits == 0 or not id or id_n(p, id) < p.climb_n or p.margin_bp < p.start_bp or
        p.margin_bp >= top then
      return
    end
    refill(p, now)  -- refill at the old capacity up to the step
    local old_bp = p.margin_bp
    p.margin_bp = old_bp + p.up_bp > top and top or old_bp + p.up_bp
    step_into_levels(p, agreed_bits, p.margin_bp - old_bp)
    p.climb_n = p.next_n
    p.clean_since = now
    emit('margin', {margin = margin(p)})
    return
  end
  if p.margin_bp < p.start_bp then return end  -- recovering from a 429: not stopped
  p.climb_n = p.next_n  -- the climb starts over, from leases granted from now
  p.clean_since = now
  if p.margin_bp == p.start_bp then return end
  p.margin_bp = p.start_bp
  clamp_levels(p)
  emit('margin', {margin = margin(p)})
end

local function margin_wait_for(p, need, now)
  local want = p.margin_bp
  for b = 0, NB - 1 do
    if limited(p, b) then
      local bp = math.ceil(need[b] / p['lim' .. b] * 10000.0 - 1e-9)
      if bp > want then want = bp end
    end
  end
  if want <= p.margin_bp then return 0 end
  local steps = math.floor((want - p.margin_bp + p.up_bp - 1) / p.up_bp)
  local margin_wait = p.clean_since + p.recover_every_s - now + (steps - 1) * p.recover_every_s
  if margin_wait < 0 then margin_wait = 0 end
  local refill_wait = 0
  for b = 0, NB - 1 do
    if limited(p, b) then
      local rate = p['lim' .. b] * (want / 10000.0) / 60.0
      local t = (need[b] - p['lv' .. b]) / rate
      if t > refill_wait then refill_wait = t end
    end
  end
  return margin_wait > refill_wait and margin_wait or refill_wait
end

-- ---- agents, caches, calibration ----
-- Ports: src/engine/agent.c, src/engine/calibrate.c (caches: src/engine/lease.c).

-- _cls, _ctok: the agent's own cache before library 23 (now C:<agent>); read by nothing,
-- kept so that records written before still decode.
local AGENT = codec({'agent', 'role', 'sig'}, {'lf', '_cls', '_ctok', 'weight', 'repeats', 'err_n',
  'err_pos', 'alert', 'leases', 'queued', 'tin', 'tout', 'g429'}, 'errs')
local CACHE = codec({}, {'ls', 'tok'})
local CALIB = codec({'model'}, {'n', 'pos', 'total', 'ratio'}, 'samples')

local function agent_key(name) return S.prefix .. 'A:' .. name end

local function agent_get(name, make)
  local a = load(agent_key(name), AGENT)
  if a or not make then return a end
  redis.call('SADD', K('agents'), name)
  return create(agent_key(name), AGENT, {agent = name, lf = 0, _cls = -math.huge, _ctok = 0,
    role = 'worker', weight = 1.0, repeats = 0, sig = '', errs = {}, err_n = 0, err_pos = 0,
    alert = 0, leases = 0, queued = 0, tin = 0, tout = 0, g429 = 0})
end

-- The cache of identity ck (an agent's name for its default cache: one namespace, engine:
-- sl__cache_get), or nil. ls: the start (grant) of its last counted call; tok: the prefix's
-- size.
local function cache_view(ck)
  local key = S.prefix .. 'C:' .. ck
  local r = load(key, CACHE)
  if not r then return nil end
  return {rec = r, key = key, ls = 'ls', tok = 'tok'}
end

local function cache_make(ck)
  local key = S.prefix .. 'C:' .. ck
  local r = load(key, CACHE) or create(key, CACHE, {ls = -math.huge, tok = 0})
  return {rec = r, key = key, ls = 'ls', tok = 'tok'}
end


local function cache_warm(p, c, now)
  return c ~= nil and now - c.rec[c.ls] < p.cache_ttl_s
end

local function calib_get(p, model, make)
  local key = S.prefix .. 'M:' .. model
  local c = load(key, CALIB)
  if c or not make then return c end
  return create(key, CALIB, {model = model, samples = {}, n = 0, pos = 0, total = 0, ratio = 1.0})
end

-- Fills the holes of a number array below n with 0, as the comma lists it replaces did.
local function fill_to(t, n)
  for i = 1, n do if t[i] == nil then t[i] = 0 end end
end

local function calib_record(model, est, actual)
  if model == nil or model == '' or est < CONST.CALIB_MIN_TOKENS then return end
  local c = calib_get(nil, model, false)
  if not c then return end
  local r = actual / est
  if r < 0.2 then r = 0.2 end
  if r > 5 then r = 5 end
  local sample = c.samples
  sample[c.pos + 1] = r
  c.pos = (c.pos + 1) % CONST.CALIB_WINDOW
  if c.n < CONST.CALIB_WINDOW then c.n = c.n + 1 end
  c.total = c.total + 1
  fill_to(sample, c.n)
  touch(S.prefix .. 'M:' .. model)
  if c.n < CONST.CALIB_MIN_SAMPLES then return end
  local sorted = {}
  for i = 1, c.n do sorted[i] = sample[i] end
  table.sort(sorted)
  local n = c.n
  if n % 2 == 1 then c.ratio = sorted[math.floor(n / 2) + 1]
  else c.ratio = (sorted[n / 2] + sorted[n / 2 + 1]) / 2 end
end

-- Per model and agent group (the request's role), the outputs of the last 64 counted
-- settles and their 95th percentile (nearest rank) once 20 are known: what
-- `output_reserve: learned` reserves instead of max_tokens when lower (calibrate.c says
-- why per group). A record of its own, P.."O:"..model.."\31"..role, so the calibration's
-- layout is unchanged; 64 numbers per model and role: bounded. A lease written before
-- groups (ogrp '') records under P.."O:"..model, the key of that time.
local OUTS = codec({}, {'n', 'pos', 'p95'}, 'samples')

local function outputs_key(model, group)
  if group == nil or group == '' then return S.prefix .. 'O:' .. model end
  return S.prefix .. 'O:' .. model .. '\31' .. group
end

local function output_p95(model, group)
  local o = load(outputs_key(model, group), OUTS)
  return o and o.p95 or 0
end

local function output_record(model, group, tokens)
  if model == nil or model == '' then return end
  local key = outputs_key(model, group)
  local o = load(key, OUTS) or create(key, OUTS, {n = 0, pos = 0, p95 = 0, samples = {}})
  local sample = o.samples
  sample[o.pos + 1] = tokens
  o.pos = (o.pos + 1) % CONST.CALIB_WINDOW
  if o.n < CONST.CALIB_WINDOW then o.n = o.n + 1 end
  fill_to(sample, o.n)
  touch(key)
  o.p95 = 0
  if o.n < CONST.OUTPUT_MIN_SAMPLES then return end
  local sorted = {}
  for i = 1, o.n do sorted[i] = sample[i] end
  table.sort(sorted)
  local v = sorted[math.floor((95 * o.n + 99) / 100)]
  o.p95 = v > 1 and v or 1
end

local function agent_mean_error(a)
  if a.err_n == 0 then return 0 end
  local errs = a.errs
  local sum = 0
  for i = 1, a.err_n do sum = sum + (errs[i] or 0) end
  return sum / a.err_n
end

local function agent_record_error(p, a, err)
  local window = p.estimate_error_window
  if window < 1 then window = 1 end
  if window > 64 then window = 64 end
  if a.err_n > window then a.err_n = window; a.err_pos = 0 end
  local errs = a.errs
  errs[a.err_pos + 1] = err
  a.err_pos = (a.err_pos + 1) % window
  if a.err_n < window then a.err_n = a.err_n + 1 end
  fill_to(errs, a.err_n)
  local mean = agent_mean_error(a)
  local active = a.err_n >= window and mean > p.estimate_error_alert
  if (active and 1 or 0) ~= a.alert then
    a.alert = active and 1 or 0
    emit('alert', {agent = a.agent, alert = 'estimate_error', active = a.alert,
                   estimate_error = mean})
  end
end

local function agent_record_signature(a, sig)
  if sig ~= '' and a.sig ~= '' and sig == a.sig then
    a.repeats = a.repeats + 1
    return
  end
  a.sig = sig
  a.repeats = 0
end

-- ---- the queue ----
-- Ports: src/engine/queue.c, src/engine/team.c, src/engine/weight.c.
--
-- Hierarchical, as queue.c: each team has its own zset scored by its agents' (inner)
-- finish tags (team "default", every agent outside a team: P.."q"; team T: P.."q:T"),
-- and a record P.."G:T": its inner V (vtime), the outer tag of its latest grant (lo),
-- its head's outer start while backlogged (base), its length (qn), summed costs (cs)
-- and needs (s0..s3). P.."tl" lists the teams in the order the pool first saw them
-- (ties between teams). The outer tag of a team's k-th ticket is base + (the costs of
-- its tickets 0..k) / weight, derived when asked; the ticket record keeps its team and
-- cost.

local TICKET = codec({'agent', 'ck', 'model', 'team'}, {'id', '_own', 'est', 'n0', 'n1', 'n2', 'n3',
  'cached', 'pen', 'weight', 'finish', 'seq', 'enq', 'ttl', 'held', 'idle_at', 'cost', 'pt'},
  nil, {'park', 'woke', 'ws', 'cttl', 'ogrp', 'pin', 'over'})  -- _own: 1 for the agent's own cache
  -- before library 23, now always 0 (ck names every cache); caps: the holder it is parked on,
  -- the holder that woke it; ws: '1' while the working set parks it (a task's first call);
  -- cttl: the call's cache lifetime in seconds ('' = the pool's cache_ttl_s); ogrp: its
  -- agent group (role), whose output percentile it learns; pin: '1' when its request
  -- named this key alone (KQ below); over: 'o0,o1,o2,o3', the need above the starting
  -- capacity charged at the grant (CONST.fit_capacity), '' for none
local TEAM = codec({'name'}, {'order', 'vtime', 'lo', 'base', 'qn', 'cs', 's0', 's1', 's2', 's3'})
local DEFAULT_TEAM = 'default'

local function load_ticket(id) return load(ticket_key(id), TICKET) end
local function team_key(name) return S.prefix .. 'G:' .. name end

local function team_q(name)
  if name == DEFAULT_TEAM then return K('q') end
  return S.prefix .. 'q:' .. name
end

local function team_list()
  if not S.tl then S.tl = redis.call('LRANGE', K('tl'), 0, -1) end
  return S.tl
end

local function team_get(name, make)
  local g = load(team_key(name), TEAM)
  if g or not make then return g end
  local order = #team_list()
  redis.call('RPUSH', K('tl'), name)
  S.tl[order + 1] = name
  return create(team_key(name), TEAM, {name = name, order = order, vtime = 0, lo = 0, base = 0,
    qn = 0, cs = 0, s0 = 0, s1 = 0, s2 = 0, s3 = 0})
end

local function team_weight(p, name) return p.team_w[name] or 1 end

-- The queue team of an agent: its team in caps.teams.NAME.members, else "default".
local function team_of(p, agent) return p.member_of[agent] or DEFAULT_TEAM end

local function qmember(t)
  return string.format('%020d:%s:%s:%s:%s:%s', t.seq, F(t.id), F(t.n0), F(t.n1), F(t.n2),
                       F(t.n3))
end

local function parse_member(m)
  local seq, id, a, b, c, d = string.match(m, '^(%d+):([^:]+):([^:]+):([^:]+):([^:]+):([^:]+)$')
  return tonumber(id), {[0] = tonumber(a), tonumber(b), tonumber(c), tonumber(d)}, tonumber(seq)
end

-- p.qn is the queue's length over all teams: an empty queue (the usual case) costs no
-- query, and the head is looked up once per call until the queue or a team's outer
-- tags change (S.qid: reset by insert, remove and grant).
-- A team that was idle starts at max(V, its last outer tag): no credit for idle time.
local function queue_insert(p, t)
  local g = team_get(t.team, true)
  if g.qn == 0 then g.base = p.vtime > g.lo and p.vtime or g.lo end
  redis.call('ZADD', team_q(t.team), F(t.finish), qmember(t))
  for b = 0, NB - 1 do
    local n = t['n' .. b]
    p['qs' .. b] = p['qs' .. b] + n
    g['s' .. b] = g['s' .. b] + n
    if n > p['qm' .. b] then p['qm' .. b] = n end
  end
  g.qn = g.qn + 1
  g.cs = g.cs + t.cost
  touch(team_key(t.team))
  p.qn = p.qn + 1
  if t.pin == '1' then redis.call('INCR', K('pinq')) end  -- pinned tickets queued (KQ.eta)
  S.qid = nil
end

local function queue_remove(p, t)
  local g = team_get(t.team, true)
  redis.call('ZREM', team_q(t.team), qmember(t))
  for b = 0, NB - 1 do
    p['qs' .. b] = p['qs' .. b] - t['n' .. b]
    g['s' .. b] = g['s' .. b] - t['n' .. b]
  end
  g.qn = g.qn - 1
  g.cs = g.cs - t.cost
  if g.qn == 0 then g.cs = 0; for b = 0, NB - 1 do g['s' .. b] = 0 end end
  touch(team_key(t.team))
  p.qn = p.qn - 1
  if t.pin == '1' then redis.call('DECR', K('pinq')) end
  if p.qn == 0 then for b = 0, NB - 1 do p['qm' .. b] = 0 end end
  S.qid = nil
end

-- The next ticket to serve: the head of the team whose head has the lowest outer tag.
local function queue_head(p)
  if p.qn == 0 then return nil end
  if S.qid == nil then
    local teams = team_list()
    for i = 1, #teams do
      local g = team_get(teams[i], false)
      if g and g.qn > 0 then
        local h = redis.call('ZRANGE', team_q(g.name), 0, 0)
        if #h > 0 then
          local id = parse_member(h[1])
          local o = 0
          if #teams > 1 then o = g.base + load_ticket(id).cost / team_weight(p, g.name) end
          if S.qid == nil or o < S.qouter then S.qid, S.qouter = id, o end
        end
      end
    end
  end
  return S.qid
end

-- Requests ahead in a team's own zset: their count, summed needs and (when `want_cost`)
-- summed costs, at a cost that does not grow with the queue. `member` names a ticket:
-- its rank is the count ahead (a parked one is not in the zset: the rank its tag would
-- have); nil means a new request with tag `finish`, which goes after every request of
-- an equal tag (its sequence number is the highest), so the count is ZCOUNT up to
-- `finish`. A synchronised burst gives thousands of equal
-- tags: nothing here walks them. The sums walk whichever side of the position is
-- shorter and use the team's running sums for the other; a position more than
-- WALK_MAX from both ends takes the team's mean need for the requests ahead (the ETA
-- is advisory; every queue of up to 2 x WALK_MAX is exact, as the engine's).

local function walk_sums(q, from, to, sign, sums, want_cost)
  local c = 0
  for _, m in ipairs(redis.call('ZRANGE', q, from, to)) do
    local id, n = parse_member(m)
    for b = 0, NB - 1 do sums[b] = sums[b] + sign * n[b] end
    if want_cost then c = c + load_ticket(id).cost end
  end
  return c
end

-- The rank (finish, seq) would have in zset q when its member is not there (a ticket
-- parked on a holder's max_concurrent keeps its tag out of the queue): the members of
-- lower score, then a binary search among those of equal score, which sort by member,
-- i.e. by sequence number (as the engine's key, queue.c). O(log^2 n), walks nothing.
local function rank_absent(q, finish, seq)
  local lo = redis.call('ZCOUNT', q, '-inf', '(' .. F(finish))
  local hi = redis.call('ZCOUNT', q, '-inf', F(finish))
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local _, _, s = parse_member(redis.call('ZRANGE', q, mid, mid)[1])
    if s < seq then lo = mid + 1 else hi = mid end
  end
  return lo
end

local function inner_prefix(g, finish, member, want_cost)
  local q = team_q(g.name)
  local depth = g.qn
  local sums = {[0] = 0, 0, 0, 0}
  if depth == 0 then return 0, sums, 0 end
  local ahead
  if member then
    ahead = redis.call('ZRANK', q, member)
    if not ahead then
      local _, _, seq = parse_member(member)
      ahead = rank_absent(q, finish, seq)
    end
  else
    ahead = redis.call('ZCOUNT', q, '-inf', F(finish))
  end
  if ahead == 0 then return 0, sums, 0 end
  local rest = depth - ahead
  local c
  if ahead <= rest and ahead <= CONST.WALK_MAX then
    c = walk_sums(q, 0, ahead - 1, 1, sums, want_cost)
  elseif rest < ahead and rest <= CONST.WALK_MAX then
    for b = 0, NB - 1 do sums[b] = g['s' .. b] end
    c = g.cs
    if rest > 0 then c = c - walk_sums(q, ahead, -1, -1, sums, want_cost) end
  else
    for b = 0, NB - 1 do sums[b] = g['s' .. b] * ahead / depth end
    c = g.cs * ahead / depth
  end
  return ahead, sums, c
end

-- Tickets of team o whose outer tag is below `outer` (at most `outer` when `inclusive`):
-- a prefix of its order, walked from its head; past WALK_MAX, its mean cost and need.
local function outer_prefix(p, o, outer, inclusive, sums)
  local w = team_weight(p, o.name)
  local count, acc = 0, 0
  for _, m in ipairs(redis.call('ZRANGE', team_q(o.name), 0, CONST.WALK_MAX - 1)) do
    local id, n = parse_member(m)
    local c = load_ticket(id).cost
    local tag = o.base + (acc + c) / w
    if not (tag < outer or (inclusive and tag == outer)) then return count end
    acc = acc + c
    count = count + 1
    for b = 0, NB - 1 do sums[b] = sums[b] + n[b] end
  end
  local left = o.qn - count
  if left > 0 then
    local mean = o.cs / o.qn
    local more = left
    if mean > 0 then more = math.floor(((outer - o.base) * w - acc) / mean) end
    if more > left then more = left end
    if more > 0 then
      count = count + more
      for b = 0, NB - 1 do sums[b] = sums[b] + o['s' .. b] / o.qn * more end
    end
  end
  return count
end

-- Where a request of cost `c` with inner key (finish, member) stands in team g: the
-- requests ahead of it over all teams (count, summed needs) and its outer tag.
local function queue_place(p, g, finish, member, c)
  local others = g.qn < p.qn
  local ahead, sums, before = inner_prefix(g, finish, member, others)
  local base = g.qn > 0 and g.base or (p.vtime > g.lo and p.vtime or g.lo)
  local outer = base + (before + c) / team_weight(p, g.name)
  if others then
    local teams = team_list()
    for i = 1, #teams do
      local o = teams[i] ~= g.name and team_get(teams[i], false)
      if o and o.qn > 0 then ahead = ahead + outer_prefix(p, o, outer, o.order < g.order, sums) end
    end
  end
  return ahead, sums, outer
end

local function queue_eta(p, g, need, finish, member, c, now)
  local ahead, sums, outer = queue_place(p, g, finish, member, c)
  local kept = QE.sums(p, sums, need)
  for b = 0, NB - 1 do sums[b] = sums[b] + need[b] end
  local eta, why = eta_for(p, kept, ahead, now)
  return eta, ahead, outer, why, sums
end

local function need_of(r) return {[0] = r.n0, r.n1, r.n2, r.n3} end

-- What the buckets must hold before a request of `own` behind requests whose needs sum to
-- `ahead` is granted: `ahead` at the share its requests keep (output_tokens and tokens:
-- 1 - the refund share; the others whole), `own` whole.
function QE.sums(p, ahead, own)
  local out = {}
  for b = 0, NB - 1 do
    local rf = (b == 1 or b == 3) and p['rf' .. b] or 0
    out[b] = ahead[b] * (1.0 - rf) + own[b]
  end
  return out
end

-- A counted settle of lease l, charged actual_in and actual_out, into the refund shares.
function QE.record(p, l, actual_in, actual_out)
  local reserved = {[1] = l.n1, [3] = l.n3}
  local charged = {[1] = actual_out, [3] = actual_in + actual_out}
  for _, b in ipairs({1, 3}) do
    if reserved[b] > 0 then
      local share = (reserved[b] - charged[b]) / reserved[b]
      if share < 0 then share = 0 end
      if p.rfn == 0 then p['rf' .. b] = share
      else p['rf' .. b] = p['rf' .. b] + CONST.LEASE_MEAN_ALPHA * (share - p['rf' .. b]) end
    end
  end
  p.rfn = p.rfn + 1
end

-- ---- leases and tickets ----
-- Ports: src/engine/lease.c, src/engine/caps.c.

local LEASE = codec({'agent', 'ck', 'model'}, {'id', 'ticket', '_own', 'est', 'n0', 'n1', 'n2', 'n3',
  'cached', 'pen', 'weight', 'granted_at', 'waited', 'ttl', 'claimed', 'exp', 'pt', 'cusd'},
  nil, {'caph', 'cttl', 'ogrp', 'rg', 'gc'})  -- _own as the ticket's; caps: its cost in USD, its
  -- holders' keys (caps section); cttl and ogrp as the ticket's; rg: per bucket
  -- "room:reserve" at the grant, comma-separated ('' from an older record: not known), as
  -- the engine's room_at_grant; gc: per bucket the pool's gc0..gc3 right after the grant
  -- (GH, the engine's cum_at_grant)

-- A ticket's poll claims the lease it was granted (its TTL starts); `peek`: a replica
-- asking after a grant it may have missed, not its holder. Returns whether it changed.
local function lease_claim(p, l, now, args)
  if l.claimed ~= 0 or (args and args.peek) then return false end
  local old = l.exp
  l.claimed = 1
  l.exp = now + l.ttl
  zput(p, 'lx', 'lx_at', l.id, old, l.exp)
  touch(lease_key(l.id))
  return true
end

local function fill_grant(l)
  return {status = 'granted', lease = l.id, ticket = l.ticket, expires_at = l.exp,
          ttl = l.ttl, weight = l.weight, charged_input_tokens = l.n0,
          charged_output_tokens = l.n1, charged_requests = l.n2, cache_penalty = l.pen,
          waited = l.waited}
end

-- ---- caps ----
-- Ports: src/engine/caps.c.
--
-- Caps of an agent (its own, else "*"'s) and of its team, from configure's `caps`. A
-- holder's state in this pool is the record P.."H:<a|t>:<name>": its share and rpm
-- levels (refilled per minute like the pool's), its budget levels, its leases in flight,
-- its tickets parked and woken. P.."hl:<holder>" is the set of its live leases when it
-- has max_concurrent (the earliest expiry bounds the first release; a lease granted
-- before a reload gave it one is not listed and bounds nothing), P.."pk:<holder>" the
-- list of its parked tickets (held back only by max_concurrent, out of the queue so
-- they never block its head), P.."pks" the holders that ever parked one. A lease keeps
-- its holders' keys (caph) and its cost (cusd); a ticket the holder it is parked on
-- (park) or was woken by (woke). A pool without caps reads nothing of this. Budgets are
-- counted per pool (the engine's span pools: a pool is one Cluster slot here).

-- The section's functions live in one table: the library's main chunk may hold at most
-- 200 locals.
local CP = {}
local WS = {}  -- the working set's functions (their section follows backfilling)
local CALL = {}  -- a call's frame: its events and the reply to a refused call (before pool_call)
local GH = {MARKS = 64, SPLIT = 8}  -- the grant history (its section precedes grant)
local KQ = {}  -- one queue over the keys of a pool of several keys (its section follows the
              -- configuration's decoding, which it uses)
local HOLDER = codec({}, {'lv0', 'lv1', 'lv2', 'lv3', 'last', 'inf', 'np', 'nw', 'bh', 'bd',
  'blast'})
local NO_CAPS = {share = 0, rpm = 0, conc = 0, bh = 0, bd = 0}

-- A holder without a budget counts no spending: its budget levels rest at 0 with blast 0,
-- so a budget a reload gives it later starts full (as the engine's), not owing what was
-- spent while it had none.
function CP.has_budget(c) return c.bh > 0 or c.bd > 0 end

function CP.caps_empty(c)
  return c.share == 0 and c.rpm == 0 and c.conc == 0 and c.bh == 0 and c.bd == 0
end

-- "a:solo=0/0/1/0/0,t:lint=..." as {["a:solo"] = caps}; nil when no holder has caps.
function CP.caps_parse(list)
  local m
  for key, v in string.gmatch(list, '([^,=]+)=([^,]*)') do
    local share, rpm, conc, bh, bd = string.match(v, '^([^/]*)/([^/]*)/([^/]*)/([^/]*)/([^/]*)$')
    local c = {share = tonumber(share) or 0, rpm = tonumber(rpm) or 0, conc = tonumber(conc) or 0,
               bh = tonumber(bh) or 0, bd = tonumber(bd) or 0}
    if not CP.caps_empty(c) then m = m or {}; m[key] = c end
  end
  return m
end

-- The caps a holder key answers to now (a reload may have changed them).
function CP.holder_caps(p, key)
  local co = p.caps_of
  if not co then return NO_CAPS end
  local c = co[key]
  if not c and string.sub(key, 1, 2) == 'a:' then c = co['a:*'] end
  return c or NO_CAPS
end

function CP.cap_capacity(p, c, b)
  if b == 2 then return c.rpm end
  local lim = p['lim' .. b]
  if c.share > 0 and lim > 0 then return lim * c.share end
  return 0
end

function CP.holder_key(key) return S.prefix .. 'H:' .. key end

function CP.holder_state(p, h, make)
  local st = load(CP.holder_key(h.key), HOLDER)
  if st or not make then return st end
  st = {inf = 0, np = 0, nw = 0, bh = h.c.bh, bd = h.c.bd, last = S.now,
        blast = CP.has_budget(h.c) and S.now or 0}
  for b = 0, NB - 1 do st['lv' .. b] = CP.cap_capacity(p, h.c, b) end  -- never used: full
  return create(CP.holder_key(h.key), HOLDER, st)
end

-- The holders of a request of `agent`: nil when none has caps (the common case).
function CP.caps_resolve(p, agent)
  if not p.caps_of then return nil end
  local hs = {}
  local key = 'a:' .. agent
  local c = CP.holder_caps(p, key)
  if c ~= NO_CAPS then hs[#hs + 1] = {key = key, name = agent, team = false, c = c} end
  local team = p.member_of[agent]
  if team then
    key = 't:' .. team
    c = CP.holder_caps(p, key)
    if c ~= NO_CAPS then hs[#hs + 1] = {key = key, name = team, team = true, c = c} end
  end
  if #hs == 0 then return nil end
  for _, h in ipairs(hs) do h.st = CP.holder_state(p, h, false) end
  return hs
end

-- Port of sl__caps_billed_cost_usd: cache writes cost 1.25x (5 minutes) or 2x (1 hour)
-- the input price.

function CP.billed_cost_usd(p, inn, cc, cc1h, out)
  local premium = (cc - cc1h) * (CONST.CACHE_WRITE_5M_PRICE - 1) + cc1h * (CONST.CACHE_WRITE_1H_PRICE - 1)
  return CP.cost_usd(p, inn, out) + premium * p.price_input_per_mtok / 1e6
end

function CP.cost_usd(p, inn, out)
  return inn * p.price_input_per_mtok / 1e6 + out * p.price_output_per_mtok / 1e6
end

-- The most output tokens the share caps let a request with `inn` input tokens reserve
-- (-1: no share cap).
function CP.caps_output_fit(p, hs, inn)
  local fit = -1
  for _, h in ipairs(hs) do
    local out_cap, tok_cap = CP.cap_capacity(p, h.c, 1), CP.cap_capacity(p, h.c, 3)
    if out_cap > 0 then
      local f = math.floor(out_cap + 1e-6)
      if fit < 0 or f < fit then fit = f end
    end
    if tok_cap > 0 then
      local f = math.floor(tok_cap + 1e-6) - inn
      if f < 0 then f = 0 end
      if fit < 0 or f < fit then fit = f end
    end
  end
  return fit
end

function CP.level_now(p, h, st, b, now)
  local cap = CP.cap_capacity(p, h.c, b)
  if not st then return cap end
  local level = st['lv' .. b] + cap / 60.0 * (now - st.last)
  return level > cap and cap or level
end

function CP.budget_now(c, st, now)
  if not st then return c.bh, c.bd end
  local dt = now - st.blast
  if dt < 0 then dt = 0 end
  local hour = st.bh + c.bh / 3600.0 * dt
  if hour > c.bh then hour = c.bh end
  local day = st.bd + c.bd / 86400.0 * dt
  if day > c.bd then day = c.bd end
  return hour, day
end

-- When the holder frees a slot for a ticket with `ahead` parked before it: expected
-- from the pool's observed lease durations, bounded by the holder's earliest expiry.
function CP.caps_release_eta(p, h, st, ahead, now)
  local earliest = now + p.lease_ttl_s
  for _, id in ipairs(redis.call('SMEMBERS', S.prefix .. 'hl:' .. h.key)) do
    local l = load(lease_key(tonumber(id)), LEASE)
    if l and l.exp < earliest then earliest = l.exp end
  end
  local max = h.c.conc > 0 and h.c.conc or 1
  if st.inf < max then return 0 end
  return release_eta(p, st.inf - max + 1 + ahead, max, earliest, now)
end

-- nil when the caps allow `need` now; else the reason, the wait and, when only a
-- holder's max_concurrent holds it back, that holder (the request is parked on it).
-- Fails exceeds_capacity for a need no cap can ever pass. Changes nothing.
function CP.caps_check(p, hs, need, now)
  local cost = CP.cost_usd(p, need[0], need[1])
  local wait, why, other, conc = 0, nil, false, nil
  for _, h in ipairs(hs) do
    local st, c = h.st, h.c
    local reason = h.team and CONST.REASON_TEAM or CONST.REASON_AGENT
    local kind = h.team and 'team' or 'agent'
    for b = 0, NB - 1 do
      local cap = CP.cap_capacity(p, c, b)
      if cap > 0 then
        if need[b] > cap then
          fail('exceeds_capacity', '%s %s can never pass the %s of %s "%s": %.0f per minute',
               BUCKET[b + 1], F(need[b]), reason, kind, h.name, cap)
        end
        local level = CP.level_now(p, h, st, b, now)
        if level < need[b] then
          local t = (need[b] - level) / (cap / 60.0)
          other = true
          if t > wait then wait, why = t, reason end
        end
      end
    end
    if c.conc > 0 and st and st.inf >= c.conc then
      local t = CP.caps_release_eta(p, h, st, st.np, now)
      conc = conc or h
      if t >= wait then wait, why = t, reason end
    end
    if cost > 0 and (c.bh > 0 or c.bd > 0) then
      local hour, day = CP.budget_now(c, st, now)
      if (c.bh > 0 and cost > c.bh) or (c.bd > 0 and cost > c.bd) then
        fail('exceeds_capacity', 'a call costing $%.4f can never pass the budget of %s "%s"',
             cost, kind, h.name)
      end
      if c.bh > 0 and hour < cost then
        other = true
        local t = (cost - hour) / (c.bh / 3600.0)
        if t >= wait then wait, why = t, CONST.REASON_BUDGET end
      end
      if c.bd > 0 and day < cost then
        other = true
        local t = (cost - day) / (c.bd / 86400.0)
        if t >= wait then wait, why = t, CONST.REASON_BUDGET end
      end
    end
  end
  if not why then return nil end
  return why, wait, not other and conc or nil
end

function CP.refill_state(p, h, st, now)
  for b = 0, NB - 1 do st['lv' .. b] = CP.level_now(p, h, st, b, now) end
  if now > st.last then st.last = now end
  if not CP.has_budget(h.c) then
    st.bh, st.bd, st.blast = 0, 0, 0
    return
  end
  st.bh, st.bd = CP.budget_now(h.c, st, now)
  if now > st.blast then st.blast = now end
end

-- Takes lease l's needs from its holders' caps (at grant).
function CP.caps_take(p, hs, l, now)
  l.cusd = CP.cost_usd(p, l.n0, l.n1)
  local keys = {}
  for _, h in ipairs(hs) do
    local st = CP.holder_state(p, h, true)
    h.st = st
    CP.refill_state(p, h, st, now)
    for b = 0, NB - 1 do
      if CP.cap_capacity(p, h.c, b) > 0 then st['lv' .. b] = st['lv' .. b] - l['n' .. b] end
    end
    st.inf = st.inf + 1
    if CP.has_budget(h.c) then
      st.bh = st.bh - l.cusd
      st.bd = st.bd - l.cusd
    end
    touch(CP.holder_key(h.key))
    -- Only a holder with max_concurrent asks for its leases' expiries; "+" marks the
    -- lease as listed.
    if h.c.conc > 0 then
      redis.call('SADD', S.prefix .. 'hl:' .. h.key, F(l.id))
      keys[#keys + 1] = '+' .. h.key
    else
      keys[#keys + 1] = h.key
    end
  end
  l.caph = table.concat(keys, ',')
end

-- A lease's holders as they are now (nil: none).
function CP.lease_holders(p, l)
  if l.caph == '' then return nil end
  local hs = {}
  for entry in string.gmatch(l.caph, '[^,]+') do
    local listed = string.sub(entry, 1, 1) == '+'
    local key = listed and string.sub(entry, 2) or entry
    local h = {key = key, name = string.sub(key, 3), team = string.sub(key, 1, 1) == 't',
               c = CP.holder_caps(p, key), listed = listed}
    h.st = CP.holder_state(p, h, false)
    if h.st then hs[#hs + 1] = h end
  end
  return hs
end

-- Gives delta[b] tokens and delta_usd dollars back to lease l's holders (a settle's
-- adjustment, or the whole lease when it is refunded).
function CP.caps_give(p, hs, delta, delta_usd, now)
  for _, h in ipairs(hs) do
    local st = h.st
    CP.refill_state(p, h, st, now)
    for b = 0, NB - 1 do
      local cap = CP.cap_capacity(p, h.c, b)
      if cap > 0 then
        local level = st['lv' .. b] + delta[b]
        st['lv' .. b] = level > cap and cap or level
      end
    end
    if CP.has_budget(h.c) then
      st.bh = st.bh + delta_usd
      if st.bh > h.c.bh then st.bh = h.c.bh end
      st.bd = st.bd + delta_usd
      if st.bd > h.c.bd then st.bd = h.c.bd end
    end
    touch(CP.holder_key(h.key))
  end
end

function CP.park_key(key) return S.prefix .. 'pk:' .. key end

-- Parks ticket t on holder h (at the front when it was already woken once).
function CP.caps_park(p, h, st, t, front)
  t.park = h.key
  redis.call(front and 'LPUSH' or 'RPUSH', CP.park_key(h.key), F(t.id))
  if st.np == 0 then redis.call('SADD', K('pks'), h.key) end
  st.np = st.np + 1
  p.n_parked = p.n_parked + 1
  touch(CP.holder_key(h.key))
  touch(ticket_key(t.id))
end

function CP.caps_unpark(p, t)
  local st = load(CP.holder_key(t.park), HOLDER)
  redis.call('LREM', CP.park_key(t.park), 1, F(t.id))
  st.np = st.np - 1
  p.n_parked = p.n_parked - 1
  touch(CP.holder_key(t.park))
  t.park = ''
end

-- Moves the holder's parked tickets back to the queue, at their finish tags, while it
-- has free slots.
function CP.caps_wake(p, key)
  local st = load(CP.holder_key(key), HOLDER)
  if not st then return end
  local max = CP.holder_caps(p, key).conc
  while st.np > 0 do
    if max > 0 and st.inf + st.nw >= max then break end
    local id = redis.call('LPOP', CP.park_key(key))
    local t = id and load_ticket(tonumber(id))
    if not t then  -- never: the count and the list agree
      p.n_parked = p.n_parked - st.np
      st.np = 0
      break
    end
    st.np = st.np - 1
    p.n_parked = p.n_parked - 1
    t.park = ''
    t.woke = key
    st.nw = st.nw + 1
    touch(ticket_key(t.id))
    queue_insert(p, t)
  end
  touch(CP.holder_key(key))
end

-- A configure may have raised or lifted the caps: every holder's parked tickets that its
-- caps now let through go back to the queue (sl_engine_wake_parked).
function CP.caps_wake_all(p)
  if p.n_parked <= 0 then return end
  for _, key in ipairs(redis.call('SMEMBERS', K('pks'))) do CP.caps_wake(p, key) end
end

-- A ticket woken for a slot that it did not take: the slot goes to the next parked.
function CP.caps_unwake(p, t)
  if t.woke == '' then return end
  local key = t.woke
  t.woke = ''
  local st = load(CP.holder_key(key), HOLDER)
  if st then st.nw = st.nw - 1; touch(CP.holder_key(key)) end
  CP.caps_wake(p, key)
end

-- Lease l ended: its slots are free, its parked tickets may go on.
function CP.caps_lease_end(p, l, refund, now)
  local hs = CP.lease_holders(p, l)
  if not hs then return end
  if refund then CP.caps_give(p, hs, need_of(l), l.cusd, now) end
  for _, h in ipairs(hs) do
    h.st.inf = h.st.inf - 1
    touch(CP.holder_key(h.key))
    if h.listed then redis.call('SREM', S.prefix .. 'hl:' .. h.key, F(l.id)) end
  end
  for _, h in ipairs(hs) do if h.st.np > 0 then CP.caps_wake(p, h.key) end end
end

-- The holder of `hs` with max_concurrent whose slots are all taken (nil: none).
function CP.caps_at_concurrency(hs)
  for _, h in ipairs(hs) do
    if h.c.conc > 0 and h.st and h.st.inf >= h.c.conc then return h end
  end
  return nil
end

-- Removes a ticket from wherever it waits (the queue or a park).
function CP.ticket_detach(p, t)
  if t.park ~= '' then CP.caps_unpark(p, t)
  elseif t.ws == '1' then WS.unpark(p, t)
  else queue_remove(p, t) end
end

-- A parked ticket's ETA: its holder's release, with the tickets parked before it.
function CP.caps_parked_eta(p, t, now)
  local key = t.park
  local h = {key = key, name = string.sub(key, 3), team = string.sub(key, 1, 1) == 't',
             c = CP.holder_caps(p, key)}
  local st = load(CP.holder_key(key), HOLDER)
  local ahead = redis.call('LPOS', CP.park_key(key), F(t.id)) or 0
  return CP.caps_release_eta(p, h, st, ahead, now), h.team and CONST.REASON_TEAM or CONST.REASON_AGENT
end

-- ---- the grant history ----
-- Ports: src/engine/grants.c (which says why). The reservations ever granted, per bucket
-- (gc0..gc3 in the pool's state); the open mark's first and last grant (gof, goa); the
-- closed marks, the last GH.MARKS of them, in list K('gh') as "at,c0,c1,c2,c3". Grants
-- less than send_window_s / GH.SPLIT apart share a mark.

-- Records lease l's grant at `now` and sets its l.gc (the sums right after it).
function GH.record(p, l, now)
  if p.send_window_s > 0 and not (now - p.gof < p.send_window_s / GH.SPLIT) then
    if p.goa > -math.huge then
      local n = redis.call('RPUSH', K('gh'), string.format('%.17g,%.17g,%.17g,%.17g,%.17g',
                                                           p.goa, p.gc0, p.gc1, p.gc2, p.gc3))
      if n > GH.MARKS then redis.call('LTRIM', K('gh'), -GH.MARKS, -1) end
    end
    p.gof = now
  end
  p.goa = now
  p.gc0, p.gc1, p.gc2, p.gc3 = p.gc0 + l.n0, p.gc1 + l.n1, p.gc2 + l.n2, p.gc3 + l.n3
  l.gc = string.format('%.17g,%.17g,%.17g,%.17g', p.gc0, p.gc1, p.gc2, p.gc3)
end

-- Per bucket (index b + 1), the reservations granted after lease l and at most
-- send_window_s after it, or `sent` seconds when that is known (>= 0) and shorter; 0 when
-- the history no longer reaches back to that window's end, or l's sums are not known (an
-- older record). As the engine's sl__grants_after.
function GH.after(p, l, sent)
  local after = {0, 0, 0, 0}
  local window = p.send_window_s
  if sent >= 0 and sent < window then window = sent end
  if not (window > 0) or not l.gc or l.gc == '' then return after end
  local window_end = l.granted_at + window
  local now_sums = {p.gc0, p.gc1, p.gc2, p.gc3}
  if p.goa > window_end then
    -- Granted since the window ended: the last mark that ended in it, if still kept.
    now_sums = nil
    local marks = redis.call('LRANGE', K('gh'), 0, -1)
    for i = #marks, 1, -1 do
      local at, c0, c1, c2, c3 = string.match(marks[i], '^([^,]+),([^,]+),([^,]+),([^,]+),([^,]+)$')
      if tonumber(at) <= window_end then
        now_sums = {tonumber(c0), tonumber(c1), tonumber(c2), tonumber(c3)}
        break
      end
    end
    if not now_sums then return after end
  end
  local b = 1
  for mine in string.gmatch(l.gc, '[^,]+') do
    local d = now_sums[b] - tonumber(mine)
    after[b] = d > 0 and d or 0
    b = b + 1
  end
  return after
end

-- t: {agent, ck, model, est, n0..n3, cached, pen}; g its team's record, `finish`
-- and `outer` its inner and outer tags; returns the lease record.
local function grant(p, a, t, weight, g, finish, outer, ttl, ticket, waited, now, hs)
  local id = new_id(p)
  local claimed = ticket == 0
  local l = {id = id, agent = a.agent, ticket = ticket, _own = 0, ck = t.ck,
    model = t.model, est = t.est, n0 = t.n0, n1 = t.n1, n2 = t.n2, n3 = t.n3,
    cached = t.cached, pen = t.pen, pt = t.pt, weight = weight, granted_at = now, waited = waited,
    ttl = ttl, claimed = claimed and 1 or 0,
    exp = now + (claimed and ttl or p.claim_timeout_s), cusd = 0, caph = '', cttl = t.cttl or '',
    ogrp = t.ogrp or ''}
  CONST.add_over(l, t)
  if hs then CP.caps_take(p, hs, l, now) end
  local rg = {}
  for b = 0, NB - 1 do
    if limited(p, b) then p['lv' .. b] = p['lv' .. b] - l['n' .. b] end
    p['rs' .. b] = p['rs' .. b] + l['n' .. b]
    local reserve = p['lim' .. b] - capacity(p, b)
    rg[#rg + 1] = string.format('%.17g:%.17g', p['lv' .. b] + reserve, reserve)
  end
  l.rg = table.concat(rg, ',')
  GH.record(p, l, now)
  RP.charge(p, l.n2, now)
  p.in_flight = p.in_flight + 1
  p.granted_total = p.granted_total + 1
  if finish > g.vtime then g.vtime = finish end
  g.lo = outer
  g.base = outer
  S.qid = nil  -- the team's outer tags moved: another team's head may lead now
  touch(team_key(g.name))
  if outer > p.vtime then p.vtime = outer end
  if finish > a.lf then a.lf = finish end
  a.leases = a.leases + 1
  touch(agent_key(a.agent))
  create(lease_key(id), LEASE, l)
  zput(p, 'lx', 'lx_at', id, nil, l.exp)
  emit('granted', {agent = a.agent, lease = id, ticket = ticket, input_tokens = l.n0,
                   output_tokens = l.n1, weight = weight, waited = waited})
  return l
end

local function lease_end(p, l, state, refund, now)
  if state ~= END_SETTLED then
    local kind = state == END_REAPED and 'reaped' or (l.claimed == 1 and 'cancelled' or 'unclaimed')
    emit(kind, {agent = l.agent, lease = l.id, ticket = l.ticket, input_tokens = l.n0,
                output_tokens = l.n1})
  end
  for b = 0, NB - 1 do
    if refund then adjust(p, b, l['n' .. b]) end
    p['rs' .. b] = p['rs' .. b] - l['n' .. b]
  end
  if refund then RP.charge(p, -l.n2, now) end
  CP.caps_lease_end(p, l, refund, now)
  p.in_flight = p.in_flight - 1
  local a = agent_get(l.agent, false)
  if a then a.leases = a.leases - 1; touch(agent_key(l.agent)) end
  lease_forget(p, l, state)
end

local function tomb_add(p, id, state, lease, lease_pool)
  local v = state .. ':' .. F(lease)
  if lease_pool then v = v .. ':' .. lease_pool end  -- granted by another key (KQ)
  redis.call('HSET', K('tend'), F(id), v)
  redis.call('ZADD', K('tendz'), F(S.now), F(id))
  local due = S.now + p.tombstone_ttl_s
  if due < p.purge_at then p.purge_at = due end
end

-- Ends a ticket that is no longer in the queue.
local function ticket_end(p, t, state, lease, now, lease_pool)
  if state == END_CANCELLED or state == END_EXPIRED then
    emit(state == END_CANCELLED and 'ticket_cancelled' or 'ticket_expired',
         {agent = t.agent, ticket = t.id, waited = now - t.enq})
  end
  zdel(p, 'ti', 'ti_at', t.id, t.held == 0 and t.idle_at or nil)
  CP.caps_unwake(p, t)
  local a = agent_get(t.agent, false)
  if a then a.queued = a.queued - 1; touch(agent_key(t.agent)) end
  tomb_add(p, t.id, state, lease, lease_pool)
  drop(ticket_key(t.id))
end

local function load_lease(id) return load(lease_key(id), LEASE) end

-- A queued ticket whose cache lapsed while it waited: the provider will bill the prefix
-- again, so its need grows by it, once, before the grant; its place in the queue stays,
-- and a team left empty by the removal gets its start tag back. Left as it is when the
-- larger need could never fit (engine: sl__ticket_cache_lapsed).
local function ticket_cache_lapsed(p, t, now)
  if t.pen == 1 or t.cached <= 0 or p.cache_reads_count ~= 0 then return end
  if cache_warm(p, cache_view(t.ck), now) then return end
  local cold = {[0] = t.n0 + t.cached, t.n1, t.n2, t.n3 + t.cached}
  for b = 0, NB - 1 do
    if limited(p, b) and cold[b] > capacity(p, b) then return end
  end
  local g = team_get(t.team, true)
  local base = g.base
  queue_remove(p, t)
  t.n0, t.n3, t.pen = cold[0], cold[3], 1
  queue_insert(p, t)
  g.base = base
  touch(ticket_key(t.id))
end

-- ---- backfilling ----
-- Ports: src/engine/backfill.c (its essay says why). Past a blocked head, a ticket among
-- the first BF.WINDOW of the queue order (head included) is granted when it fits now and
-- takes only what the head does not need now (a bucket that holds the head's need keeps
-- it, one the head waits for is not touched); a concurrency slot stays free for the
-- head; it shares no max_concurrent holder with the head; and the head stays the head
-- once the candidate's team has paid. The section's functions live in one table (the
-- main chunk's 200 locals).
local BF = {WINDOW = 16}

-- The first `max` queued tickets of the pool's order, the head first (loaded records): a
-- merge of the teams' queues by outer tag (ties to the team seen first, as queue_head),
-- reading one ticket at a time from the team chosen, so about max + teams reads.
function BF.window(p, max)
  local teams = team_list()
  local cur = {}
  local function advance(i)
    local c = cur[i]
    c.idx = c.idx + 1
    c.t = nil
    if c.idx >= c.g.qn then return end
    local m = redis.call('ZRANGE', team_q(c.g.name), c.idx, c.idx)
    if #m == 0 then return end
    c.t = load_ticket(parse_member(m[1]))
    c.acc = c.acc + c.t.cost
    c.outer = c.g.base + c.acc / c.w
  end
  for i = 1, #teams do
    local g = team_get(teams[i], false)
    cur[i] = {g = g, idx = -1, acc = 0, w = g and team_weight(p, g.name) or 1}
    if g and g.qn > 0 then advance(i) end
  end
  local out = {}
  while #out < max do
    local best
    for i = 1, #teams do
      if cur[i].t and (not best or cur[i].outer < cur[best].outer) then best = i end
    end
    if not best then break end
    out[#out + 1] = cur[best].t
    advance(best)
  end
  return out
end

function BF.share_concurrency_holder(a, b)
  if not a or not b then return false end
  for _, h in ipairs(a) do
    if h.c.conc > 0 then
      for _, k in ipairs(b) do if k.key == h.key then return true end end
    end
  end
  return false
end

function BF.head_keeps_lead(p, head, g, c)
  local teams = team_list()
  if #teams == 1 or g.name ~= head.team then return true end
  local outer = (g.base + head.cost / team_weight(p, g.name)) + c / team_weight(p, g.name)
  for i = 1, #teams do
    local o = teams[i] ~= g.name and team_get(teams[i], false)
    if o and o.qn > 0 then
      local h = redis.call('ZRANGE', team_q(o.name), 0, 0)
      local other = o.base + load_ticket(parse_member(h[1])).cost / team_weight(p, o.name)
      if other < outer or (other == outer and o.order < g.order) then return false end
    end
  end
  return true
end

function BF.admits(p, head, need, hs, g, c, now)
  if not fits(p, need, now) then return false end
  if p.concurrency > 0 and p.concurrency - p.in_flight < 2 then return false end
  for b = 0, NB - 1 do
    if limited(p, b) and need[b] ~= 0 and need[b] > p['lv' .. b] - head['n' .. b] then
      return false
    end
  end
  local q = RP.parent(p)  -- the parent's request bucket, likewise
  if q and need[2] ~= 0 and need[2] > RP.level(q, now) - head.n2 then return false end
  if hs and BF.share_concurrency_holder(hs, CP.caps_resolve(p, head.agent)) then return false end
  return BF.head_keeps_lead(p, head, g, c)
end

-- The tags of a backfill grant of team g: its inner V unmoved, the outer tag its base
-- plus cost / team weight (the team pays).
function BF.tags(p, g, c)
  local base = g.qn > 0 and g.base or (p.vtime > g.lo and p.vtime or g.lo)
  return g.vtime, base + c / team_weight(p, g.name)
end

function BF.backfill(p, head, now)
  if p.blocked_until > now then return end  -- a provider retry-after holds every grant
  if p.concurrency > 0 and p.concurrency - p.in_flight < 2 then return end  -- no slot to lend
  local win = BF.window(p, BF.WINDOW)
  for i = 2, #win do
    local t = win[i]
    local hs = CP.caps_resolve(p, t.agent)
    local g = team_get(t.team, true)
    local capped = hs and CP.caps_at_concurrency(hs)
    -- As at the head: a cache that lapsed while it waited is billed again.
    if not capped then ticket_cache_lapsed(p, t, now) end
    if not capped and
        BF.admits(p, head, need_of(t), hs, g, t.cost, now) then
      local finish, outer = BF.tags(p, g, t.cost)
      queue_remove(p, t)
      local a = agent_get(t.agent, true)
      local l = grant(p, a, t, t.weight, g, finish, outer, t.ttl, t.id, now - t.enq, now, hs)
      ticket_end(p, t, END_GRANTED, l.id, now)
    end
  end
end

-- Seconds until backfilling would grant a request of `need` (holders hs, team g, cost c)
-- standing in the window behind the blocked head, `upto` the needs of the tickets ahead of
-- it (the head's included) plus its own: the buckets it uses hold them all before the head
-- fits; and the bucket it waits for. math.huge when it will not pass that way, or would
-- pass now (engine: sl__backfill_eta).
function BF.eta(p, need, upto, hs, g, c, now)
  if p.backfill == 0 then return math.huge end
  if p.concurrency > 0 and p.concurrency - p.in_flight < 2 then return math.huge end
  local id = queue_head(p)
  if not id then return math.huge end
  local head = load_ticket(id)
  local sums = {}
  for b = 0, NB - 1 do
    sums[b] = need[b] == 0 and -math.huge or upto[b]
    if limited(p, b) and sums[b] > capacity(p, b) then return math.huge end
  end
  if hs and BF.share_concurrency_holder(hs, CP.caps_resolve(p, head.agent)) then
    return math.huge
  end
  if not BF.head_keeps_lead(p, head, g, c) then return math.huge end
  local eta, why = eta_for(p, sums, 0, now)
  if not (eta > 0) then return math.huge end  -- it would pass now: something else holds it
  if not (eta < eta_for(p, need_of(head), 0, now)) then return math.huge end  -- head first
  return eta, why
end

-- When the refill alone next lets a queued ticket of the window pass the blocked head (its
-- buckets hold its need plus the head's), after the last refill; math.huge when none will
-- (engine: sl__backfill_next_at). For the pool's wake-up.
function BF.next_at(p, head)
  if p.backfill == 0 then return math.huge end
  if p.concurrency > 0 and p.concurrency - p.in_flight < 2 then return math.huge end
  local win = BF.window(p, BF.WINDOW)
  local at = math.huge
  for i = 2, #win do
    local need, sums, never = need_of(win[i]), {}, false
    for b = 0, NB - 1 do
      -- A bucket it does not use is no condition (the head's need there is not).
      sums[b] = need[b] == 0 and -math.huge or need[b] + head['n' .. b]
      if limited(p, b) and sums[b] > capacity(p, b) then never = true end
    end
    if not never then
      local eta = eta_for(p, sums, 0, p.last_refill)
      -- Nothing to wait for: the last drain judged it and something else held it back.
      if eta > 0 and p.last_refill + eta + 1e-6 < at then at = p.last_refill + eta + 1e-6 end
    end
  end
  return at
end

-- ---- the working set ----
-- Ports: src/engine/admit.c (its essay says why). A request whose cache identity was never
-- settled is a task's first call; with `working_set` it goes only when nothing is queued
-- and it fits, else it waits parked (never rejected for the wait): per team a sorted set
-- P.."w:<team>" by inner tag (the queue's member format), all of them by arrival in
-- P.."wsa", their count and summed needs in ws_n and ws0..ws3. Admitted when the queue is
-- empty in the order of P.."wsk": arrival - WS.LEVEL cache lives x its task's remaining
-- chain (graph.c; the member starts with the seq, so ties go by arrival); after WS.LIVES
-- cache lives a parked one joins the queue at its tag.
WS.LIVES = 10
WS.LEVEL = 3

function WS.key(team) return S.prefix .. 'w:' .. team end

function WS.is_first_call(p, cache)
  return p.working_set ~= 0 and not (cache and cache.rec[cache.ls] > -math.huge)
end

function WS.open(p) return p.qn == 0 and p.ws_n == 0 end

function WS.park(p, t, depth)
  redis.call('ZADD', WS.key(t.team), F(t.finish), qmember(t))
  redis.call('ZADD', K('wsk'), F(t.enq - WS.LEVEL * p.cache_ttl_s * depth), qmember(t))
  redis.call('ZADD', K('wsa'), F(t.enq), F(t.id))
  for b = 0, NB - 1 do p['ws' .. b] = p['ws' .. b] + t['n' .. b] end
  p.ws_n = p.ws_n + 1
  t.ws = '1'
  touch(ticket_key(t.id))
end

function WS.unpark(p, t)
  redis.call('ZREM', WS.key(t.team), qmember(t))
  redis.call('ZREM', K('wsk'), qmember(t))
  redis.call('ZREM', K('wsa'), F(t.id))
  for b = 0, NB - 1 do p['ws' .. b] = p['ws' .. b] - t['n' .. b] end
  p.ws_n = p.ws_n - 1
  t.ws = ''
  touch(ticket_key(t.id))
end

-- When the oldest parked first call joins the queue (math.huge: none parked).
function WS.next_at(p)
  if p.ws_n <= 0 then return math.huge end
  local at = zmin(K('wsa')) + WS.LIVES * p.cache_ttl_s
  local again_at = p.ws_prom + p.cache_ttl_s
  return at > again_at and at or again_at
end

-- The oldest parked first call past its bound joins the queue, at most one per cache life
-- (ws_prom: when the last one did).
function WS.promote(p, now)
  if WS.next_at(p) > now then return end
  local t = load_ticket(tonumber(redis.call('ZRANGE', K('wsa'), 0, 0)[1]))
  WS.unpark(p, t)
  queue_insert(p, t)
  p.ws_prom = now
end

-- The parked first call to admit next: the lowest admission key, then the first to arrive.
function WS.next(p)
  if p.ws_n <= 0 then return nil end
  local id = parse_member(redis.call('ZRANGE', K('wsk'), 0, 0)[1])
  return load_ticket(id)
end

function WS.grant(p, now)
  while p.qn == 0 do
    local t = WS.next(p)
    if not t or not fits(p, need_of(t), now) then return end
    local hs = CP.caps_resolve(p, t.agent)
    local full = hs and CP.caps_at_concurrency(hs)
    WS.unpark(p, t)
    if full then  -- admitted, it waits for its holder's release, as a capped head does
      CP.caps_park(p, full, full.st, t, false)
    else
      -- Every team queue is empty: it is its team's head, as a request arriving now.
      local g = team_get(t.team, true)
      local base = p.vtime > g.lo and p.vtime or g.lo
      local outer = base + t.cost / team_weight(p, t.team)
      local a = agent_get(t.agent, true)
      local l = grant(p, a, t, t.weight, g, t.finish, outer, t.ttl, t.id, now - t.enq, now, hs)
      ticket_end(p, t, END_GRANTED, l.id, now)
    end
  end
end

-- A settle made lease l's cache known for the first time: the first calls parked with that
-- cache identity continue a task now and join the queue at their tags (engine:
-- sl__admit_settled; the settle drains).
function WS.settled(p, l)
  if p.ws_n <= 0 then return end
  for _, id in ipairs(redis.call('ZRANGE', K('wsa'), 0, -1)) do
    local t = load_ticket(tonumber(id))
    if t and t.ck == l.ck then
      WS.unpark(p, t)
      queue_insert(p, t)
    end
  end
end

-- The working set was turned off: every parked first call joins the queue at its tag
-- (engine: sl__admit_release_all).
function WS.release_all(p)
  while p.ws_n > 0 do
    local t = load_ticket(tonumber(redis.call('ZRANGE', K('wsa'), 0, 0)[1]))
    WS.unpark(p, t)
    queue_insert(p, t)
  end
end

-- A parked first call's ETA: behind every queued and parked request (a `parked` one's need
-- is among them); also their count.
function WS.eta(p, need, parked, now)
  local sums = {}
  for b = 0, NB - 1 do
    sums[b] = (parked and 0 or need[b]) + p['qs' .. b] + p['ws' .. b]
  end
  local ahead = p.qn + p.ws_n - (parked and 1 or 0)
  return eta_for(p, sums, ahead, now), ahead
end

local function drain(p, now)
  if p.ws_n > 0 then WS.promote(p, now) end
  while true do
    local id = queue_head(p)
    if not id then break end
    local t = load_ticket(id)
    ticket_cache_lapsed(p, t, now)  -- it stays the head
    if not fits(p, need_of(t), now) then
      if p.backfill ~= 0 then BF.backfill(p, t, now) end
      break
    end
    local g = team_get(t.team, true)
    local outer = g.base + t.cost / team_weight(p, t.team)
    queue_remove(p, t)
    -- The caps as they are now (a reload may have changed them since it queued).
    local hs = CP.caps_resolve(p, t.agent)
    local full = hs and CP.caps_at_concurrency(hs)
    if full then  -- its holder has no free slot: it waits for the holder's release
      local woke = t.woke
      t.woke = ''
      CP.caps_park(p, full, full.st, t, true)
      if woke ~= '' then CP.caps_unwake(p, {woke = woke}) end
    else
      local a = agent_get(t.agent, true)
      local l = grant(p, a, t, t.weight, g, t.finish, outer, t.ttl, t.id, now - t.enq, now, hs)
      ticket_end(p, t, END_GRANTED, l.id, now)
    end
  end
  if p.ws_n > 0 and p.qn == 0 then WS.grant(p, now) end
  if p.key_group ~= 0 then
    KQ.drain(p, now)
    KQ.push(p, now)
  end
end

local function reject_unfit(p, now)
  local unfit = {}
  if p.n_parked > 0 then  -- the parked tickets (caps) are not in the queue's bounds
    for _, key in ipairs(redis.call('SMEMBERS', K('pks'))) do
      for _, id in ipairs(redis.call('LRANGE', CP.park_key(key), 0, -1)) do
        local t = load_ticket(tonumber(id))
        for b = 0, NB - 1 do
          if limited(p, b) and t['n' .. b] > capacity(p, b) then unfit[#unfit + 1] = t.id; break end
        end
      end
    end
  end
  -- qm0..qm3 bound the largest need queued since the queue was last empty: when every
  -- one fits, nothing is read (a margin cut with a deep queue stays one cheap call).
  local any = false
  for b = 0, NB - 1 do any = any or (limited(p, b) and p['qm' .. b] > capacity(p, b)) end
  local teams = (any and p.qn > 0) and team_list() or {}
  for i = 1, #teams do
    for _, m in ipairs(redis.call('ZRANGE', team_q(teams[i]), 0, -1)) do
      local id, n = parse_member(m)
      for b = 0, NB - 1 do
        if limited(p, b) and n[b] > capacity(p, b) then unfit[#unfit + 1] = id; break end
      end
    end
  end
  if p.ws_n > 0 then  -- and the working set's parked first calls
    for _, id in ipairs(redis.call('ZRANGE', K('wsa'), 0, -1)) do
      local t = load_ticket(tonumber(id))
      for b = 0, NB - 1 do
        if limited(p, b) and t['n' .. b] > capacity(p, b) then unfit[#unfit + 1] = t.id; break end
      end
    end
  end
  for _, id in ipairs(unfit) do
    local t = load_ticket(id)
    CP.ticket_detach(p, t)
    emit('ticket_rejected', {agent = t.agent, ticket = t.id,
                             retry_at = now + margin_wait_for(p, need_of(t), now),
                             reason = QUEUE_WAIT})
    ticket_end(p, t, END_REJECTED, 0, now)
  end
end

-- A 429 against lease `id`: cuts once per congestion event (a lease granted before the
-- last cut belongs to that cut's event: the id counter at the cut tells); returns
-- whether it cut.
local function margin_cut(p, id, now)
  if id_n(p, id) < p.cut_n then return false end
  p.cut_n = p.next_n
  p.climb_n = p.next_n
  local old = p.margin_bp
  p.margin_bp = p.margin_bp - p.down_bp < p.floor_bp and p.floor_bp or p.margin_bp - p.down_bp
  p.clean_since = now
  if p.margin_bp <= p.floor_bp and p.floor_since < 0 then p.floor_since = now end
  clamp_levels(p)
  if p.margin_bp ~= old then
    emit('margin', {margin = margin(p)})
    reject_unfit(p, now)
  end
  return true
end

-- Drops the entries of a hash and its time index that are `ttl` old; returns when the
-- next one will be.
local function purge_set(hash, zset, ttl, now)
  local due = redis.call('ZRANGEBYSCORE', zset, '-inf', F(now - ttl), 'WITHSCORES')
  local gone = {}
  for i = 1, #due, 2 do
    -- at + ttl <= now, computed the engine's way for the boundary
    if tonumber(due[i + 1]) + ttl <= now then gone[#gone + 1] = due[i] end
  end
  for i = 1, #gone, 1000 do
    local j = i + 999 < #gone and i + 999 or #gone
    redis.call('HDEL', hash, unpack(gone, i, j))
    redis.call('ZREM', zset, unpack(gone, i, j))
  end
  return zmin(zset) + ttl
end

-- p.purge_at is when the oldest tombstone or idempotency entry falls due: until then
-- there is nothing to purge and no query is made.
local function purge_old(p, now)
  if p.purge_at > now then return end
  local tomb = purge_set(K('tend'), K('tendz'), p.tombstone_ttl_s, now)
  local idem = purge_set(K('idem'), K('idemz'), p.idempotency_ttl_s, now)
  p.purge_at = tomb < idem and tomb or idem
end

-- When the configured reset clears the spend_cap alert (math.huge: never).
local function spend_cap_reset_at(p)
  if p.alert_spend_cap == 0 or p.spend_cap_reset_s <= 0 then return math.huge end
  return p.spend_cap_at + p.spend_cap_reset_s
end

local function spend_cap_alert(p, active)
  local v = active and 1 or 0
  if p.alert_spend_cap == v then return end
  p.alert_spend_cap = v
  emit('alert', {alert = 'spend_cap', active = v})
end

local function pool_advance(p, now)
  if spend_cap_reset_at(p) <= now then spend_cap_alert(p, false) end
  margin_advance(p, now)
  refill(p, now)
  CALL.hold_release(p, now)
  while p.lx_at <= now do
    local due = redis.call('ZRANGEBYSCORE', K('lx'), '-inf', F(now), 'LIMIT', 0, 1)
    if #due == 0 then p.lx_at = zmin(K('lx')); break end
    local l = load_lease(tonumber(due[1]))
    -- A grant its client never learned of was never used: refund it.
    lease_end(p, l, l.claimed == 1 and END_REAPED or END_CANCELLED, l.claimed == 0, now)
  end
  while p.ti_at <= now do
    local due = redis.call('ZRANGEBYSCORE', K('ti'), '-inf', F(now), 'LIMIT', 0, 1)
    if #due == 0 then p.ti_at = zmin(K('ti')); break end
    local t = load_ticket(tonumber(due[1]))
    CP.ticket_detach(p, t)
    ticket_end(p, t, END_EXPIRED, 0, now)
  end
  drain(p, now)
  purge_old(p, now)
end

local function next_wakeup(p)
  local at = margin_next_step_at(p)
  local reset_at = spend_cap_reset_at(p)
  if reset_at < at then at = reset_at end
  if p.lx_at < at then at = p.lx_at end
  if p.ti_at < at then at = p.ti_at end
  if p.hu > 0 and p.hu < at then at = p.hu end
  local ws_at = WS.next_at(p)
  if ws_at < at then at = ws_at end
  local id = queue_head(p)
  local t = id and load_ticket(id)
  -- The next first call, even when its holder's max_concurrent holds it: once it fits, the
  -- drain parks it on that holder and admits the first calls after it (WS.grant).
  if not t and p.ws_n > 0 then t = WS.next(p) end
  -- At the pool's concurrency nothing goes before a release, which drains (and an expiry
  -- is a wake-up above): the head's expected release time would come back every time it
  -- passed without one, every microsecond when leases take no time.
  if p.concurrency > 0 and p.in_flight >= p.concurrency then t = nil end
  if t then
    local eta = eta_for(p, need_of(t), 0, p.last_refill)
    local eta_at = p.last_refill + eta + 1e-6
    if eta_at < at then at = eta_at end
    -- A queued head that waits may be passed by what the refill makes room for.
    if eta > 0 and id then
      local bf_at = BF.next_at(p, t)
      if bf_at < at then at = bf_at end
    end
  end
  if p.key_group ~= 0 then
    local push_at = KQ.push_at(p)
    if push_at < at then at = push_at end
  end
  return at
end

-- ---- the pool: configuration and hot state ----
-- Ports: src/engine/pool.c.

-- The configure fields every caller sends, in the order of the stored record, and those
-- appended later (optional, with configure's default for a caller that does not send
-- them): both from fcall.def, the names the C backend sends.
local CONFIG_FIELDS = FCALL.config
local CONFIG_LATER = FCALL.config_later

-- The configuration as configure() wrote it, with the margin steps in basis points.
-- Limits adopted from provider headers are hot state (lim0..lim3), not configuration.
local CFG
do
  local numbers = {}
  for i = 1, #CONFIG_FIELDS do numbers[i] = CONFIG_FIELDS[i] end
  local derived = {'start_bp', 'floor_bp', 'up_bp', 'down_bp', 'pool_no', 'cold_empty'}
  for i = 1, #derived do numbers[#numbers + 1] = derived[i] end
  -- Appended later, optional in configure (an older caller's pool reads them as 0).
  for i = 1, #CONFIG_LATER do numbers[#numbers + 1] = CONFIG_LATER[i][1] end
  CFG = codec({'roles', 'prios', 'teams', 'members'}, numbers, nil, {'caps'})
end

-- lx_at, ti_at: the lowest scores of lx and ti (math.huge: empty); qn: the queue's
-- length; purge_at: when the oldest tombstone or idempotency entry falls due; agreed_at
-- and agreed_bits: unused since the margin climbs a step per round trip (climb_n, the
-- id counter at the last margin change), kept so the record's layout stays.
ST = codec({}, {'now', 'last_refill', 'lv0', 'lv1', 'lv2', 'lv3', 'rs0', 'rs1', 'rs2', 'rs3',
  'qs0', 'qs1', 'qs2', 'qs3', 'qm0', 'qm1', 'qm2', 'qm3', 'lim0', 'lim1', 'lim2', 'lim3', 'margin_bp', 'clean_since',
  'floor_since', 'alert_floor', 'alert_spend_cap', 'blocked_until', 'in_flight', 'vtime', 'seq',
  'next_n', 'granted_total', 'queued_total', 'rejected_total', 'upstream_429_total', 'qn',
  'lx_at', 'ti_at', 'purge_at', 'epoch', 'first_n', 'cold_until', 'cold_raised', 'lost_until',
  'lease_mean_s', 'lease_samples', 'spend_cap_at', 'n_parked', 'agreed_at', 'cut_n',
  'ablk_until', 'ws_n', 'ws0', 'ws1', 'ws2', 'ws3', 'ws_prom', 'agreed_bits', 'climb_n',
  'og', 'oh', 'hu', 'h0', 'h1', 'h2', 'h3',  -- og..h3: CALL.hold_gap (0 from an older record)
  'gc0', 'gc1', 'gc2', 'gc3', 'gof', 'goa',  -- gc0..goa: GH, the grant history
  'rf1', 'rf3', 'rfn'})  -- QE: the refund shares of the queue's ETA and their count

-- "planner=3,reviewer=2,worker=1" as a table; the first entry of a name wins, and a
-- value that is not a number is `false` (the name is then not usable).
local function class_map(list)
  local m = {}
  for entry in string.gmatch(list, '[^,]+') do
    local n, v = string.match(entry, '^(.-)=(.*)$')
    if n ~= nil and m[n] == nil then m[n] = tonumber(v) or false end
  end
  return m
end

-- Decoded configurations by their stored bytes. The key is the exact value read, so a
-- reconfigured or recreated pool can never see a stale entry; the cache only saves the
-- decoding. Each entry is the metatable that lends the configuration to the pool's hot
-- state (p.lease_ttl_s reads the configuration, p.lv0 the state).
local CFGS, N_CFGS = {}, 0
local function config_mt(s)
  local mt = CFGS[s]
  if mt then return mt end
  if N_CFGS >= 256 then CFGS, N_CFGS = {}, 0 end
  local cfg = decode(CFG, s)
  cfg.role_v = class_map(cfg.roles)
  cfg.prio_v = class_map(cfg.prios)
  cfg.team_w = class_map(cfg.teams)
  cfg.member_of = {}
  for entry in string.gmatch(cfg.members, '[^,]+') do
    local agent, team = string.match(entry, '^(.-)=(.*)$')
    if agent ~= nil then cfg.member_of[agent] = team end
  end
  cfg.caps_of = CP.caps_parse(cfg.caps)
  mt = {__index = cfg}
  CFGS[s] = mt
  N_CFGS = N_CFGS + 1
  return mt
end


-- ---- one queue over the keys ----
-- Ports: src/engine/keyqueue.c. The keys of a pool with `keys:` are pools "POOL:KEY" of one
-- nonzero key_group; a key whose own queue is empty after its drain grants the heads of
-- its siblings' queues (the longest waiting first) while each fits it and not its own
-- key, and is not pinned to it. Each pool lives in its own slot ({POOL:KEY}), so this
-- reads and writes the siblings' keys from this pool's call: on one Redis server that is
-- one atomic call; on a Cluster the siblings' keys are on other slots, the reads fail
-- (redis.pcall) and each key's queue stays its own. Siblings are the registry's pools
-- named "POOL:<name>" (sluice:{registry}:pools, where every replica registers its pools).

-- Switches the call to pool `name`'s keys (S.prefix and the per-pool caches of S);
-- returns what KQ.leave restores (the keys, not the queue caches).
function KQ.enter(name)
  local saved = {prefix = S.prefix, fixed = S.fixed, pool = S.pool, pool_key = S.pool_key}
  S.prefix = 'sluice:{' .. name .. '}:'
  S.pool_key = S.prefix .. 'pool'
  S.pool = name
  S.fixed = FIXED[S.prefix]
  if not S.fixed then S.fixed = {}; FIXED[S.prefix] = S.fixed end
  S.tl, S.qid, S.qouter = nil, nil, nil
  return saved
end

-- The queue caches (S.tl, S.qid, S.qouter) are not restored but dropped: what was done
-- inside may have changed the pool returned to (KQ.push's sibling takes this pool's head
-- by entering it again), and a head kept from before named a ticket that had ended
-- (keys_push_then_drain.scn). They are rebuilt from Redis when next asked.
function KQ.leave(saved)
  S.prefix, S.fixed, S.pool, S.pool_key = saved.prefix, saved.fixed, saved.pool, saved.pool_key
  S.tl, S.qid, S.qouter = nil, nil, nil
end

-- The entered pool's hot state with its configuration, or nil (gone, another layout, or
-- on another Cluster slot).
function KQ.load()
  local raw = redis.pcall('HMGET', S.pool_key, 'cfg', 'st')
  if type(raw) ~= 'table' or raw.err or not raw[1] or not raw[2] then return nil end
  local ok, st = pcall(decode, ST, raw[2])
  local okc, mt = pcall(config_mt, raw[1])
  if not ok or not okc then return nil end
  return setmetatable(st, mt)
end

-- The other keys' pools of this pool's key group, by name: "POOL:*" of "POOL:KEY", and
-- "POOL:*:long_context" of a key's long-context pool "POOL:KEY:long_context" (sluiced's
-- name; its key group is the long-context pools of the keys: RP's section).
function KQ.siblings()
  local group = string.match(S.pool, '^(.*):[^:]*$')
  if not group then return {} end
  local tail = ''
  if string.sub(S.pool, -#RP.SUFFIX) == RP.SUFFIX then
    group = string.match(group, '^(.*):[^:]*$')
    tail = RP.SUFFIX
    if not group then return {} end
  end
  local all = redis.pcall('HKEYS', 'sluice:{registry}:pools')
  if type(all) ~= 'table' or all.err then return {} end
  local prefix, out = group .. ':', {}
  for _, n in ipairs(all) do
    local key = string.sub(n, 1, #prefix) == prefix and string.sub(n, #prefix + 1, #n - #tail)
    if n ~= S.pool and key and key ~= '' and not string.find(key, ':', 1, true) and
        string.sub(n, #n - #tail + 1) == tail then
      out[#out + 1] = n
    end
  end
  table.sort(out)
  return out
end

-- Grants best.t (the head of sibling best.name's queue, whose state is best.q) on p when
-- it fits p now; false, with nothing changed, when it does not.
function KQ.take(p, best, now)
  local t, q = best.t, best.q
  local n = KQ.need_on(p, q, t, now)
  local need = need_of(n)
  local a = agent_get(t.agent, false)
  for b = 0, NB - 1 do
    if limited(p, b) and need[b] > capacity(p, b) then return false end
  end
  if not fits(p, need, now) then return false end
  if p.ablk_until > now then
    local until_s = tonumber(redis.call('HGET', K('ablk'), t.agent) or '')
    if until_s and until_s > now then return false end
  end
  local hs = CP.caps_resolve(p, t.agent)
  if hs then
    local ok, why = pcall(CP.caps_check, p, hs, need, now)
    if not ok or why then return false end
  end
  a = a or agent_get(t.agent, true)
  local g = team_get(team_of(p, t.agent), true)
  -- Its tags in p as an arrival now: served by p's clock, never ahead of it.
  local cst = cost(p, need)
  local start = g.vtime > a.lf and g.vtime or a.lf
  local finish = start + cst / t.weight
  local _, _, outer = queue_place(p, g, finish, nil, cst)
  local tt = {ck = t.ck, model = t.model, est = t.est, n0 = n.n0, n1 = n.n1,
              n2 = n.n2, n3 = n.n3, cached = t.cached, pen = n.pen, pt = t.pt, cttl = t.cttl,
              ogrp = t.ogrp, over = t.over}
  local l = grant(p, a, tt, t.weight, g, finish, outer, t.ttl, t.id, now - t.enq, now, hs)
  local here = S.pool
  local saved = KQ.enter(best.name)
  queue_remove(q, t)
  ticket_end(q, t, END_GRANTED, l.id, now, here)
  if q.now < now then q.now = now end
  redis.call('HSET', S.pool_key, 'st', encode(ST, q))
  KQ.leave(saved)
  return true
end

function KQ.drain(p, now)
  if p.qn > 0 or p.ws_n > 0 then return end
  local names = KQ.siblings()
  while p.qn == 0 and p.ws_n == 0 and #names > 0 do
    local best = nil
    for _, name in ipairs(names) do
      local saved = KQ.enter(name)
      local q = KQ.load()
      if q and q.key_group == p.key_group and q.qn > 0 and q.now <= now then
        refill(q, now)  -- as its own drain would see it now
        local id = queue_head(q)
        local t = id and load_ticket(id)
        if t and t.pin ~= '1' and not fits(q, need_of(t), now) and
            (not best or t.enq < best.t.enq or (t.enq == best.t.enq and t.id < best.t.id)) then
          best = {name = name, q = q, t = t}
        end
      end
      KQ.leave(saved)
    end
    if not best or not KQ.take(p, best, now) then return end
  end
end

-- The need of request t queued on key `own`, as key p, the pool the
-- call is in, charges it: a provider's cache is per workspace, so a prefix warm on its
-- own key is charged as uncached input when p's cache for it is cold.
function KQ.need_on(p, own, t, now)
  local c = cache_view(t.ck)
  local n = {n0 = t.n0, n1 = t.n1, n2 = t.n2, n3 = t.n3, pen = t.pen}
  if t.pen == 0 and t.cached > 0 and not cache_warm(p, c, now) and p.cache_reads_count == 0 and
      own.cache_reads_count == 0 then
    n.n0, n.n3, n.pen = n.n0 + t.cached, n.n3 + t.cached, 1
  end
  return n
end

-- When sibling q (entered, its queue empty) would fit the tickets ahead of request t on
-- p (their needs with its own sum to `sums`, `ahead` of them) and t itself: q takes them
-- as p's heads. nil when q can never hold it. As the engine's sibling_eta (keyqueue.c).
function KQ.sibling_eta(q, p, t, agent, sums, ahead, now)
  local n = KQ.need_on(q, p, t, now)
  local qs = {}
  for b = 0, NB - 1 do
    local nb = n['n' .. b]
    if limited(q, b) and (nb > capacity(q, b) or nb > q['lim' .. b] * q.margin_start) then
      return nil
    end
    qs[b] = sums[b] - t['n' .. b] + nb
  end
  local eta, why = eta_for(q, qs, ahead, now)
  if q.ablk_until > now then  -- its agent's own retry-after on q
    local until_s = tonumber(redis.call('HGET', K('ablk'), agent) or '')
    if until_s and until_s - now > eta then eta, why = until_s - now, 'retry_after' end
  end
  return eta, why
end

-- The ETA of request t (agent `agent`, `capped` when caps hold it) queued on p over the
-- keys of p's group: the least of `own` (p's own ETA, bound by `why`) and each sibling's
-- with an empty queue (KQ.sibling_eta). Port of sl__keys_eta: `own` when p has no group,
-- t is pinned or capped, p's queue holds a pinned ticket, or another key has a queue.
function KQ.eta(p, t, agent, capped, sums, ahead, own, why, now)
  if p.key_group == 0 or t.pin == '1' or capped or
      tonumber(redis.call('GET', K('pinq')) or '0') > 0 then
    return own, why
  end
  local states = {}
  for _, name in ipairs(KQ.siblings()) do
    local saved = KQ.enter(name)
    local q = KQ.load()
    KQ.leave(saved)
    if q and q.key_group == p.key_group then
      if q.qn > 0 or q.ws_n > 0 then return own, why end
      if q.now <= now then states[#states + 1] = {name = name, q = q} end
    end
  end
  local best, best_why = own, why
  for _, s in ipairs(states) do
    local saved = KQ.enter(s.name)
    refill(s.q, now)  -- as its own advance would see it now
    local eta, w = KQ.sibling_eta(s.q, p, t, agent, sums, ahead, now)
    KQ.leave(saved)
    if eta and eta < best then best, best_why = eta, w end
  end
  return best, best_why
end

-- Whether sibling q's own advance at `now` would only refill it (no lease or ticket due,
-- no margin step or spend-cap reset): then refilling it here is its advance.
function KQ.quiet(q, now)
  return q.lx_at > now and q.ti_at > now and margin_next_step_at(q) > now and
      spend_cap_reset_at(q) > now
end

-- The siblings that may take p's head t: quiet at `at`, their queues empty, its agent
-- held by no caps; fn(name, q) for each, in the entered q, until fn returns true. Not a
-- pinned head, nor one that fits p (p serves it).
function KQ.each_taker(p, t, at, fn)
  if t.pin == '1' or CP.caps_resolve(p, t.agent) then return false end
  for _, name in ipairs(KQ.siblings()) do
    local saved = KQ.enter(name)
    local q = KQ.load()
    local done = q and q.key_group == p.key_group and q.qn == 0 and q.ws_n == 0 and
        q.now <= at and KQ.quiet(q, at) and not CP.caps_resolve(q, t.agent) and fn(name, q)
    KQ.leave(saved)
    if done then return true end
  end
  return false
end

-- A key frees by refill with no call of its own: on one Redis server p's call hands its
-- heads to a sibling, its queue empty, that fits them now, as that sibling's own advance
-- would take them (KQ.drain), so a ticket is granted at the ETA KQ.eta gave. Each sibling
-- is refilled to `now` (quiet: that is its advance) and written back when it takes one.
function KQ.push(p, now)
  local pname = S.pool
  while p.qn > 0 do
    local id = queue_head(p)
    local t = id and load_ticket(id)
    if not t or fits(p, need_of(t), now) then return end
    local taken = KQ.each_taker(p, t, now, function(_, q)
      refill(q, now)
      if not KQ.take(q, {name = pname, q = p, t = t}, now) then return false end
      if q.now < now then q.now = now end
      redis.call('HSET', S.pool_key, 'st', encode(ST, q))
      return true
    end)
    if not taken then return end
  end
end

-- When a sibling will fit p's head (math.huge: none), for p's wake-up: the time
-- KQ.push hands it over, as the engine's sl__keys_next_wakeup (keyqueue.c) wakes the
-- sibling.
function KQ.push_at(p)
  local id = p.qn > 0 and queue_head(p)
  local t = id and load_ticket(id)
  if not t or fits(p, need_of(t), p.last_refill) then return math.huge end
  local best = math.huge
  KQ.each_taker(p, t, p.last_refill, function(_, q)
    if q.concurrency > 0 and q.in_flight >= q.concurrency then return false end
    local n = need_of(KQ.need_on(q, p, t, q.last_refill))
    for b = 0, NB - 1 do
      if limited(q, b) and n[b] > capacity(q, b) then return false end
    end
    local at = q.last_refill + eta_for(q, n, 0, q.last_refill) + 1e-6
    if q.ablk_until > at then
      local until_s = tonumber(redis.call('HGET', K('ablk'), t.agent) or '')
      if until_s and until_s > at then at = until_s end
    end
    if at < best and KQ.quiet(q, at) then best = at end
    return false
  end)
  return best
end

-- A ticket's poll when another key granted it: that key's lease, claimed there;
-- `check_actor` is ticket_state's (defined after this section).
function KQ.claim(name, lease, id, now, args, check_actor)
  local saved = KQ.enter(name)
  local lp = KQ.load()
  local l = lp and load_lease(lease)
  if not l then
    fail('already_settled', 'ticket %s was granted lease %s, which has ended', F(id), F(lease))
  end
  check_actor(args, l.agent, 'ticket', id)
  if lease_claim(lp, l, now, args) then
    if lp.now < now then lp.now = now end
    redis.call('HSET', S.pool_key, 'st', encode(ST, lp))
  end
  local d = fill_grant(l)
  KQ.leave(saved)
  return d
end

-- ---- the parent's request bucket ----
-- Ports: src/engine/reqparent.c (its essay says why). A pool with request_parent, named
-- PARENT:NAME, has no request bucket of its own: its fits, ETA and backfill read PARENT's
-- request level projected to now, a grant takes its requests from PARENT's bucket and a
-- refund gives them back, PARENT refilled to now first. PARENT lives in its own slot
-- ({PARENT}): this call reads and writes PARENT's record (as KQ does a sibling's), which on
-- one Redis server is one atomic call; on a Cluster the read fails and the pool's requests
-- are not limited. S.rp keeps PARENT's record for the call. Unlike the engine, which
-- advances every pool at every call, this call does not run PARENT's margin steps or
-- drain its queue first: PARENT's own call does, at its wake-up.

-- PARENT's hot state when the current pool p has request_parent and PARENT limits
-- requests; nil otherwise.
function RP.parent(p)
  if (p.request_parent or 0) == 0 then return nil end
  local r = S.rp
  if not r or r.of ~= S.pool then
    local name = string.match(S.pool, '^(.*):[^:]*$')
    local q = false
    if name then
      local saved = KQ.enter(name)
      q = KQ.load() or false
      KQ.leave(saved)
    end
    r = {of = S.pool, name = name, q = q}
    S.rp = r
  end
  if r.q and limited(r.q, 2) then return r.q end
  return nil
end

-- PARENT's (q's) request level at now, as its refill would make it; q is not changed.
function RP.level(q, now)
  local level = q.lv2
  local dt = now - q.last_refill
  if dt <= 0 then return level end
  local cap = capacity(q, 2)
  level = level + cap / 60.0 * dt
  return level > cap and cap or level
end

-- Takes `requests` from p's PARENT's bucket (a negative count gives them back, up to its
-- capacity) once PARENT is refilled to now, and writes PARENT's record back.
function RP.charge(p, requests, now)
  local q = requests ~= 0 and RP.parent(p)
  if not q then return end
  refill(q, now)
  if requests > 0 then q.lv2 = q.lv2 - requests else adjust(q, 2, -requests) end
  if q.now < now then q.now = now end
  local saved = KQ.enter(S.rp.name)
  redis.call('HSET', S.pool_key, 'st', encode(ST, q))
  KQ.leave(saved)
end

-- ---- call frame ----
-- Ports: Redis-only: one call per decision (the C engine's entry points in src/engine/engine.c).

-- Whether `name` is in `names` (fcall.def's names) or is one of `series` and a number.
local function fcall_name(names, series, name)
  if names[name] then return true end
  for _, prefix in ipairs(series) do
    if string.sub(name, 1, #prefix) == prefix and string.match(name, '^%d+$', #prefix + 1) then
      return true
    end
  end
  return false
end

-- The name/value pairs of argv from `from` on. A name fcall.def does not list is refused,
-- and reading one is an error, so the two sides can only speak fcall.def's names.
local ARGS_STRICT = {__index = function(_, name)
  if not fcall_name(FCALL.arg, FCALL.arg_series, name) then
    error('sluice: reads argument "' .. tostring(name) .. '", which fcall.def does not list')
  end
  return nil
end}

local function args_table(argv, from)
  local t = {}
  for i = from, #argv - 1, 2 do
    if not fcall_name(FCALL.arg, FCALL.arg_series, argv[i]) then
      fail('invalid_request', 'argument "%s" is not one of fcall.def', argv[i])
    end
    t[argv[i]] = argv[i + 1]
  end
  return setmetatable(t, ARGS_STRICT)
end

local function num(args, name, default)
  local v = args[name]
  if v == nil or v == '' then return default end
  local n = tonumber(v)
  if n == nil or n ~= n then fail('invalid_request', '%s "%s" is not a number', name, v) end
  return n
end

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1e6
end

-- The call's events as reply arrays, published to the other replicas when argv[2] (this
-- replica's id) is set.
function CALL.events(argv)
  local evs = {}
  for i, ev in ipairs(S.events) do
    local e = {}
    for k, v in pairs(ev) do e[#e + 1] = k; e[#e + 1] = F(v) end
    evs[i] = e
  end
  if argv[2] ~= '' and #evs > 0 then
    local wire = {}
    for i, e in ipairs(evs) do wire[i] = table.concat(e, '\31') end
    redis.call('PUBLISH', 'sluice:events', argv[2] .. '\30' .. table.concat(wire, '\30'))
  end
  return evs
end

-- ---- a gap in the pool's calls: the refill a fail-open share may have spent ----
-- Every live replica advances every pool each tick, so a pool no call reached for longer
-- than `og` seconds (sent by fail-open replicas at configure: two of their ticks plus
-- their timeout; 0 = off) was cut off from all of them, and each may have granted from
-- its local share meanwhile. What those shares granted is charged when each replica is
-- back, but the first call after the gap (a configure, a replayed settle, an advance)
-- would otherwise grant queued tickets from the whole gap's refill before the others'
-- charges arrive. So the gap's refill is held (h0..h3), charges are taken from it first,
-- and what is left joins the level `oh` seconds later (the replicas' heartbeat window:
-- by then every live replica has charged). Redis-only, like the fail-open shares.
function CALL.hold_settings(p, args)
  p.og = num(args, 'outage_gap_s', 0)
  p.oh = num(args, 'outage_hold_s', 0)
end

function CALL.hold_gap(p, now)
  if p.og <= 0 or now - p.now <= p.og then return end
  refill(p, p.now)
  local before = {}
  for b = 0, NB - 1 do before[b] = p['lv' .. b] end
  refill(p, now)
  for b = 0, NB - 1 do
    p['h' .. b] = p['h' .. b] + (p['lv' .. b] - before[b])
    p['lv' .. b] = before[b]
  end
  p.hu = now + p.oh
end

function CALL.hold_release(p, now)
  if p.hu <= 0 or p.hu > now then return end
  for b = 0, NB - 1 do
    if p['h' .. b] > 0 then adjust(p, b, p['h' .. b]) end
    p['h' .. b] = 0
  end
  p.hu = 0
end

-- A charge of `c` tokens of bucket b: the part the held refill covers is taken from it.
-- Returns what is left to take from the level.
function CALL.hold_take(p, b, c)
  local held = p['h' .. b]
  if c <= 0 or held <= 0 then return c end
  local t = c < held and c or held
  p['h' .. b] = held - t
  return c - t
end

-- The reply to a call refused by fail() (`res`: its code and message). What the call did
-- before the refusal stands, as it does in the engine: the pool's advance (refill, expiries,
-- its queue drained, a sibling key handed a ticket: KQ) is not the request's and is not
-- undone, and part of it (a sibling's record, an index) is already written. So the records
-- and the state are written back as after any call, in the call's own pool (a refusal
-- raised inside a sibling's keys, KQ.enter, leaves S pointing there), and its events go
-- out with the refusal. Without this a grant made by the advance lost its lease record
-- while its expiry index kept it (the pool's next advance then failed on every call).
function CALL.refused(res, pool_key, argv)
  if not S.now then return {res.code, res.msg, {}, {}, 'inf'} end
  S.pool_key = pool_key
  S.prefix = string.sub(pool_key, 1, #pool_key - 4)
  S.pool = string.match(pool_key, '^sluice:{(.*)}:pool$')
  S.fixed = FIXED[S.prefix]
  local p = S.p
  flush()
  local evs = CALL.events(argv)
  local epoch = p and {F(p.epoch), F(p.next_n), F(p.lost_until)} or {}
  return {res.code, res.msg, {}, evs, F(p and next_wakeup(p) or math.huge), epoch}
end

-- Runs fn(p, args, now) for the pool of KEYS[1]; `need_pool` false lets configure
-- create it. Handles time, errors, write-back, events and the reply.
local function pool_call(keys, argv, fn, opts)
  opts = opts or {}
  S = {recs = {}, codecs = {}, dirty = {}, events = {}}
  local pool_key = keys[1]
  S.pool_key = pool_key
  S.prefix = string.sub(pool_key, 1, #pool_key - 4)
  S.pool = string.match(pool_key, '^sluice:{(.*)}:pool$')
  S.graph_key = keys[2] == 'sluice:{graph}:tasks' and keys[2] or nil  -- request (one node)
  local ok, res = pcall(function()
    if not S.pool then fail('invalid_request', 'key "%s" is not a sluice pool key', pool_key) end
    S.fixed = FIXED[S.prefix]
    if not S.fixed then S.fixed = {}; FIXED[S.prefix] = S.fixed end
    local p
    local raw = redis.call('HMGET', pool_key, 'cfg', 'st')
    if raw[1] and raw[2] then
      -- A pool written by another layout (an older library) does not decode: it is
      -- treated as gone and starts over at the next configure.
      local ok, st = pcall(decode, ST, raw[2])
      local okc, mt = pcall(config_mt, raw[1])
      if ok and okc then
        p = setmetatable(st, mt)
        S.p = p
      end
    end
    local args = args_table(argv, 3)
    if not p and not opts.create then
      -- A replica that knew this pool's epoch finds it gone: Redis lost its state.
      if args.ep then fail('state_lost', 'pool "%s" is gone from Redis', S.pool) end
      fail('not_found', 'pool "%s" not found', S.pool)
    end
    if opts.validate then opts.validate(args) end
    local now
    if argv[1] ~= '' then
      now = tonumber(argv[1])
      if now == nil or now ~= now or now == math.huge or now == -math.huge then
        fail('time_went_backwards', 'now %s is not a finite time', argv[1])
      end
      if p and now < p.now then
        fail('time_went_backwards', 'now %.6f is before the engine\'s time %.6f', now, p.now)
      end
    else
      now = clock()
      if p and now < p.now then now = p.now end  -- Redis's clock stepped back
    end
    S.now = now
    if p then
      CALL.hold_gap(p, now)
      p.now = now
    end
    -- A replica saw ids this copy of the pool never issued: writes were lost.
    local hw = num(args, 'hw', 0)
    if p and hw > p.next_n then epoch_start(p, now, hw, true) end
    local fields = fn(p, args, now) or {}
    p = S.p
    flush()
    return {fields, p and next_wakeup(p) or math.huge, p}
  end)
  if not ok then
    if type(res) ~= 'table' or not res.code then error(res) end
    return CALL.refused(res, pool_key, argv)
  end
  local flat = {}
  for k, v in pairs(res[1]) do
    if not fcall_name(FCALL.reply, FCALL.reply_series, k) then
      error('sluice: replies field "' .. tostring(k) .. '", which fcall.def does not list')
    end
    flat[#flat + 1] = k; flat[#flat + 1] = F(v)
  end
  local evs = CALL.events(argv)
  local p = res[3]
  local epoch = p and {F(p.epoch), F(p.next_n), F(p.lost_until)} or {}
  return {'ok', '', flat, evs, F(res[2]), epoch}
end

-- ---- configure ----
-- Ports: src/engine/pool.c (sl_engine_configure).

-- A pool key in the layout of library version 3 or older (a hash of fields): its state
-- is dropped and the pool starts over, as after a Redis restart. The old per-record
-- hashes that can be found (agents, leases, tickets) go too; old shared-cache and
-- model hashes ("c:", "m:") are left behind.
local OLD_LAYOUT = {'pool', 'q', 'lx', 'ti', 'ended', 'tend', 'tendz', 'idem', 'idemz', 'agents'}

local function drop_old_layout()
  local old = {}
  for _, name in ipairs(redis.call('SMEMBERS', K('agents'))) do old[#old + 1] = S.prefix .. 'a:' .. name end
  for _, id in ipairs(redis.call('ZRANGE', K('lx'), 0, -1)) do old[#old + 1] = S.prefix .. 'l:' .. id end
  for _, m in ipairs(redis.call('ZRANGE', K('q'), 0, -1)) do
    old[#old + 1] = S.prefix .. 't:' .. F(parse_member(m))
  end
  for _, k in ipairs(OLD_LAYOUT) do old[#old + 1] = K(k) end
  for i = 1, #old, 1000 do
    redis.call('DEL', unpack(old, i, i + 999 < #old and i + 999 or #old))
  end
end

local function configure(p, args, now)
  local cfg = {}
  for _, f in ipairs(CONFIG_FIELDS) do
    cfg[f] = num(args, f, nil)
    if cfg[f] == nil then fail('invalid_request', 'pool "%s": %s missing', S.pool, f) end
  end
  for _, f in ipairs(CONFIG_LATER) do cfg[f[1]] = num(args, f[1], f[2]) end
  cfg.roles = args.roles or ''
  cfg.prios = args.prios or ''
  cfg.teams = args.teams or ''     -- "team=weight,...", validated by the caller
  cfg.members = args.members or '' -- "agent=team,..."
  cfg.caps = args.caps or ''       -- "a:agent=share/rpm/conc/usd_hour/usd_day,t:team=..."
  cfg.start_bp = lround(cfg.margin_start * 10000.0)
  cfg.floor_bp = lround(cfg.margin_floor * 10000.0)
  cfg.up_bp = lround(cfg.margin_step_up * 10000.0)
  cfg.down_bp = lround(cfg.margin_step_down * 10000.0)
  local cold = args.cold_start or 'full'
  if cold ~= 'empty' and cold ~= 'full' then
    fail('invalid_request', 'pool "%s": cold_start "%s" must be empty or full', S.pool, cold)
  end
  cfg.cold_empty = cold == 'empty' and 1 or 0
  if p then
    CALL.hold_settings(p, args)
    pool_advance(p, now)
    cfg.pool_no = p.pool_no
    S.cfg_new = encode(CFG, cfg)
    setmetatable(p, config_mt(S.cfg_new))
    for b = 0, NB - 1 do p['lim' .. b] = cfg[LIMIT_FIELD[b + 1]] end
    if p.margin_bp > max_bp(p) then p.margin_bp = max_bp(p) end
    if p.margin_bp < p.floor_bp then p.margin_bp = p.floor_bp end
    if p.margin_bp > p.floor_bp then p.floor_since = -1 end
    for b = 0, NB - 1 do if not limited(p, b) then p['lv' .. b] = 0 end end
    clamp_levels(p)
    p.purge_at = -math.huge  -- the time-to-lives may have changed: look again
    reject_unfit(p, now)
    if p.working_set == 0 and p.ws_n > 0 then WS.release_all(p) end
    CP.caps_wake_all(p)
    drain(p, now)
    return {created = 0, pool_no = p.pool_no}
  end
  if redis.call('EXISTS', S.pool_key) == 1 then drop_old_layout() end
  redis.call('DEL', K('gh'))  -- the grant history of a pool Redis lost (GH)
  cfg.pool_no = num(args, 'pool_no', 0)
  S.cfg_new = encode(CFG, cfg)
  p = setmetatable({now = now, last_refill = now, margin_bp = cfg.start_bp, clean_since = now,
    floor_since = -1, alert_floor = 0, alert_spend_cap = 0, blocked_until = -math.huge,
    in_flight = 0, vtime = 0, seq = 0, granted_total = 0, queued_total = 0,
    rejected_total = 0, upstream_429_total = 0, qn = 0, lx_at = math.huge, ti_at = math.huge,
    purge_at = math.huge, lease_mean_s = 0, lease_samples = 0, spend_cap_at = 0, n_parked = 0,
    agreed_at = 0, cut_n = 0, ablk_until = 0, ws_n = 0, ws0 = 0, ws1 = 0, ws2 = 0,
    ws3 = 0, ws_prom = -math.huge, agreed_bits = 0, climb_n = 0, og = 0, oh = 0, hu = 0,
    h0 = 0, h1 = 0, h2 = 0, h3 = 0, gc0 = 0, gc1 = 0, gc2 = 0, gc3 = 0, gof = -math.huge,
    goa = -math.huge, rf1 = 0, rf3 = 0, rfn = 0},
    config_mt(S.cfg_new))
  for b = 0, NB - 1 do
    p['lim' .. b] = cfg[LIMIT_FIELD[b + 1]]
    p['rs' .. b] = 0
    p['qs' .. b] = 0
    p['qm' .. b] = 0
  end
  -- `lost`: the calling replica knew an earlier epoch of this pool, so this creation
  -- is a loss, not a first start; `seed_n`: the highest id counter it saw in any pool.
  epoch_start(p, now, num(args, 'seed_n', 0), num(args, 'lost', 0) ~= 0)
  CALL.hold_settings(p, args)
  S.p = p
  return {created = 1, pool_no = p.pool_no}
end

-- ---- request ----
-- Ports: src/engine/lease.c (sl_engine_request).

local function class_names(list)
  local names = {}
  for entry in string.gmatch(list, '[^,]+') do names[#names + 1] = string.match(entry, '^(.-)=') end
  return table.concat(names, ', ')
end

local function valid_name(s)
  return s ~= nil and #s >= 1 and #s <= 128 and string.find(s, '^[A-Za-z0-9._:-]+$') ~= nil
end

local function printable(s)
  return #s >= 1 and #s <= 128 and string.find(s, '[%z\1-\31\127]') == nil
end

local function check_tokens(args, name)
  local v = num(args, name, 0)
  if v < 0 or v > 9007199254740992 or v ~= math.floor(v) then
    fail('invalid_request', '%s %s must be an integer between 0 and 2^53', name, F(v))
  end
  return v
end

local function corrected(tokens, ratio)
  if ratio == 1.0 then return tokens end
  local v = math.ceil(tokens * ratio - 1e-9)
  if v > 9007199254740992 then return 9007199254740992 end
  return v
end

-- The first answer to a request id, kept for replays: one msgpack string (Redis's
-- bundled cmsgpack; doubles exact, strings stay strings) rather than a formatted list.
local function encode_decision(d) return cmsgpack.pack(d) end
local function decode_decision(s) return cmsgpack.unpack(s) end

local function reject_decision(p, weight, retry_after, now, limited_by, reason)
  p.rejected_total = p.rejected_total + 1
  return {status = 'rejected', weight = weight, retry_after = retry_after,
          retry_at = now + retry_after, reason = reason or QUEUE_WAIT, limited_by = limited_by}
end

-- The caller the replica names (args.actor: exactly that agent; args.actor_prefix: the
-- agents with that prefix; neither: anyone) may act only on its own leases and tickets,
-- whichever replica granted them. Checked before anything changes.
local function check_actor(args, owner, what, id)
  if not args then return end
  local a, pre = args.actor, args.actor_prefix
  if (a and a ~= owner) or (pre and string.sub(owner, 1, #pre) ~= pre) then
    fail('forbidden', '%s %s belongs to another agent', what, F(id))
  end
end

local function ticket_unknown(p, id)
  if earlier_epoch(p, id) then
    fail('not_found', 'ticket %s is from an earlier epoch of pool "%s" (Redis lost that state)',
         F(id), S.pool)
  end
  fail('not_found', 'ticket %s not found', F(id))
end

-- `args` nil: the library's own look-up (a replay), not checked against a caller.
local function ticket_state(p, id, now, args)
  local t = load_ticket(id)
  if t then
    check_actor(args, t.agent, 'ticket', id)
    if t.held == 0 then
      local old = t.idle_at
      t.idle_at = now + p.ticket_idle_s
      zput(p, 'ti', 'ti_at', id, old, t.idle_at)
      touch(ticket_key(id))
    end
    local eta, ahead, why, sums, _
    if t.ws == '1' then
      eta, ahead = WS.eta(p, need_of(t), true, now)
      why = 'working_set'
    else
      eta, ahead, _, why, sums = queue_eta(p, team_get(t.team, true), need_of(t), t.finish,
                                           qmember(t), t.cost, now)
      if t.park == '' and ahead > 0 and ahead < BF.WINDOW then  -- or sooner, past the head
        local bf, bf_why = BF.eta(p, need_of(t), sums, CP.caps_resolve(p, t.agent),
                                  team_get(t.team, true), t.cost, now)
        if bf < eta then eta, why = bf, bf_why end
      end
      if t.park == '' then
        eta, why = KQ.eta(p, t, t.agent, CP.caps_resolve(p, t.agent) ~= nil, sums, ahead, eta,
                          why, now)
      end
    end
    if t.park ~= '' then
      local cap_s, cap_why = CP.caps_parked_eta(p, t, now)
      if cap_s >= eta then eta, why = cap_s, cap_why end
    end
    return {status = 'queued', ticket = id, eta = eta, position = ahead + 1, weight = t.weight,
            limited_by = why}
  end
  local tomb = redis.call('HGET', K('tend'), F(id))
  if not tomb then ticket_unknown(p, id) end
  local state, lease, lease_pool = string.match(tomb, '^(%d+):([^:]*):?(.*)$')
  state = tonumber(state)
  lease = tonumber(lease)
  if state == END_GRANTED then
    -- Granted by another key of its pool (KQ): the lease is that key's.
    if lease_pool ~= '' and lease_pool ~= S.pool then
      return KQ.claim(lease_pool, lease, id, now, args, check_actor)
    end
    local l = load_lease(lease)
    if l then
      check_actor(args, l.agent, 'ticket', id)
      lease_claim(p, l, now, args)
      return fill_grant(l)
    end
    fail('already_settled', 'ticket %s was granted lease %s, which has ended', F(id), F(lease))
  end
  fail('already_settled', 'ticket %s was %s', F(id),
       state == END_CANCELLED and 'cancelled' or state == END_EXPIRED and
       'expired (nobody waited on it)' or 'rejected (it no longer fits the pool)')
end

local function replay(p, first, now)
  local out
  if first.status == 'granted' then
    local l = load_lease(first.lease)
    if l then out = fill_grant(l) end
  elseif first.status == 'queued' then
    local ok, d = pcall(ticket_state, p, first.ticket, now)
    if ok then out = d end
  end
  out = out or first
  out.replayed = 1
  return out
end

local function decide(p, a, t, weight, ttl, cache, now)
  local need = need_of(t)
  local g = team_get(team_of(p, a.agent), true) -- before any answer, as the engine
  for b = 0, NB - 1 do
    if limited(p, b) and need[b] > capacity(p, b) then
      return reject_decision(p, weight, margin_wait_for(p, need, now), now, BUCKET[b + 1])
    end
  end
  local c = cost(p, need)
  -- An agent moved to another team keeps its last tag (as the engine).
  local start = g.vtime > a.lf and g.vtime or a.lf
  local finish, eta, ahead, outer, why, sums = 0, 0, 0, 0, nil, nil
  for pass = 0, 1 do
    finish = start + c / weight
    eta, ahead, outer, why, sums = queue_eta(p, g, need, finish, nil, c, now)
    if t.park_on and t.cap_wait >= eta then eta, why = t.cap_wait, t.cap_reason end
    -- Granted at once when it fits and would be the queue's head (and no holder's
    -- max_concurrent holds it back: t.park_on, caps).
    if not t.park_on and ahead == 0 and fits(p, need, now) and
        (not t.first_call or WS.open(p)) then
      local l = grant(p, a, t, weight, g, finish, outer, ttl, 0, 0, now, t.hs)
      -- Going ahead of its team's head moved that team's outer tags.
      if g.qn > 0 and #team_list() > 1 then drain(p, now) end
      return fill_grant(l)
    end
    -- Or granted past a blocked head that it does not delay (backfilling), when it would
    -- stand among the tickets the drain looks at.
    local head = p.backfill ~= 0 and not t.park_on and not t.first_call and ahead < BF.WINDOW and
        queue_head(p)
    if head then
      head = load_ticket(head)
      if BF.admits(p, head, need, t.hs, g, c, now) then
        local bf_finish, bf_outer = BF.tags(p, g, c)
        local l = grant(p, a, t, weight, g, bf_finish, bf_outer, ttl, 0, 0, now, t.hs)
        if finish > a.lf then a.lf = finish end
        return fill_grant(l)
      end
    end
    -- Or sooner, past the head (backfilling).
    if not t.park_on and not t.first_call and ahead > 0 and ahead < BF.WINDOW then
      local bf, bf_why = BF.eta(p, need, sums, t.hs, g, c, now)
      if bf < eta then eta, why = bf, bf_why end
    end
    -- A large warm cache about to lapse costs the bucket more than serving it now.
    local cache_tokens = cache and cache.rec[cache.tok] or 0
    if t.cached > cache_tokens then cache_tokens = t.cached end
    local bump = pass == 0 and cache_warm(p, cache, now) and
        cache_tokens >= p.cache_bump_min_tokens and
        cache.rec[cache.ls] + p.cache_ttl_s < now + eta
    if not bump then break end
    weight = weight * p.cache_bump
  end
  -- A first call held back by the working set waits parked, behind everyone, for no ETA
  -- limit (admit.c).
  local ws_park = t.first_call and not t.park_on
  if not ws_park and not t.park_on then  -- any key of its pool may grant it (KQ)
    eta, why = KQ.eta(p, t, a.agent, t.hs ~= nil, sums, ahead, eta, why, now)
  end
  if ws_park then
    eta, ahead = WS.eta(p, need, false, now)
    why = 'working_set'
  elseif eta > t.max_wait then
    return reject_decision(p, weight, eta, now, why, t.park_on and t.cap_reason or nil)
  end
  local id = new_id(p)
  p.seq = p.seq + 1
  local tk = {id = id, agent = a.agent, _own = 0, ck = t.ck, model = t.model, est = t.est,
    n0 = t.n0, n1 = t.n1, n2 = t.n2, n3 = t.n3, cached = t.cached, pen = t.pen, pt = t.pt,
    weight = weight, finish = finish, seq = p.seq, enq = now, ttl = ttl, held = 0,
    idle_at = now + p.ticket_idle_s, team = g.name, cost = c, park = '', woke = '', ws = '',
    cttl = t.cttl or '', ogrp = t.ogrp or '', pin = t.pin or '', over = t.over or ''}
  create(ticket_key(id), TICKET, tk)
  if t.park_on then
    CP.caps_park(p, t.park_on, t.park_on.st, tk, false)  -- a full holder has its state
  elseif ws_park then
    WS.park(p, tk, t.depth)
  else
    queue_insert(p, tk)
  end
  zput(p, 'ti', 'ti_at', id, nil, tk.idle_at)
  a.lf = finish
  a.queued = a.queued + 1
  p.queued_total = p.queued_total + 1
  emit('queued', {agent = a.agent, ticket = id, input_tokens = t.n0, output_tokens = t.n1,
                  weight = weight, eta = eta})
  -- Landing ahead of its team's head moved that team's later outer tags.
  if #team_list() > 1 then drain(p, now) end
  return {status = 'queued', ticket = id, eta = eta, position = ahead + 1, weight = weight,
          limited_by = why}
end

local function validate_request(args)
  if not args.agent then fail('invalid_request', 'agent is required') end
  if not valid_name(args.agent) then
    fail('invalid_request', 'agent "%s" must be 1-128 of [A-Za-z0-9._:-]', args.agent)
  end
  check_tokens(args, 'input_tokens')
  check_tokens(args, 'cached_tokens')
  check_tokens(args, 'output_tokens')
  check_tokens(args, 'unblocks')
  local cttl = num(args, 'cache_ttl_s', 0)
  if not (cttl >= 0 and cttl <= CONST.CACHE_TTL_MAX_S) then
    fail('invalid_request', 'cache_ttl_s %s must be in [0, %s] seconds', F(cttl), F(CONST.CACHE_TTL_MAX_S))
  end
  if args.task and not valid_name(args.task) then
    fail('invalid_request', 'task "%s" must be 1-128 of [A-Za-z0-9._:-]', args.task)
  end
  for _, f in ipairs({'cache_key', 'cache_prefix_hash', 'model', 'request_id'}) do
    if args[f] and not printable(args[f]) then
      fail('invalid_request', '%s "%s" must be 1-128 printable bytes', f, args[f])
    end
  end
  local ttl = num(args, 'ttl', 0)
  if ttl < 0 or ttl == math.huge then
    fail('invalid_request', 'ttl %s must be a finite number of seconds > 0', F(ttl))
  end
  local max_wait = num(args, 'max_wait_s', 0)
  if not (max_wait >= 0 and max_wait <= 86400) then
    fail('invalid_request', 'max_wait %s must be a number of seconds in [0, 86400]', F(max_wait))
  end
end

-- The number of tasks waiting on task `id`, in `all` (HGETALL of the graph).
local function task_unblocks(all, id)
  local n = 0
  for i = 2, #all, 2 do
    local parts = {}
    for s in string.gmatch(all[i] .. '\31', '([^\31]*)\31') do parts[#parts + 1] = s end
    if parts[2] == 'waiting' then
      for j = 3, #parts do if parts[j] == id then n = n + 1; break end end
    end
  end
  return n
end

-- The remaining chain of task id (graph.c, sl_engine_task_depth): 1 + the longest among
-- its waiting dependants, by rounds of relaxation over every edge, capped at DEPTH_MAX.
local function task_depth(all, id)
  local depth, waiting, deps = {}, {}, {}
  for i = 1, #all, 2 do
    local parts = {}
    for s in string.gmatch(all[i + 1] .. '\31', '([^\31]*)\31') do parts[#parts + 1] = s end
    depth[all[i]] = 1
    waiting[all[i]] = parts[2] == 'waiting'
    deps[all[i]] = {unpack(parts, 3)}
  end
  for _ = 1, CONST.DEPTH_MAX do
    local nxt, grew = {}, false
    for k, v in pairs(depth) do nxt[k] = v end
    for d, ds in pairs(deps) do
      if waiting[d] then
        local via = math.min(depth[d] + 1, CONST.DEPTH_MAX)
        for _, dep in ipairs(ds) do
          if nxt[dep] and nxt[dep] < via then nxt[dep] = via; grew = true end
        end
      end
    end
    depth = nxt
    if not grew then break end
  end
  return depth[id]
end

-- The role the request takes, the graph's count of tasks it unblocks and its task's
-- remaining chain (-1, -1 when the task is not in the graph or none is named). The graph
-- decides the role of a request naming a task in it (src/engine/lease.c,
-- validate_request): read from the graph's key when the caller declared it (KEYS[2]: one
-- node, so one round trip), else as the caller looked it up (`task_role`,
-- `graph_unblocks`, `graph_depth`: a Cluster keeps the graph in another slot).
local function request_role(args)
  local task_role = nil
  local unblocks, depth = num(args, 'graph_unblocks', -1), num(args, 'graph_depth', -1)
  if args.task and S.graph_key then
    local rec = redis.call('HGET', S.graph_key, args.task)
    if rec then
      local all = redis.call('HGETALL', S.graph_key)
      task_role = string.match(rec, '^([^\31]*)')
      unblocks, depth = task_unblocks(all, args.task), task_depth(all, args.task)
    end
  elseif args.task then
    task_role = args.task_role
  end
  if task_role and args.role and args.role ~= task_role then
    fail('invalid_request', "role: '%s' is not the role '%s' task '%s' is registered with",
         args.role, task_role, args.task)
  end
  local role = task_role or args.role or 'worker'
  if args.roles_allowed then
    local allowed = false
    for r in string.gmatch(args.roles_allowed, '[^,]+') do allowed = allowed or r == role end
    if not allowed then
      fail('forbidden', "role: this token may not use role '%s'%s", role,
           task_role and (" (the role of task '" .. args.task .. "')") or '')
    end
  end
  local max_unblocks = num(args, 'max_unblocks', -1)
  if max_unblocks >= 0 and unblocks > max_unblocks then unblocks = max_unblocks end
  return role, unblocks, depth
end

local function request(p, args, now)
  local role, graph, graph_depth = request_role(args)
  local prio = args.priority or 'normal'
  local role_v = p.role_v[role]
  if not role_v then
    fail('invalid_request', 'role "%s" is not configured (known: %s)', role, class_names(p.roles))
  end
  local prio_v = p.prio_v[prio]
  if not prio_v then
    fail('invalid_request', 'priority "%s" is not configured (known: %s)', prio,
         class_names(p.prios))
  end
  local agent = args.agent
  local rid = args.request_id
  local idem_key
  if rid then
    idem_key = agent .. '\31' .. rid
    local first = redis.call('HGET', K('idem'), idem_key)
    if first then
      local at = tonumber(redis.call('ZSCORE', K('idemz'), idem_key))
      if at + p.idempotency_ttl_s > now then
        pool_advance(p, now)
        return replay(p, decode_decision(first), now)
      end
    end
  end
  local a = agent_get(agent, false)
  local ck = args.cache_key or agent
  -- The provider caches a prefix per model: (cache_key, model, prefix hash) is one cache.
  if args.model or args.cache_prefix_hash then
    ck = ck .. '\31' .. (args.model or '') .. '\31' .. (args.cache_prefix_hash or '')
  end
  local cache = cache_view(ck)
  local warm = cache_warm(p, cache, now)
  local first_call = WS.is_first_call(p, cache)
  local calib = args.model and calib_get(p, args.model, false) or nil
  local ratio = calib and calib.ratio or 1.0
  local input_tokens = check_tokens(args, 'input_tokens')
  local cached_tokens = check_tokens(args, 'cached_tokens')
  local output_tokens = check_tokens(args, 'output_tokens')
  local input = corrected(input_tokens, ratio)
  local cached = corrected(cached_tokens, ratio)
  local t = {est = input_tokens + cached_tokens, cached = cached, pt = input + cached,
             pen = (not warm and cached > 0) and 1 or 0, model = args.model or '',
             first_call = first_call, cttl = args.cache_ttl_s or '', ogrp = role,
             pin = num(args, 'key_pinned', 0) ~= 0 and '1' or ''}
  local inn = input
  if not warm or p.cache_reads_count ~= 0 then inn = inn + cached end
  -- Only a call capped to its reservation may reserve less than its max_tokens: the
  -- provider holds whatever max_tokens it is sent.
  if p.output_reserve_learned ~= 0 and calib and num(args, 'output_capped', 0) ~= 0 then
    local p95 = output_p95(args.model, role)
    -- never below what the caller can send as max_tokens (engine: at_least_floor)
    if p95 > 0 and p95 < output_tokens then
      output_tokens = math.max(p95, math.min(num(args, 'output_floor', 0), output_tokens))
    end
  end
  t.n0, t.n1, t.n2, t.n3 = inn, output_tokens, 1, inn + output_tokens
  local max_wait = num(args, 'max_wait_s', 0)
  t.max_wait = max_wait > 0 and max_wait or p.max_queue_wait_s
  -- The provider holds a call's whole max_tokens from its start, so a need above a
  -- bucket's limit is a call it can never accept either; one above the capacity at the
  -- starting margin but within the limit waits for that capacity and the rest (t.over)
  -- is charged at the grant (engine: lease.c fit_capacity).
  for b = 0, NB - 1 do
    -- (a starting capacity below one unit, rpm 1, holds no whole need to wait for)
    if limited(p, b) and (t['n' .. b] > p['lim' .. b] or
                          (t['n' .. b] > 0 and math.floor(p['lim' .. b] * p.margin_start) < 1)) then
      fail('exceeds_capacity', '%s %s%s can never fit pool "%s": its limit is %s',
           BUCKET[b + 1], F(t['n' .. b]),
           (t.pen == 1 and (b == 0 or b == 3)) and ' (including the cold-cache prefix)' or '',
           S.pool, F(p['lim' .. b]))
    end
  end
  CONST.fit_capacity(p, t)
  -- Caps: a share cap is the operator's limit, not the provider's: a call capped to its
  -- reservation reserves what fits the cap; an uncapped one is held to its max_tokens.
  local hs = CP.caps_resolve(p, agent)
  local cap_reason, cap_wait
  if hs then
    local fit = CP.caps_output_fit(p, hs, t.n0)
    if fit >= 0 then fit = math.max(fit, math.min(num(args, 'output_floor', 0), t.n1)) end
    if num(args, 'output_capped', 0) ~= 0 and fit >= 0 and t.n1 > fit then
      t.n1, t.n3 = fit, t.n0 + fit
    end
    cap_reason, cap_wait, t.park_on = CP.caps_check(p, hs, need_of(t), now)
    t.hs = hs
  end
  -- From here on the request is valid: time advances and records are created.
  pool_advance(p, now)
  if hs then
    -- The caps decide on the state after the advance, whose drain may have granted the
    -- holder's waiting tickets (the check above refused what can never pass).
    hs = CP.caps_resolve(p, agent)
    cap_reason, cap_wait, t.park_on = CP.caps_check(p, hs, need_of(t), now)
    t.hs = hs
  end
  a = a or agent_get(agent, true)
  if not cache then cache = cache_make(ck) end
  t.ck = ck
  if args.model then calib_get(p, args.model, true) end
  local unblocks = num(args, 'unblocks', 0)
  if graph >= 0 then unblocks = graph end
  t.depth = math.max(1, graph_depth)  -- its task's remaining chain
  local base = role_v * (1 + 0.5 * unblocks) * prio_v
  local w = base
  if a.repeats > 0 then w = w * 0.5 ^ a.repeats end
  local weight = w > p.weight_floor and w or p.weight_floor
  local ttl = num(args, 'ttl', 0)
  if ttl <= 0 then ttl = p.lease_ttl_s end
  if ttl > p.max_lease_ttl_s then ttl = p.max_lease_ttl_s end
  local out
  -- Agents held by their own reports (ablk: agent -> until; ablk_until: the latest).
  local blocked = -math.huge
  if p.ablk_until > now then
    local v = redis.call('HGET', K('ablk'), agent)
    blocked = v and tonumber(v) or -math.huge
  elseif p.ablk_until > 0 then
    redis.call('DEL', K('ablk'))
    p.ablk_until = 0
  end
  if blocked > now then
    -- Its own 429 report asked for a longer wait than the pool takes on its word.
    out = reject_decision(p, weight, blocked - now, now, 'retry_after', 'agent_retry_after')
  elseif cap_reason and not t.park_on then
    out = reject_decision(p, weight, cap_wait, now, cap_reason, cap_reason)
  else
    -- Held back only by its own max_concurrent: queued for its holder's release.
    t.cap_wait, t.cap_reason = cap_wait, cap_reason
    out = decide(p, a, t, weight, ttl, cache, now)
  end
  a.role = role
  a.weight = base  -- its weight before repeats: reported with the repeats as they are then
  touch(agent_key(agent))
  if out.status == 'rejected' then
    emit('rejected', {agent = agent, input_tokens = t.n0, output_tokens = t.n1,
                      weight = out.weight, retry_at = out.retry_at, reason = out.reason})
  end
  if idem_key then
    redis.call('HSET', K('idem'), idem_key, encode_decision(out))
    redis.call('ZADD', K('idemz'), F(now), idem_key)
    local due = now + p.idempotency_ttl_s
    if due < p.purge_at then p.purge_at = due end
  end
  return out
end

-- ---- tickets ----
-- Ports: src/engine/lease.c (sl_engine_ticket, _hold, _cancel).

local function id_arg(args, name)
  local id = num(args, name, nil)
  if id == nil then fail('invalid_request', '%s is required', name) end
  return id
end

local function ticket_poll(p, args, now)
  pool_advance(p, now)
  return ticket_state(p, id_arg(args, 'ticket'), now, args)
end

local function ticket_hold(p, args, now)
  local id = id_arg(args, 'ticket')
  pool_advance(p, now)  -- as the engine: granted, expired or tombstone gone by now
  local t = load_ticket(id)
  if not t then
    if redis.call('HEXISTS', K('tend'), F(id)) == 1 then
      fail('already_settled', 'ticket %s is no longer queued', F(id))
    end
    ticket_unknown(p, id)
  end
  check_actor(args, t.agent, 'ticket', id)
  local held = num(args, 'held', 0) ~= 0 and 1 or 0
  if held == t.held then return {} end
  t.held = held
  if held == 1 then
    zdel(p, 'ti', 'ti_at', id, t.idle_at)
  else
    t.idle_at = now + p.ticket_idle_s
    zput(p, 'ti', 'ti_at', id, nil, t.idle_at)
  end
  touch(ticket_key(id))
  return {}
end

local function ticket_cancel(p, args, now)
  pool_advance(p, now)
  local id = id_arg(args, 'ticket')
  local t = load_ticket(id)
  if t then
    check_actor(args, t.agent, 'ticket', id)
    CP.ticket_detach(p, t)
    ticket_end(p, t, END_CANCELLED, 0, now)
    drain(p, now)
    return {}
  end
  local tomb = redis.call('HGET', K('tend'), F(id))
  if not tomb then ticket_unknown(p, id) end
  local state, lease = string.match(tomb, '^(%d+):(.*)$')
  if tonumber(state) == END_GRANTED then
    local l = load_lease(tonumber(lease))
    if l then
      check_actor(args, l.agent, 'ticket', id)
      -- A grant whose client is gone is refunded, never leaked.
      l.claimed = 1
      lease_end(p, l, END_CANCELLED, true, now)
      drain(p, now)
      return {}
    end
  end
  fail('already_settled', 'ticket %s is no longer queued', F(id))
end

-- ---- settle, cancel, extend ----
-- Ports: src/engine/lease.c (settle, cancel, extend), src/engine/headers.c (resync),
--  src/engine/engine.c and pool.c (advance, pool_info), src/engine/agent.c (agents); forget
--  and charge are Redis-only (sent by src/backend/redis/conn.c and failopen.c).

local function live_lease(p, id, args)
  local l = load_lease(id)
  if l then check_actor(args, l.agent, 'lease', id); return l end
  local state = lease_ended_state(p, id)
  if state == 0 and earlier_epoch(p, id) then
    fail('not_found', 'lease %s is from an earlier epoch of pool "%s" (Redis lost that state)',
         F(id), S.pool)
  end
  if state == 0 then fail('not_found', 'lease %s not found', F(id)) end
  if state == END_REAPED then
    fail('lease_expired', 'lease %s expired and was reaped (no refund)', F(id))
  end
  fail('already_settled', 'lease %s was already %s', F(id),
       state == END_SETTLED and 'settled' or 'cancelled')
end

-- The level a remaining value implies at today's margin: the provider's room less the
-- margin's reserve, allowing Anthropic's rounding of tokens to thousands and the whole
-- number any other count is rounded down to (as the engine's implied_level).
local function implied_level(p, h)
  local allowance = (h.anthropic and h.b ~= 2) and 500 or 1
  return h.v + allowance - (p['lim' .. h.b] - capacity(p, h.b))
end

-- Resync entries: "h<i>" = "<anthropic 0|1>:<bucket 0-3>:<field limit|remaining>:<value>",
-- already classified and validated by the caller (redis_proto.c), in header order.
-- `refused`: a 429's headers, applied after its lease ended (settle): against the level now,
-- and they earn no step (the engine's settle).
local function resync_apply(p, args, now, id, refused)
  local entries = {}
  for i = 1, num(args, 'hn', 0) do
    local an, b, field, v = string.match(args['h' .. i] or '', '^(%d):(%d):(%a+):(%d+)$')
    if not an then fail('invalid_request', 'header entry %d is malformed', i) end
    entries[#entries + 1] = {anthropic = an == '1', b = tonumber(b), field = field, v = tonumber(v)}
  end
  -- The lease whose call returned them: its headers are compared with the pool at its
  -- grant (room and reserve then), as the engine's reference_level and reserve_growth.
  local l = (id and not refused) and load_lease(id) or nil
  local rg, after = nil, nil
  if l and l.rg and l.rg ~= '' then
    rg = {}
    for room, res in string.gmatch(l.rg, '([^:,]+):([^,]+)') do
      rg[#rg + 1] = {tonumber(room), tonumber(res)}
    end
  end
  local function reference_level(b)
    if not rg then return p['lv' .. b] end
    -- leases granted just after it, perhaps taken first (GH); `sent_after_s`: the proxy's.
    -- Read once, when a remaining value asks.
    after = after or GH.after(p, l, num(args, 'sent_after_s', -1))
    return rg[b + 1][1] - (p['lim' .. b] - capacity(p, b)) - after[b + 1]
  end
  local function reserve_growth(b)
    if not rg then return 0 end
    local growth = p['lim' .. b] - capacity(p, b) - rg[b + 1][2]
    return growth > 0 and growth or 0
  end
  local changed, adopted = 0, false
  for _, h in ipairs(entries) do
    if h.field == 'limit' and h.v ~= 0 and h.v ~= p['lim' .. h.b] then
      p['lim' .. h.b] = h.v
      -- A bucket limited only now starts full, unless the pool is cold.
      if p['lv' .. h.b] == 0 and p['rs' .. h.b] == 0 and not (S.now < p.cold_until) then
        p['lv' .. h.b] = capacity(p, h.b)
      end
      clamp_levels(p)
      adopted = true
      changed = changed + 1
      emit('limit_adopted', {bucket = h.b, value = h.v})
    end
  end
  -- The margin hears what the remaining values say at today's margin (as the engine).
  local lowered, agreed_bits = false, 0
  for _, h in ipairs(entries) do
    if h.field == 'remaining' and limited(p, h.b) and
        not (S.now < p.cold_until and math.floor(p.cold_raised / 2 ^ h.b) % 2 == 0) then
      if implied_level(p, h) < reference_level(h.b) then
        lowered = true
      elseif math.floor(agreed_bits / 2 ^ h.b) % 2 == 0 then
        agreed_bits = agreed_bits + 2 ^ h.b
      end
    end
  end
  margin_headers(p, lowered, refused and 0 or agreed_bits, id, now)
  for _, h in ipairs(entries) do
    if h.field == 'remaining' and limited(p, h.b) then
      local allowance = (h.anthropic and h.b ~= 2) and 500 or 1
      local reserve = p['lim' .. h.b] - capacity(p, h.b)
      local implied = implied_level(p, h)
      local ref = reference_level(h.b)
      local level = p['lv' .. h.b]
      local bit = 2 ^ h.b
      local raise = false
      if S.now < p.cold_until and math.floor(p.cold_raised / bit) % 2 == 0 then
        -- Cold start: the provider knows what the unknown minute spent. Its first
        -- report of each bucket may raise the level by the room it vouches for beyond
        -- the reference (less its rounding and the margin's reserve, up to capacity);
        -- later ones only lower (calls granted since that report are not in it). As the
        -- engine does.
        p.cold_raised = p.cold_raised + bit
        local vouched = level + (h.v - allowance - reserve - ref)
        local cap = capacity(p, h.b)
        if vouched > cap then vouched = cap end
        if vouched > level then raise = true; level = vouched end
      end
      if not raise and implied < ref then
        -- Lowered by the room believed beyond the provider's at the grant and what the
        -- margin took back since, never below the header at face value now.
        level = level - (ref - implied) - reserve_growth(h.b)
        if level < implied then level = implied end
        raise = level < p['lv' .. h.b]
      end
      if raise then
        p['lv' .. h.b] = level
        changed = changed + 1
        emit('resync', {bucket = h.b, value = level})
      end
    end
  end
  if adopted then reject_unfit(p, now) end
  return changed
end

local function settle(p, args, now)
  local input = check_tokens(args, 'input_tokens')
  local output = check_tokens(args, 'output_tokens')
  local cc = check_tokens(args, 'cache_creation_input_tokens')
  local cr = check_tokens(args, 'cache_read_input_tokens')
  local cc1h = check_tokens(args, 'cache_creation_1h_input_tokens')
  if cc1h > cc then
    fail('invalid_request', 'cache_creation_1h_input_tokens %s must be at most ' ..
         'cache_creation_input_tokens %s', F(cc1h), F(cc))
  end
  local retry_after = num(args, 'retry_after', -1)
  local sig = args.failure_signature or ''
  pool_advance(p, now)
  local id = id_arg(args, 'lease')
  local l = live_lease(p, id, args)
  local a = agent_get(l.agent, true)
  agent_record_signature(a, sig)
  -- The provider wrote these headers while it still held this call's reservation, and
  -- so does our level until the refund below: compare them now, or the refund would be
  -- undone. A 429's do not count this call: they apply after the refund and the cut,
  -- below. As the engine does.
  local refused = num(args, 'got_429', 0) ~= 0
  if not refused then resync_apply(p, args, now, id) end
  local actual_in = input + cc
  if p.cache_reads_count ~= 0 then actual_in = actual_in + cr end
  local actual_out = output
  local adj_in = l.n0 - actual_in
  local adj_out = l.n1 - actual_out
  adjust(p, 0, adj_in)
  adjust(p, 1, adj_out)
  adjust(p, 3, adj_in + adj_out)
  local hs = CP.lease_holders(p, l)
  if hs then
    CP.caps_give(p, hs, {[0] = adj_in, adj_out, 0, adj_in + adj_out},
              l.cusd - CP.billed_cost_usd(p, actual_in, cc, cc1h, actual_out), now)
  end
  -- Only calls the provider answered teach: a refused or broken call's zero or partial
  -- usage says nothing about the estimate or the cache.
  local counted = num(args, 'failed', 0) == 0 and num(args, 'got_429', 0) == 0
  -- Like with like: the prompt the provider billed against the prompt estimated for it.
  local billed = input + cc + cr
  local err = math.abs(billed - l.pt) / (billed > 1 and billed or 1)
  if counted then
    agent_record_error(p, a, err)
    calib_record(l.model, l.est, billed)
    -- stopped at its reservation (a capped call cut off there): censored, twice the cap
    -- (calibrate.c says why)
    output_record(l.model, l.ogrp, (l.n1 > 0 and output == l.n1) and 2 * l.n1 or output)
    QE.record(p, l, actual_in, actual_out)
    local cache_tokens = cr + cc
    local c = cache_make(l.ck)
    -- The cache life runs from the call's start, as the provider counts it: the grant,
    -- the earliest the call can have been sent; the later end of life wins (engine:
    -- lease.c, sl__cache_touch): a call keeping the prefix cttl seconds moves the start
    -- by cttl - cache_ttl_s, so the cache lapses at start + cttl.
    local cttl = tonumber(l.cttl) or 0
    local start = l.granted_at + (cttl > 0 and cttl - p.cache_ttl_s or 0)
    local first_settle = not (c.rec[c.ls] > -math.huge)
    if start > c.rec[c.ls] then c.rec[c.ls] = start end
    if first_settle then WS.settled(p, l) end
    c.rec[c.tok] = cache_tokens > l.cached and cache_tokens or l.cached
    touch(c.key)
    spend_cap_alert(p, false)  -- a call went through: no longer capped
  end
  a.tin = a.tin + actual_in
  a.tout = a.tout + actual_out
  touch(agent_key(a.agent))
  emit('settled', {agent = a.agent, lease = l.id, input_tokens = actual_in,
                   output_tokens = actual_out, adjust_input_tokens = adj_in,
                   adjust_output_tokens = adj_out, estimate_error = err, weight = l.weight,
                   not_counted = counted and 0 or 1})
  record_lease_duration(p, now - l.granted_at)
  lease_end(p, l, END_SETTLED, false, now)
  if num(args, 'got_429', 0) ~= 0 then
    a.g429 = a.g429 + 1
    p.upstream_429_total = p.upstream_429_total + 1
    local spend_cap = num(args, 'spend_cap', 0) ~= 0 and retry_after < 0
    emit('upstream_429', {agent = a.agent, lease = id, reason = spend_cap and 'spend_cap' or 'rate',
                          retry_at = retry_after >= 0 and now + retry_after or now,
                          margin = margin(p)})
    if spend_cap then
      -- A budget stop, not a rate limit: the margin is not the problem.
      p.spend_cap_at = now
      spend_cap_alert(p, true)
    else
      margin_cut(p, id, now)
      if retry_after >= 0 and now + retry_after > p.blocked_until then
        p.blocked_until = now + retry_after
      end
      local own = num(args, 'agent_retry_after', 0)
      if own > 0 then
        local until_s = now + own
        local v = redis.call('HGET', K('ablk'), a.agent)
        if until_s > (v and tonumber(v) or -math.huge) then
          redis.call('HSET', K('ablk'), a.agent, F(until_s))
        end
        if until_s > p.ablk_until then p.ablk_until = until_s end
      end
    end
    -- The lease has ended: its headers against the level now, and no step (engine).
    resync_apply(p, args, now, id, true)
  end
  drain(p, now)
  return {adjust_input_tokens = adj_in, adjust_output_tokens = adj_out, estimate_error = err,
          counted = counted and 1 or 0}
end

local function cancel(p, args, now)
  pool_advance(p, now)
  local l = live_lease(p, id_arg(args, 'lease'), args)
  l.claimed = 1
  lease_end(p, l, END_CANCELLED, true, now)
  drain(p, now)
  return {}
end

local function extend(p, args, now)
  local ttl = num(args, 'ttl', 0)
  if ttl <= 0 or ttl == math.huge then
    fail('invalid_request', 'ttl %s must be a finite number of seconds > 0', F(ttl))
  end
  pool_advance(p, now)
  local l = live_lease(p, id_arg(args, 'lease'), args)
  if ttl > p.max_lease_ttl_s then ttl = p.max_lease_ttl_s end
  local old = l.exp
  l.claimed = 1
  l.ttl = ttl
  l.exp = now + ttl
  zput(p, 'lx', 'lx_at', l.id, old, l.exp)
  touch(lease_key(l.id))
  return {expires_at = l.exp}
end

local function advance(p, args, now)
  pool_advance(p, now)
  return {}
end

local function resync(p, args, now)
  pool_advance(p, now)
  -- With the lease whose call returned the headers (the proxy's resync at their arrival):
  -- live, as the engine's sl_engine_resync_lease asks.
  local id = args.lease and id_arg(args, 'lease') or nil
  if id then live_lease(p, id, args) end
  local changed = resync_apply(p, args, now, id)
  drain(p, now)
  return {changed = changed}
end

-- Cancels, with a refund, whatever the given request ids created: the replica asked
-- and never heard back (Redis went away mid-call), and decided elsewhere since.
local function forget(p, args, now)
  pool_advance(p, now)
  local n = 0
  for i = 1, num(args, 'kn', 0) do
    local key = args['k' .. i]
    local first = key and redis.call('HGET', K('idem'), key)
    if first then
      local d = decode_decision(first)
      if d.status == 'granted' then
        local l = load_lease(d.lease)
        if l then l.claimed = 1; lease_end(p, l, END_CANCELLED, true, now); n = n + 1 end
      elseif d.status == 'queued' then
        local t = load_ticket(d.ticket)
        if t then
          CP.ticket_detach(p, t); ticket_end(p, t, END_CANCELLED, 0, now); n = n + 1
        else
          local tomb = redis.call('HGET', K('tend'), F(d.ticket))
          local state, lease = string.match(tomb or '', '^(%d+):(.*)$')
          local l = tonumber(state) == END_GRANTED and load_lease(tonumber(lease)) or nil
          if l then l.claimed = 1; lease_end(p, l, END_CANCELLED, true, now); n = n + 1 end
        end
      end
    end
  end
  drain(p, now)
  return {forgotten = n}
end

local function pool_info(p, args, now)
  pool_advance(p, now)
  local out = {name = S.pool, margin = margin(p), queue_depth = p.qn + p.n_parked + p.ws_n,
    leases_in_flight = p.in_flight, alert_margin_at_floor = p.alert_floor,
    alert_spend_cap = p.alert_spend_cap, blocked_until = p.blocked_until,
    granted_total = p.granted_total, queued_total = p.queued_total,
    rejected_total = p.rejected_total, upstream_429_total = p.upstream_429_total,
    pool_no = p.pool_no, head_eta = -1,
    cold_until = (p.cold_until and p.cold_until > now) and p.cold_until or 0}
  for _, f in ipairs(CONFIG_FIELDS) do out['cfg_' .. f] = p[f] end
  for _, f in ipairs(CONFIG_LATER) do out['cfg_' .. f[1]] = p[f[1]] end
  for b = 0, NB - 1 do
    out['cfg_' .. LIMIT_FIELD[b + 1]] = p['lim' .. b]  -- as adopted from headers
    out['limit' .. b] = p['lim' .. b]
    if limited(p, b) then
      out['level' .. b] = p['lv' .. b]
      out['capacity' .. b] = capacity(p, b)
      out['refill' .. b] = capacity(p, b) / 60.0
    else
      out['level' .. b], out['capacity' .. b], out['refill' .. b] = 0, 0, 0
    end
  end
  local id = queue_head(p)
  if id then out.head_eta = eta_for(p, need_of(load_ticket(id)), 0, p.last_refill) end
  return out
end

-- The pool's agents, as "name\31role\31weight\31repeats\31estimate_error\31alert\31leases
-- \31queued\31tokens_in\31tokens_out\31got_429" strings in fields a1, a2, ... The weight is
-- the one its next request of the same kind would get: its last request's base with the
-- repeats as they are now (a settle may have changed them since; src/engine/agent.c).
local function agents(p, args, now)
  local out = {}
  for i, name in ipairs(redis.call('SMEMBERS', K('agents'))) do
    local a = agent_get(name, false)
    if a then
      local w = a.weight * 0.5 ^ a.repeats
      if w < p.weight_floor then w = p.weight_floor end
      out['a' .. i] = table.concat({name, a.role, F(w), F(a.repeats),
        F(agent_mean_error(a)), F(a.alert), F(a.leases), F(a.queued), F(a.tin), F(a.tout),
        F(a.g429)}, '\31')
    end
  end
  return out
end

-- Forgets agent args.agent in this pool when it holds nothing a new agent would not (the
-- rules and why: src/engine/forget.c; there the agent spans pools, here each pool's
-- record goes on its own). Returns {forgotten = 1}, {forgotten = 0, kept = why} or
-- {forgotten = -1} (not known): never fails after pool_advance, whose work must be kept.
local function agent_forget(p, args, now)
  pool_advance(p, now)
  local name = args.agent or ''
  local a = agent_get(name, false)
  local hkey = 'a:' .. name
  if not a then
    -- A configured team member is the operator's even before its first request (the
    -- engine keeps its record from the configuration on; caps alone make no record).
    if p.member_of[name] then return {forgotten = 0, kept = 'it is a member of a team'} end
    return {forgotten = -1}
  end
  local why
  local st = CP.holder_state(p, {key = hkey}, false)
  if a.leases > 0 or a.queued > 0 then
    why = 'it holds a lease or a ticket'
  elseif p.member_of[name] then
    why = 'it is a member of a team'
  elseif p.caps_of and p.caps_of[hkey] then
    why = 'its caps hold state'
  elseif st then
    local c = CP.holder_caps(p, hkey)
    local hour, day = CP.budget_now(c, st, now)
    if st.inf > 0 or st.np > 0 or st.nw > 0 or (CP.has_budget(c) and (hour < c.bh or day < c.bd)) then
      why = 'its caps hold state'
    end
    for b = 0, NB - 1 do
      if not why and CP.level_now(p, {c = c}, st, b, now) < CP.cap_capacity(p, c, b) then
        why = 'its caps hold state'
      end
    end
  end
  if not why and p.ablk_until > now then
    -- its own retry-after holds it (forgetting would lift it)
    local v = redis.call('HGET', K('ablk'), name)
    if v and tonumber(v) > now then
      why = "its prompt cache, fair-queue tag or own retry-after in a pool is not a new agent's"
    end
  end
  local cache = cache_view(name)  -- the cache of its name, warm through anyone's call
  if not why then
    local g = team_get(DEFAULT_TEAM, false)
    if cache_warm(p, cache, now) or a.lf > (g and g.vtime or 0) then
      why = "its prompt cache, fair-queue tag or own retry-after in a pool is not a new agent's"
    end
  end
  if why then return {forgotten = 0, kept = why} end
  if cache then drop(cache.key) end  -- cold: a lease naming it writes it anew at its settle
  drop(agent_key(name))
  redis.call('SREM', K('agents'), name)
  if st then
    drop(CP.holder_key(hkey))
    redis.call('DEL', S.prefix .. 'hl:' .. hkey, S.prefix .. 'pk:' .. hkey)
    redis.call('SREM', K('pks'), hkey)
  end
  return {forgotten = 1}
end

-- What a replica's local share granted while Redis was away (less what it refunded),
-- charged to the shared buckets now: c0..c3 per bucket (negative: a refund, up to
-- capacity). `key` names the charge; a key already applied is not applied again, so a
-- charge whose answer was lost can be sent again.
local function charge(p, args, now)
  local key = args.key
  if not key or key == '' then fail('invalid_request', 'key is required') end
  pool_advance(p, now)
  if redis.call('HSETNX', K('idem'), key, '1') == 0 then return {applied = 0} end
  redis.call('ZADD', K('idemz'), F(now), key)
  local due = now + p.idempotency_ttl_s
  if due < p.purge_at then p.purge_at = due end
  for b = 0, NB - 1 do
    local c = CALL.hold_take(p, b, num(args, 'c' .. b, 0))
    if limited(p, b) and c ~= 0 then adjust(p, b, -c) end
  end
  drain(p, now)
  return {applied = 1}
end

local function wrap(fn, opts)
  return function(keys, argv) return pool_call(keys, argv, fn, opts) end
end

redis.register_function('sluice_version', function() return VERSION end)
redis.register_function{function_name = 'sluice_configure', callback = wrap(configure, {create = true})}
redis.register_function('sluice_request', wrap(request, {validate = validate_request}))
redis.register_function('sluice_ticket', wrap(ticket_poll))
redis.register_function('sluice_ticket_hold', wrap(ticket_hold))
redis.register_function('sluice_ticket_cancel', wrap(ticket_cancel))
redis.register_function('sluice_settle', wrap(settle))
redis.register_function('sluice_cancel', wrap(cancel))
redis.register_function('sluice_extend', wrap(extend))
redis.register_function('sluice_advance', wrap(advance))
redis.register_function('sluice_resync', wrap(resync))
redis.register_function('sluice_forget', wrap(forget))
redis.register_function('sluice_pool', wrap(pool_info))
redis.register_function('sluice_agents', wrap(agents))
redis.register_function('sluice_agent_forget', wrap(agent_forget))
redis.register_function('sluice_charge', wrap(charge))

-- ---- registry, heartbeats, task graph (keys that span pools) ----
-- Ports: src/engine/graph.c (the task graph); registry and heartbeats are Redis-only (read by
--  src/backend/redis/conn.c).

-- KEYS[1] = sluice:{registry}:pools; ARGV[1] = pool name. Returns the pool's number
-- (1..4095; 4096..8191 number the replicas' local fail-open ids), assigning the next free
-- one on first sight.
-- ARGV[2], optional: the number the caller knew the pool by. A registry that lost its
-- state gives it back when still free, so ids of other pools are not routed to it.
-- '#no:<n>' remembers which name holds a number.
redis.register_function('sluice_register', function(keys, argv)
  local no = redis.call('HGET', keys[1], argv[1])
  if no then return no end
  local want = tonumber(argv[2] or '')
  local next_no = tonumber(redis.call('HGET', keys[1], '#next') or '0')
  local n
  if want and want >= 1 and want <= 4095 and want > next_no and
      redis.call('HSETNX', keys[1], '#no:' .. want, argv[1]) == 1 then
    n = want
    redis.call('HSET', keys[1], '#next', n)
  else
    repeat
      n = redis.call('HINCRBY', keys[1], '#next', 1)
      if n > 4095 then return redis.error_reply('sluice: more than 4095 pools') end
    until redis.call('HSETNX', keys[1], '#no:' .. n, argv[1]) == 1
  end
  redis.call('HSET', keys[1], argv[1], n)
  return tostring(n)
end)

-- KEYS[1] = sluice:{registry}:pools; ARGV[1] = replica id. The replica's number for the
-- ids of its local fail-open decisions, 4096..6143, a new one for each replica id
-- (after 2048 ids they repeat; the replica's ids also count from its start time;
-- 6144..8191 are for replicas that hash their id, Redis being away when they started).
redis.register_function('sluice_replica_no', function(keys, argv)
  local no = redis.call('HGET', keys[1], '~r:' .. argv[1])
  if no then return no end
  local n = redis.call('HINCRBY', keys[1], '#rnext', 1)
  no = tostring(4096 + (n - 1) % 2048)
  redis.call('HSET', keys[1], '~r:' .. argv[1], no)
  return no
end)

-- KEYS[1] = sluice:{registry}:replicas; ARGV = replica id, window_s ("" time = TIME).
-- Records the replica as alive; returns {replicas seen within the window, Redis time}.
redis.register_function('sluice_heartbeat', function(keys, argv)
  local now = clock()
  redis.call('ZADD', keys[1], F(now), argv[1])
  redis.call('ZREMRANGEBYSCORE', keys[1], '-inf', F(now - tonumber(argv[2])))
  return {redis.call('ZCARD', keys[1]), F(now)}
end)

local TASK_STATE = {waiting = true, running = true, done = true}

-- KEYS[1] = sluice:{graph}:tasks; ARGV = id, role, state, dep1, dep2, ... (validated
-- by the caller against its roles).
redis.register_function('sluice_task_put', function(keys, argv)
  if not valid_name(argv[1]) or not TASK_STATE[argv[3]] then
    return redis.error_reply('sluice: bad task')
  end
  local deps = {}
  for i = 4, #argv do
    if argv[i] == argv[1] or not valid_name(argv[i]) then
      return redis.error_reply('sluice: task ' .. argv[1] .. ' cannot depend on ' .. argv[i])
    end
    deps[#deps + 1] = argv[i]
  end
  redis.call('HSET', keys[1], argv[1], argv[2] .. '\31' .. argv[3] .. '\31' ..
             table.concat(deps, '\31'))
  return 'ok'
end)

redis.register_function('sluice_task_delete', function(keys, argv)
  return redis.call('HDEL', keys[1], argv[1])
end)



-- Returns {the task's unblocks, its remaining chain}, or -1 when the task is not in the
-- graph.
redis.register_function{function_name = 'sluice_task_unblocks', flags = {'no-writes'},
  callback = function(keys, argv)
    if redis.call('HEXISTS', keys[1], argv[1]) == 0 then return -1 end
    local all = redis.call('HGETALL', keys[1])
    return {task_unblocks(all, argv[1]), task_depth(all, argv[1])}
  end}

-- Returns {role, unblocks, remaining chain} of the task, or -1 when it is not in the
-- graph: what a request on a Redis Cluster sends as task_role, graph_unblocks and
-- graph_depth (there the graph is in another slot than the pool; on one node the request
-- reads it itself).
redis.register_function{function_name = 'sluice_task_role', flags = {'no-writes'},
  callback = function(keys, argv)
    local rec = redis.call('HGET', keys[1], argv[1])
    if not rec then return -1 end
    local all = redis.call('HGETALL', keys[1])
    return {string.match(rec, '^([^\31]*)'), task_unblocks(all, argv[1]), task_depth(all, argv[1])}
  end}

-- Every task as {id, "role\31state\31deps...", unblocks}.
redis.register_function{function_name = 'sluice_tasks', flags = {'no-writes'},
  callback = function(keys, argv)
    local all = redis.call('HGETALL', keys[1])
    local out = {}
    for i = 1, #all, 2 do
      out[#out + 1] = {all[i], all[i + 1], task_unblocks(all, all[i])}
    end
    return out
  end}
