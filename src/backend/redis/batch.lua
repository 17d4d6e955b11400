-- batch.lua - the batch processing queues (docs/proxy.md, "The processing queue"), a section of the sluice library.
--
-- Ports: src/backend/batchq.c (sl__batchq_apply), the memory backend's rules, answer for
-- answer. fcall_lua.cmake appends this file to sluice.lua inside a function of its own
-- (sluice.lua's chunk is near Lua's 200 locals), so it sees sluice.lua's locals
-- (args_table, num, clock) and adds none to them.
--
-- KEYS[1] = sluice:{pool}:batchq, a hash: batch id -> requests counted, and the field ""
-- (no id is empty) -> their sum; KEYS[2] = sluice:{pool}:batchq_exp, a zset: batch id ->
-- when it is forgotten (Unix seconds). Both live as long as their longest entry. ARGV:
-- name/value pairs of fcall.def (batch_op, batch, new_batch, requests, max_requests,
-- max_entries, ttl). Replies {'counted', 0|1, 'queued_requests', n}. A release of an id
-- not counted (another replica saw the batch end first) changes nothing: each batch id
-- is counted once.

local OPS = {count = true, add = true, bind = true, release = true}

local function score(x)
  return string.format('%.6f', x)
end

local function drop(h, z, id)
  local n = redis.call('HGET', h, id)
  if not n then return false end
  redis.call('HDEL', h, id)
  redis.call('HINCRBY', h, '', string.format('%d', 0 - tonumber(n))) -- never "-0"
  redis.call('ZREM', z, id)
  return true
end

local function put(h, z, id, requests, ttl, now)
  drop(h, z, id)
  redis.call('HSET', h, id, string.format('%d', requests))
  redis.call('HINCRBY', h, '', string.format('%d', requests))
  redis.call('ZADD', z, score(now + ttl), id)
  local live_s = math.ceil(ttl) + 60
  for _, key in ipairs({h, z}) do
    if redis.call('TTL', key) < live_s then redis.call('EXPIRE', key, live_s) end
  end
end

local function queued(h)
  return tonumber(redis.call('HGET', h, '') or '0')
end

redis.register_function('sluice_batch_queue', function(keys, argv)
  local a = args_table(argv, 1)
  local op = a.batch_op
  if not OPS[op] then
    return redis.error_reply('sluice: batch_op "' .. tostring(op) ..
                             '" is not count, add, bind or release')
  end
  local h, z = keys[1], keys[2]
  local now = clock()
  local expired = redis.call('ZRANGEBYSCORE', z, '-inf', score(now))
  for i = 1, #expired do drop(h, z, expired[i]) end
  local counted = 0
  if op == 'add' then
    local requests = num(a, 'requests', 0)
    if redis.call('HEXISTS', h, a.batch) == 0 and
       redis.call('ZCARD', z) < num(a, 'max_entries', 0) and
       queued(h) + requests <= num(a, 'max_requests', 0) then
      put(h, z, a.batch, requests, num(a, 'ttl', 0), now)
      counted = 1
    end
  elseif op == 'bind' then
    put(h, z, a.new_batch, num(a, 'requests', 0), num(a, 'ttl', 0), now)
    if a.batch ~= a.new_batch then drop(h, z, a.batch) end
    counted = 1
  elseif op == 'release' then
    if drop(h, z, a.batch) then counted = 1 end
  end
  return {'counted', counted, 'queued_requests', queued(h)}
end)
